"""Loading the embedding tables of a Hugging Face BERT checkpoint (safetensors).

The file is memory-mapped read-only: float32 and float64 tables are NumPy
views of the file's pages (``numpy.memmap``), never copied, so loading is
instant, the tables cost no private memory, and processes that load the same
checkpoint share one copy in the page cache.

The safetensors format is read here directly (an 8-byte little-endian header
length, a JSON header of ``{name: {"dtype", "shape", "data_offsets"}}``, then
the raw little-endian tensor data): no dependency beyond NumPy is needed to
load a checkpoint. The header is validated the way the ``safetensors``
package validates it (offsets inside the file, no holes, no overlaps, sizes
matching shapes), so a truncated or corrupt file is an error, not garbage.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from . import _checks as C

if TYPE_CHECKING:
    from ._model import BertEmbeddings

    B = TypeVar("B", bound=BertEmbeddings)

#: layer_norm_eps when the checkpoint has no config.json (BertConfig's default).
DEFAULT_LN_EPS = 1e-12

#: The weights file of a Hugging Face model directory.
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"

#: The same limit as the safetensors package: larger headers are refused.
MAX_HEADER_BYTES = 100_000_000

#: Bytes per element of every safetensors dtype (for validating offsets).
_ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}

#: The dtypes of tables: float32 and float64 are mapped as they are; float16
#: and bfloat16 are widened to float32 (a copy).
_FLOAT_DTYPES = {
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
}

#: Tensor names, relative to the prefix (``""``, ``"bert."``, ...).
TOKEN = "embeddings.word_embeddings.weight"
POSITION = "embeddings.position_embeddings.weight"
SEGMENT = "embeddings.token_type_embeddings.weight"
LN_WEIGHT = ("embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma")
LN_BIAS = ("embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta")

#: Prefixes tried first, in this order, when several models share one file.
_PREFERRED_PREFIXES = ("", "bert.", "model.")


class SafetensorsFile:
    """The parsed header of a safetensors file, and read-only views of its tensors.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.safetensors`` file.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        The file is truncated or its header is not valid safetensors.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as fh:
                head = fh.read(8)
                if len(head) < 8:
                    raise self._error(
                        f"truncated: {size} bytes, too short for a safetensors header"
                    )
                (n,) = struct.unpack("<Q", head)
                if n > MAX_HEADER_BYTES or 8 + n > size:
                    raise self._error(
                        f"header length {n} does not fit in a file of {size} bytes "
                        "(truncated, or not a safetensors file)"
                    )
                raw = fh.read(n)
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.path}: no such file") from None
        self.data_start = 8 + n
        self.data_size = size - self.data_start
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._error(f"the header is not valid JSON ({exc})") from None
        if not isinstance(header, dict):
            raise self._error(f"the header is a JSON {type(header).__name__}, not an object")
        header.pop("__metadata__", None)
        self.entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, entry in header.items():
            self.entries[name] = self._parse_entry(name, entry)
        self._check_layout()

    def _error(self, message: str) -> ValueError:
        return ValueError(f"{self.path}: {message}")

    def _parse_entry(self, name: str, entry: Any) -> tuple[str, tuple[int, ...], int, int]:
        bad = self._error(
            f"malformed header entry for {name!r}: expected "
            '{"dtype": str, "shape": [int, ...], "data_offsets": [begin, end]}, '
            f"got {entry!r}"
        )
        if not isinstance(entry, Mapping):
            raise bad
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or not isinstance(shape, list):
            raise bad
        if not isinstance(offsets, list) or len(offsets) != 2:
            raise bad
        ints = [*shape, *offsets]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
            raise bad
        begin, end = offsets
        if begin > end:
            raise bad
        itemsize = _ITEMSIZE.get(dtype)
        if itemsize is not None and math.prod(shape) * itemsize != end - begin:
            raise self._error(
                f"tensor {name!r} of dtype {dtype} and shape {tuple(shape)} needs "
                f"{math.prod(shape) * itemsize} bytes, its data_offsets {offsets} span "
                f"{end - begin}"
            )
        return dtype, tuple(shape), begin, end

    def _check_layout(self) -> None:
        spans = sorted((begin, end, name) for name, (_, _, begin, end) in self.entries.items())
        at = 0
        for begin, end, name in spans:
            if begin != at:
                raise self._error(
                    f"tensor {name!r} starts at data byte {begin}, expected {at} "
                    "(the data has a hole or overlapping tensors)"
                )
            at = end
        if at > self.data_size:
            raise self._error(
                f"truncated: the header describes {at} bytes of tensor data, "
                f"the file holds {self.data_size}"
            )
        if at < self.data_size:
            raise self._error(
                f"{self.data_size - at} bytes after the last tensor are not described "
                "by the header"
            )

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def keys(self) -> list[str]:
        """Tensor names, in header order."""
        return list(self.entries)

    def table(self, name: str) -> np.ndarray:
        """A float tensor as a read-only array.

        float32 and float64 are a read-only ``numpy.memmap`` of the file
        (no copy). float16 and bfloat16 are widened to a float32 copy.

        Raises
        ------
        KeyError
            No tensor called `name`.
        TypeError
            The tensor is not a float tensor.
        """
        try:
            dtype, shape, begin, end = self.entries[name]
        except KeyError:
            raise KeyError(f"{self.path}: no tensor {name!r}") from None
        stored = _FLOAT_DTYPES.get(dtype)
        if stored is None:
            raise TypeError(
                f"{self.path}: tensor {name!r} has dtype {dtype}; "
                "expected F32, F64, F16 or BF16"
            )
        if begin == end:
            arr = np.empty(shape, stored)
        else:
            arr = np.memmap(
                self.path, dtype=stored, mode="r", offset=self.data_start + begin, shape=shape
            )
        if dtype == "BF16":  # bfloat16 is the top half of a float32
            arr = (np.asarray(arr).astype(np.uint32) << 16).view(np.float32)
        elif dtype == "F16":
            arr = np.asarray(arr).astype(np.float32)
        elif not (arr.dtype.isnative and arr.flags.aligned):
            # A big-endian machine, or a tensor at an offset that is not a
            # multiple of its item size (never written by safetensors).
            arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
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
            return st.table(prefix + name)
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
    seg = st.table(prefix + SEGMENT) if prefix + SEGMENT in st else None
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
