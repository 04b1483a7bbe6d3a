"""The allow-list unpickler for the ``data.pkl`` of a ``torch.save`` archive.

A state dict pickled by torch references only a few globals: the dict type
(``collections.OrderedDict``), the functions that rebuild a tensor from a
storage (``torch._utils._rebuild_tensor_v2`` and its relatives) and the
storage types that name a dtype (``torch.FloatStorage``...). The unpickler
here resolves exactly those names, to stand-ins written here that only record
what the pickle says (a :class:`TensorRef` per tensor); every other global is
refused before anything is called. Nothing from the file is ever imported or
run, and torch is not needed.

The stand-ins are immutable (``__slots__ = ()`` or named tuples), so a
``BUILD`` opcode cannot change them, and they check their arguments: a tensor
whose size and strides would read outside its storage is an error here, and
again when the array is made (NumPy checks the extent against the buffer).
"""

from __future__ import annotations

import collections
import io
import math
import pickle
from collections.abc import Callable
from typing import Any, NamedTuple

from .base import ITEMSIZE

#: Largest int accepted for a size, stride, offset or element count.
_MAX_INT = 2**62


class UnsafeCheckpointError(ValueError):
    """A pickle references a global that a state dict does not need.

    Nothing from the file was imported or run.
    """


class BadPickle(ValueError):
    """The pickle is not the state dict it claims to be (the message is completed by the caller)."""


class StorageType(NamedTuple):
    """Stand-in for a torch storage type such as ``torch.FloatStorage``."""

    torch_name: str
    dtype: str


class Storage(NamedTuple):
    """A storage the pickle refers to: a zip member ``data/<key>`` of `numel` elements."""

    key: str
    dtype: str
    numel: int


class TensorRef(NamedTuple):
    """A tensor as the pickle describes it: a strided view of a storage (in elements)."""

    storage: Storage
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def dtype(self) -> str:
        return self.storage.dtype


#: torch's legacy storage types (how torch.save names a storage's dtype).
STORAGE_TYPES = {
    "DoubleStorage": "F64",
    "FloatStorage": "F32",
    "HalfStorage": "F16",
    "BFloat16Storage": "BF16",
    "LongStorage": "I64",
    "IntStorage": "I32",
    "ShortStorage": "I16",
    "CharStorage": "I8",
    "ByteStorage": "U8",
    "BoolStorage": "BOOL",
    "ComplexFloatStorage": "C64",
    "ComplexDoubleStorage": "C128",
}


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_INT:
        raise BadPickle(f"{what} must be an int in [0, 2**62], got {value!r}")
    return value


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple):
        raise BadPickle(f"{what} must be a tuple of ints, got {type(value).__name__}")
    return tuple(_count(v, f"{what}[{i}]") for i, v in enumerate(value))


def tensor_ref(storage: Any, offset: Any, size: Any, stride: Any) -> TensorRef:
    """A checked :class:`TensorRef`: every element it addresses lies inside the storage."""
    if not isinstance(storage, Storage):
        raise BadPickle(f"a tensor's storage must be a persistent storage reference, got {type(storage).__name__}")
    offset = _count(offset, "storage_offset")
    shape = _ints(size, "size")
    strides = _ints(stride, "stride")
    if len(shape) != len(strides):
        raise BadPickle(f"size {shape} and stride {strides} have different lengths")
    if math.prod(shape) * ITEMSIZE[storage.dtype] > _MAX_INT:
        raise BadPickle(f"size {shape} is too large")
    if 0 not in shape:
        last = offset + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        if last >= storage.numel:
            raise BadPickle(
                f"a tensor of size {shape}, stride {strides} at offset {offset} reads element "
                f"{last} of storage {storage.key!r}, which has {storage.numel} elements"
            )
    elif offset > storage.numel:
        raise BadPickle(
            f"storage_offset {offset} is past the end of storage {storage.key!r} ({storage.numel} elements)"
        )
    return TensorRef(storage, offset, shape, strides)


