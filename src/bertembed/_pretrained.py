"""Loading the embedding tables of a Hugging Face BERT checkpoint (safetensors).

The file is memory-mapped read-only: float32 and float64 tables are NumPy
views of the file's pages (``numpy.memmap``), never copied, so loading is
instant, the tables cost no private memory, and processes that load the same
checkpoint share one copy in the page cache.

The file is read by :mod:`bertembed._weights` (NumPy only, the header
validated strictly, so a truncated or corrupt file is an error, not garbage).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from . import _checks as C
from ._weights.safetensors import SafetensorsFile

if TYPE_CHECKING:
    from ._model import BertEmbeddings

    B = TypeVar("B", bound=BertEmbeddings)

#: layer_norm_eps when the checkpoint has no config.json (BertConfig's default).
DEFAULT_LN_EPS = 1e-12

#: The weights file of a Hugging Face model directory.
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"

#: Tensor names, relative to the prefix (``""``, ``"bert."``, ...).
TOKEN = "embeddings.word_embeddings.weight"
POSITION = "embeddings.position_embeddings.weight"
SEGMENT = "embeddings.token_type_embeddings.weight"
LN_WEIGHT = ("embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma")
LN_BIAS = ("embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta")

#: Prefixes tried first, in this order, when several models share one file.
_PREFERRED_PREFIXES = ("", "bert.", "model.")


def _table(st: SafetensorsFile, name: str) -> np.ndarray:
    """A table as the layer takes it: F32/F64 as mapped, F16 and BF16 widened to a float32 copy."""
    arr = st.array(name)
    if st.info(name).dtype == "BF16":  # raw bits: bfloat16 is the top half of a float32
        arr = (np.asarray(arr).astype(np.uint32) << 16).view(np.float32)
    elif arr.dtype == np.float16:
        arr = np.asarray(arr).astype(np.float32)
    arr.flags.writeable = False
    return arr


def _find_prefix(st: SafetensorsFile) -> str:
    """The prefix of the embedding tensors' names (``""``, ``"bert."``, ...).

    Any of the embedding tensors identifies it, so that a checkpoint missing
    its token table is reported as missing ``<prefix>embeddings.word_embeddings.weight``.
    """
    suffixes = (TOKEN, POSITION, SEGMENT, *LN_WEIGHT, *LN_BIAS)
    found = {
        name[: -len(suffix)]
        for name in st.keys()
        for suffix in suffixes
        if name.endswith(suffix) and (name == suffix or name[: -len(suffix)].endswith("."))
    }
    if not found:
        raise KeyError(
            f"{st.path}: no tensor {TOKEN!r} (nor 'bert.{TOKEN}' or any "
            f"'<prefix>.{TOKEN}'): not a BERT checkpoint?"
        )
    for prefix in _PREFERRED_PREFIXES:
        if prefix in found:
            return prefix
    if len(found) > 1:
        names = ", ".join(repr(p) for p in sorted(found))
        raise ValueError(
            f"{st.path}: embedding tensors under several prefixes ({names}); "
            "cannot tell which model to load"
        )
    return found.pop()


def _required(st: SafetensorsFile, prefix: str, names: tuple[str, ...]) -> np.ndarray:
    for name in names:
        if prefix + name in st:
            return _table(st, prefix + name)
    also = "".join(f" or {prefix + n!r}" for n in names[1:])
    raise KeyError(f"{st.path}: no tensor {prefix + names[0]!r}{also}")


def _read_config(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path}: no such file (a model directory needs config.json next to "
            f"{WEIGHTS_NAME}; or pass the .safetensors file itself to use "
            f"layer_norm_eps={DEFAULT_LN_EPS})"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object, got a {type(config).__name__}")
    return config


def _eps_from_config(config: dict[str, Any], path: Path) -> float:
    kind = config.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise ValueError(
            f"{path}: position_embedding_type is {kind!r}; only 'absolute' position "
            "embeddings are summed into the input embeddings"
        )
    eps = config.get("layer_norm_eps", DEFAULT_LN_EPS)
    try:
        return C.as_eps(eps)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: layer_norm_eps: {exc}") from None


def resolve(path: str | os.PathLike[str]) -> tuple[Path, Path | None]:
    """The weights file and the config file (None for a bare file) of `path`.

    Raises
    ------
    FileNotFoundError
        `path` does not exist, or is a directory without model.safetensors.
    """
    p = Path(os.fspath(path)).expanduser()
    if p.is_dir():
        weights = p / WEIGHTS_NAME
        if not weights.is_file():
            hint = ""
            if (p / (WEIGHTS_NAME + ".index.json")).is_file():
                hint = " (sharded checkpoints are not supported)"
            elif (p / "pytorch_model.bin").is_file():
                hint = " (pytorch_model.bin is not read: save the model with safetensors)"
            raise FileNotFoundError(f"{weights}: no such file{hint}")
        return weights, p / CONFIG_NAME
    if p.is_file():
        return p, None
    raise FileNotFoundError(f"{p}: no such file or directory")


def load(cls: type[B], path: str | os.PathLike[str], *, dtype: Any = None) -> B:
    """Build a ``cls`` (a :class:`~bertembed.BertEmbeddings`) from a checkpoint.

    Parameters
    ----------
    cls : type
        :class:`~bertembed.BertEmbeddings` or a subclass.
    path : str or os.PathLike
        A Hugging Face model directory (``config.json`` and
        ``model.safetensors``), or a ``.safetensors`` file (then
        ``layer_norm_eps`` is 1e-12, BERT's default).
    dtype : {None, numpy.float32, numpy.float64}
        Result dtype of the layer. None: the tables' dtype (float32 for
        F32, F16 and BF16 checkpoints, float64 for F64). The tables are not
        converted: float32 tables with ``dtype=np.float64`` are summed in
        float64.

    Returns
    -------
    BertEmbeddings
        A layer whose float32/float64 tables are read-only memory maps of the
        file. It remembers `path` (made absolute) and `dtype`: pickling it
        stores just those, and unpickling maps the file again.

    Raises
    ------
    FileNotFoundError
        A missing path, a directory without ``model.safetensors`` or
        ``config.json``.
    ValueError
        A truncated or malformed file or config.json.
    KeyError
        A missing tensor (the message names the file and the tensor).
    TypeError
        A table of a dtype other than F32, F64, F16, BF16; a bad `dtype`.

    Notes
    -----
    Tensor names are those of ``BertModel`` (``embeddings.word_embeddings.weight``,
    ``embeddings.position_embeddings.weight``,
    ``embeddings.token_type_embeddings.weight``,
    ``embeddings.LayerNorm.weight``/``bias``), with any prefix such as ``bert.``
    (``BertForMaskedLM`` and other heads) or ``model.``; the old
    ``LayerNorm.gamma``/``beta`` are accepted. The token-type table is
    optional (no segment term without it); the other four are required.

    Examples
    --------
    >>> import numpy as np
    >>> from bertembed import BertEmbeddings
    >>> layer = BertEmbeddings.from_pretrained("path/to/bert-base-uncased")  # doctest: +SKIP
    >>> layer([[101, 7592, 102]]).shape  # doctest: +SKIP
    (1, 3, 768)
    """
    rdtype = None if dtype is None else C.as_result_dtype(dtype, np.dtype(np.float32))
    weights, config_path = resolve(path)
    eps = DEFAULT_LN_EPS
    if config_path is not None:
        eps = _eps_from_config(_read_config(config_path), config_path)
    st = SafetensorsFile(weights)
    prefix = _find_prefix(st)
    tok = _required(st, prefix, (TOKEN,))
    pos = _required(st, prefix, (POSITION,))
    seg = _table(st, prefix + SEGMENT) if prefix + SEGMENT in st else None
    ln_weight = _required(st, prefix, LN_WEIGHT)
    ln_bias = _required(st, prefix, LN_BIAS)
    try:
        layer = cls(tok, pos, seg, ln_weight=ln_weight, ln_bias=ln_bias, ln_eps=eps, dtype=rdtype)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{weights}: {exc}") from exc
    layer._source = str(Path(os.fspath(path)).expanduser().resolve())
    return layer


def reopen(
    cls: type[B], source: str, dtype: str, expected: tuple[Any, ...]
) -> B:
    """Unpickle a layer loaded by :func:`load`: map its checkpoint again.

    `expected` is the layer's ``(vocab_size, max_positions, type_vocab_size,
    hidden_size, has_layer_norm, ln_eps)`` when it was pickled; a checkpoint
    that no longer matches is a ValueError.
    """
    layer = load(cls, source, dtype=dtype)
    now = layer._fingerprint()
    if now != tuple(expected):
        raise ValueError(
            f"{source}: the checkpoint changed since the layer was pickled: "
            f"(vocab_size, max_positions, type_vocab_size, hidden_size, layer_norm, ln_eps) "
            f"was {tuple(expected)}, is {now}"
        )
    return layer
