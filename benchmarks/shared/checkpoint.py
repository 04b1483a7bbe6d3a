"""A synthetic checkpoint on disk: the input of the scripts that time loading and converting.

:func:`write_checkpoint` writes an XLM-RoBERTa-shaped embeddings checkpoint
(the multilingual vocabulary whose token table is most of the model) from
the harness's own random tables (:func:`~bertembed._bench.data.make_inputs`,
fixed seed), with the package's safetensors writer. ``benchmarks/load_checks.py``,
``benchmarks/table_conversion.py`` and ``benchmarks/trimming.py`` read it.
"""

from __future__ import annotations

import json
from pathlib import Path

from bertembed._bench.cases import BIG_VOCAB
from bertembed._bench.data import Case, make_inputs
from bertembed._checkpoints.safetensors_writer import write_safetensors

#: XLM-R's position rows (512 + the two that the padding rule skips) and its tensors' prefix.
XLMR_POSITIONS = 514
XLMR_PREFIX = "roberta.embeddings."


def write_checkpoint(
    directory: str | Path, *, vocab: int = BIG_VOCAB, hidden: int = 768, positions: int = XLMR_POSITIONS, seed: int = 0
) -> Path:
    """An XLM-R-shaped checkpoint of random float32 tables in ``directory`` (reused when there).

    ``model.safetensors`` (token, position and one token-type table,
    LayerNorm weight and bias) and a ``config.json`` of model type
    ``xlm-roberta`` (padding rule, pad id 1, ``layer_norm_eps`` 1e-5).

    Parameters
    ----------
    directory : path
    vocab, hidden, positions : int
        Token rows (default 250,002: a 732 MiB float32 table), hidden size
        and position rows.
    seed : int, default 0

    Returns
    -------
    pathlib.Path
        ``directory``.
    """
    directory = Path(directory)
    weights, config_path = directory / "model.safetensors", directory / "config.json"
    if weights.exists() and config_path.exists():
        config = json.loads(config_path.read_text())
        if (config.get("vocab_size"), config.get("hidden_size")) == (vocab, hidden):
            return directory
    directory.mkdir(parents=True, exist_ok=True)
    tables = make_inputs(Case("checkpoint", "float32", True, 1, 1, V=vocab, P=positions, H=hidden), seed)
    tensors = [
        (XLMR_PREFIX + "word_embeddings.weight", "F32", tables.tok),
        (XLMR_PREFIX + "position_embeddings.weight", "F32", tables.pos),
        (XLMR_PREFIX + "token_type_embeddings.weight", "F32", tables.seg[:1]),
        (XLMR_PREFIX + "LayerNorm.weight", "F32", tables.ln_weight),
        (XLMR_PREFIX + "LayerNorm.bias", "F32", tables.ln_bias),
    ]
    write_safetensors(weights, tensors, {"format": "pt"})
    config = {
        "model_type": "xlm-roberta",
        "hidden_size": hidden,
        "vocab_size": vocab,
        "max_position_embeddings": positions,
        "type_vocab_size": 1,
        "pad_token_id": 1,
        "layer_norm_eps": 1e-5,
    }
    config_path.write_text(json.dumps(config))
    return directory