class _StandIn:
    """Base of the callable stand-ins: no instance attributes, so BUILD cannot alter one."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<stand-in for {type(self).__name__}>"


class _RebuildTensorV2(_StandIn):
    __slots__ = ()

    def __call__(
        self, storage: Any, storage_offset: Any, size: Any, stride: Any,
        requires_grad: Any = False, backward_hooks: Any = None, metadata: Any = None,
    ) -> TensorRef:
        return tensor_ref(storage, storage_offset, size, stride)


class _RebuildTensor(_StandIn):
    __slots__ = ()

    def __call__(self, storage: Any, storage_offset: Any, size: Any, stride: Any) -> TensorRef:
        return tensor_ref(storage, storage_offset, size, stride)


class _RebuildParameter(_StandIn):
    __slots__ = ()

    def __call__(self, data: Any, requires_grad: Any, backward_hooks: Any, state: Any = None) -> TensorRef:
        if not isinstance(data, TensorRef):
            raise BadPickle(f"a parameter's data must be a tensor, got {type(data).__name__}")
        return data


#: (module, name) -> what the pickle gets instead. collections.OrderedDict is
#: the real type: a C type whose attributes cannot be set, built from data only.
ALLOWED: dict[tuple[str, str], object] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _RebuildTensorV2(),
    ("torch._utils", "_rebuild_tensor"): _RebuildTensor(),
    ("torch._utils", "_rebuild_parameter"): _RebuildParameter(),
    ("torch._utils", "_rebuild_parameter_with_state"): _RebuildParameter(),
    **{("torch", name): StorageType(name, dtype) for name, dtype in STORAGE_TYPES.items()},
}


class _Refused(Exception):
    def __init__(self, module: str, name: str) -> None:
        super().__init__(module, name)
        self.module, self.name = module, name


class _StateDictUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, storage_bytes: Callable[[str], int | None]) -> None:
        super().__init__(io.BytesIO(data))
        self._storage_bytes = storage_bytes
        self._storages: dict[str, Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED[(module, name)]
        except (KeyError, TypeError):
            raise _Refused(str(module), str(name)) from None

    def persistent_load(self, pid: Any) -> Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise BadPickle(f"unknown persistent id {pid!r} (expected ('storage', type, key, location, numel))")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, StorageType):
            raise BadPickle(f"persistent id {pid!r}: {kind!r} is not a storage type")
        if not isinstance(key, str):
            raise BadPickle(f"persistent id {pid!r}: the key must be a str")
        numel = _count(numel, f"the element count of storage {key!r}")
        storage = Storage(key, kind.dtype, numel)
        seen = self._storages.setdefault(key, storage)
        if seen != storage:
            raise BadPickle(
                f"storage {key!r} is referenced as {seen.numel} x {seen.dtype} and as "
                f"{numel} x {kind.dtype}"
            )
        if seen is storage:
            need = numel * ITEMSIZE[kind.dtype]
            have = self._storage_bytes(key)
            if have is None:
                raise BadPickle(f"storage {key!r} has no zip member data/{key}")
            if have != need:
                raise BadPickle(
                    f"storage {key!r} ({numel} x {kind.dtype}) needs {need} bytes, "
                    f"its zip member holds {have}"
                )
        return storage


def load_state_dict(
    data: bytes, where: str, storage_bytes: Callable[[str], int | None]
) -> dict[str, TensorRef]:
    """The tensors of the state dict pickled in `data`, as :class:`TensorRef`.

    Parameters
    ----------
    data : bytes
        The pickle (``data.pkl`` of the archive).
    where : str
        What messages name (the file).
    storage_bytes : callable
        ``storage_bytes(key)``: the size in bytes of the storage's zip member,
        None if the archive has no such member.

    Returns
    -------
    dict
        Tensor name -> :class:`TensorRef`, in the pickle's order. Entries of
        the dict that are not tensors are left out.

    Raises
    ------
    UnsafeCheckpointError
        The pickle references a global not on the allow-list (nothing was run).
    ValueError
        The pickle is malformed or not a dict of tensors.

    Examples
    --------
    >>> import pickle
    >>> load_state_dict(pickle.dumps({"n": 1}), "x.bin", lambda key: None)
    {}
    >>> load_state_dict(pickle.dumps(print), "x.bin", lambda key: None)
    Traceback (most recent call last):
    ...
    bertembed._weights.torch_pickle.UnsafeCheckpointError: x.bin: refusing to load: the pickle references
    the global 'builtins.print', ...
    """
    unpickler = _StateDictUnpickler(data, storage_bytes)
    try:
        obj = unpickler.load()
    except _Refused as exc:
        raise UnsafeCheckpointError(
            f"{where}: refusing to load: the pickle references the global "
            f"'{exc.module}.{exc.name}', which a state dict of tensors does not need "
            "(allowed: collections.OrderedDict, torch._utils._rebuild_tensor_v2 and "
            "its relatives, torch storage types); nothing from the file was run"
        ) from None
    except BadPickle as exc:
        raise ValueError(f"{where}: {exc}") from None
    except Exception as exc:  # malformed pickle: pickle's, dict's and tuple's own errors
        raise ValueError(f"{where}: not a valid state dict pickle ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: the pickle holds a {type(obj).__name__}, not a state dict")
    tensors = {}
    for name, value in obj.items():
        if not isinstance(name, str):
            raise ValueError(f"{where}: the state dict has a key {name!r} that is not a str")
        if isinstance(value, TensorRef):
            tensors[name] = value
    if not tensors:
        nested = [
            k for k, v in obj.items() if isinstance(v, dict) and any(isinstance(t, TensorRef) for t in v.values())
        ]
        if nested:
            raise ValueError(
                f"{where}: the tensors are nested under {nested[0]!r}, not at the top of the dict; "
                "save the state dict itself"
            )
    return tensors
