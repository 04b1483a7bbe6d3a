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
import pickletools
from collections.abc import Callable
from typing import Any, NamedTuple

from ..._core import dtypes
from ..errors import CheckpointError, UnsafeCheckpointError, short
from .base import ITEMSIZE
from .reading import MAX_PICKLE_BYTES, MAX_PICKLE_OPCODES, too_big

__all__ = ["TensorRef", "UnsafeCheckpointError", "load_state_dict", "prescan"]

#: Deepest nesting of the objects a pickle builds (a state dict nests about 5 levels).
MAX_PICKLE_DEPTH = 100
#: Most items (and MARKs) on the unpickler's stack at once (a state dict's stays below a few thousand).
MAX_PICKLE_STACK = 100_000
#: Most memo entries (a state dict's pickle stores under ten per tensor).
MAX_PICKLE_MEMO = 1_000_000

#: Largest int accepted for a size, stride, offset or element count.
_MAX_INT = 2**62


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


#: torch's legacy storage types (how torch.save names a storage's dtype): the
#: table dtypes' (from the registry) and the others a checkpoint may hold.
STORAGE_TYPES = {
    **{d.torch_storage: d.safetensors for d in dtypes.REGISTRY},
    "LongStorage": "I64",
    "IntStorage": "I32",
    "ShortStorage": "I16",
    "ByteStorage": "U8",
    "BoolStorage": "BOOL",
    "ComplexFloatStorage": "C64",
    "ComplexDoubleStorage": "C128",
}


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_INT:
        raise BadPickle(f"{what} must be an int in [0, 2**62], got {short(value)}")
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
        raise BadPickle(f"size {short(shape)} and stride {short(strides)} have different lengths")
    if math.prod(shape) * ITEMSIZE[storage.dtype] > _MAX_INT:
        raise BadPickle(f"size {short(shape)} is too large")
    if 0 not in shape:
        last = offset + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        if last >= storage.numel:
            raise BadPickle(
                f"a tensor of size {short(shape)}, stride {short(strides)} at offset {offset} reads element "
                f"{last} of storage {short(storage.key)}, which has {storage.numel} elements"
            )
    elif offset > storage.numel:
        raise BadPickle(
            f"storage_offset {offset} is past the end of storage {short(storage.key)} ({storage.numel} elements)"
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
        self,
        storage: Any,
        storage_offset: Any,
        size: Any,
        stride: Any,
        requires_grad: Any = False,
        backward_hooks: Any = None,
        metadata: Any = None,
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
            raise BadPickle(f"unknown persistent id {short(pid)} (expected ('storage', type, key, location, numel))")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, StorageType):
            raise BadPickle(f"persistent id {short(pid)}: {short(kind)} is not a storage type")
        if not isinstance(key, str):
            raise BadPickle(f"persistent id {short(pid)}: the key must be a str")
        if len(key) > 1000:
            raise BadPickle(f"persistent id {short(pid)}: a key of {len(key)} characters")
        numel = _count(numel, f"the element count of storage {short(key)}")
        storage = Storage(key, kind.dtype, numel)
        seen = self._storages.setdefault(key, storage)
        if seen != storage:
            raise BadPickle(
                f"storage {short(key)} is referenced as {seen.numel} x {seen.dtype} and as {numel} x {kind.dtype}"
            )
        if seen is storage:
            need = numel * ITEMSIZE[kind.dtype]
            have = self._storage_bytes(key)
            if have is None:
                raise BadPickle(f"storage {short(key)} has no zip member data/{short(key)[1:-1]}")
            if have != need:
                raise BadPickle(
                    f"storage {short(key)} ({numel} x {kind.dtype}) needs {need} bytes, its zip member holds {have}"
                )
        return storage


def load_state_dict(data: bytes, where: str, storage_bytes: Callable[[str], int | None]) -> dict[str, TensorRef]:
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
    bertembed.UnsafeCheckpointError: x.bin: refusing to load: the pickle references
    the global 'builtins.print', ...
    """
    prescan(data, where)
    unpickler = _StateDictUnpickler(data, storage_bytes)
    try:
        obj = unpickler.load()
    except _Refused as exc:
        raise UnsafeCheckpointError(
            f"{where}: refusing to load: the pickle references the global "
            f"{short(exc.module + '.' + exc.name)}, which a state dict of tensors does not need "
            "(allowed: collections.OrderedDict, torch._utils._rebuild_tensor_v2 and "
            "its relatives, torch storage types); nothing from the file was run"
        ) from None
    except BadPickle as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    except Exception as exc:  # malformed pickle: pickle's, dict's and tuple's own errors
        raise CheckpointError(
            f"{where}: not a valid state dict pickle ({type(exc).__name__}: {_message(exc)})"
        ) from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{where}: the pickle holds a {type(obj).__name__}, not a state dict")
    tensors = {}
    for name, value in obj.items():
        if not isinstance(name, str):
            raise CheckpointError(f"{where}: the state dict has a key {short(name)} that is not a str")
        if isinstance(value, TensorRef):
            tensors[name] = value
    if not tensors:
        nested = [
            k for k, v in obj.items() if isinstance(v, dict) and any(isinstance(t, TensorRef) for t in v.values())
        ]
        if nested:
            raise CheckpointError(
                f"{where}: the tensors are nested under {short(nested[0])}, not at the top of the dict; "
                "save the state dict itself"
            )
    return tensors


def _message(exc: BaseException) -> str:
    """`exc`'s message, bounded (a malformed pickle's own errors may quote its data)."""
    try:
        text = str(exc)
    except Exception:
        return "(no message)"
    if "integer string conversion" in text:  # int(): more digits than Python converts
        return "an integer with too many digits"
    return text if len(text) <= 200 else text[:200] + "..."


def prescan(data: bytes, where: str) -> None:
    """Check a pickle's structure before the unpickler runs it.

    Refuses a pickle over :data:`~bertembed._checkpoints.readers.reading.MAX_PICKLE_BYTES`,
    then walks the opcodes (``pickletools.genops``: nothing is built or run) and
    tracks, for every item on the stack and in the memo, how deeply nested
    the object it stands for is. Refused, naming `where`: malformed opcodes,
    more than :data:`~bertembed._checkpoints.readers.reading.MAX_PICKLE_OPCODES`
    opcodes (the walk stops there, so that neither it nor the unpickler costs
    more than that many opcodes do), nesting deeper than
    :data:`MAX_PICKLE_DEPTH` (CPython's unpickler builds such objects fine,
    but hashing or printing one recurses in C and can crash the process),
    more than :data:`MAX_PICKLE_STACK` items on the stack and more than
    :data:`MAX_PICKLE_MEMO` in the memo.

    Examples
    --------
    >>> import pickle
    >>> prescan(pickle.dumps({"a": (1, 2)}), "x.bin")
    >>> deep = b"\\x80\\x02)" + b"\\x85" * 1000 + b"."  # (((...),),) 1000 deep
    >>> prescan(deep, "x.bin")
    Traceback (most recent call last):
    ...
    bertembed.CheckpointError: x.bin: the pickle nests objects more than 100 deep ...
    """
    if len(data) > MAX_PICKLE_BYTES:
        raise too_big(where, "the pickle", len(data), MAX_PICKLE_BYTES, "MAX_PICKLE_BYTES")
    stack: list[int] = []  # the nesting depth of each stack item
    marks: list[int] = []
    memo: dict[Any, int] = {}
    deepest = 0
    ops = 0
    try:
        for op, arg, pos in pickletools.genops(data):
            ops += 1
            if ops > MAX_PICKLE_OPCODES:
                raise CheckpointError(
                    f"{where}: the pickle holds {ops} opcodes or more (stopped at byte {pos}; a state dict's holds "
                    f"32 per tensor), more than the limit of {MAX_PICKLE_OPCODES} "
                    "(bertembed._checkpoints.readers.reading.MAX_PICKLE_OPCODES): refusing to load it"
                )
            kind, n_outer, to_mark, n_after, rule = _OPS[op]
            if kind == _NEW:  # takes nothing, pushes one object (a constant, a global...): depth 0
                stack.append(0)
                if len(stack) + len(marks) > MAX_PICKLE_STACK:
                    raise BadPickle(f"more than {MAX_PICKLE_STACK} items and MARKs on the stack")
                continue
            if kind == _STOP:
                break
            if kind == _MARK:
                marks.append(len(stack))
                if len(stack) + len(marks) > MAX_PICKLE_STACK:
                    raise BadPickle(f"more than {MAX_PICKLE_STACK} items and MARKs on the stack")
                continue
            if kind == _PUT:
                if not stack:
                    raise BadPickle(f"{op.name} at byte {pos} with an empty stack")
                if op.name != "MEMOIZE" and not (type(arg) is int and 0 <= arg < MAX_PICKLE_MEMO):
                    # (CPython's unpickler sizes its memo table to the index: a 5-byte
                    # LONG_BINPUT would make it allocate gigabytes)
                    raise BadPickle(
                        f"{op.name} at byte {pos} stores memo entry {short(arg)}, beyond the limit of "
                        f"{MAX_PICKLE_MEMO} entries"
                    )
                memo[len(memo) if op.name == "MEMOIZE" else arg] = stack[-1]
                if len(memo) > MAX_PICKLE_MEMO:
                    raise BadPickle(f"more than {MAX_PICKLE_MEMO} memo entries")
                continue
            if kind == _GET:
                if arg not in memo:
                    raise BadPickle(f"{op.name} at byte {pos} reads memo entry {short(arg)}, never stored")
                stack.append(memo[arg])
                if len(stack) + len(marks) > MAX_PICKLE_STACK:
                    raise BadPickle(f"more than {MAX_PICKLE_STACK} items and MARKs on the stack")
                continue
            popped: list[int] = []  # outer items first, then the slice since the MARK
            if to_mark:
                if not marks:
                    raise BadPickle(f"{op.name} at byte {pos} without a MARK")
                at = marks.pop()
                if at > len(stack):
                    raise BadPickle(f"{op.name} at byte {pos}: the stack is shorter than its MARK")
                popped = stack[at:]
                del stack[at:]
            if n_outer:
                if len(stack) < n_outer:
                    raise BadPickle(f"{op.name} at byte {pos} with too few items on the stack")
                popped = stack[-n_outer:] + popped
                del stack[-n_outer:]
            if not n_after:
                continue
            if rule == _SAME:
                depth = popped[0]
            elif rule == _UPDATES:  # the container stays itself, holding the other items
                depth = max(popped[0], max(popped[1:], default=-1) + 1)
            else:
                depth = max(popped, default=-1) + 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_PICKLE_DEPTH:
                    raise CheckpointError(
                        f"{where}: the pickle nests objects more than {MAX_PICKLE_DEPTH} deep "
                        f"(at byte {pos}; a state dict nests about 5): refusing to load it"
                    )
            stack.extend([depth] * n_after)
            if len(stack) + len(marks) > MAX_PICKLE_STACK:
                raise BadPickle(f"more than {MAX_PICKLE_STACK} items and MARKs on the stack")
        else:
            raise BadPickle("no STOP opcode: truncated")
    except BadPickle as exc:
        raise CheckpointError(f"{where}: not a valid state dict pickle ({exc})") from None
    except CheckpointError:
        raise
    except ValueError as exc:  # genops: an unknown opcode, or an argument past the end
        raise CheckpointError(f"{where}: not a valid state dict pickle ({_message(exc)})") from None


_MEMO_PUT = {"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"}
_MEMO_GET = {"GET", "BINGET", "LONG_BINGET"}
#: Opcodes that add items to (or set the state of) the object below them, leaving it on the stack.
_UPDATE_OPS = {"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"}
#: Opcodes that push back the object they took (DUP pushes it twice).
_SAME_OPS = {"DUP", "READONLY_BUFFER"}

# What the pre-scan does with each opcode (its kind), and the depth rule of the others.
_NEW, _STOP, _MARK, _PUT, _GET, _OTHER = range(6)
_SAME, _UPDATES, _NESTS = range(3)


def _op_table() -> dict[pickletools.OpcodeInfo, tuple[int, int, bool, int, int]]:
    """Opcode -> (kind, items it pops below a MARK, whether it pops to a MARK, items it pushes, depth rule)."""
    table = {}
    for op in pickletools.opcodes:
        before, after = op.stack_before, op.stack_after
        to_mark = pickletools.markobject in before
        n_outer = before.index(pickletools.markobject) if to_mark else len(before)
        if op.name == "STOP":
            kind = _STOP
        elif op.name == "MARK":
            kind = _MARK
        elif op.name in _MEMO_PUT:
            kind = _PUT
        elif op.name in _MEMO_GET:
            kind = _GET
        elif not before and len(after) == 1:
            kind = _NEW
        else:
            kind = _OTHER
        rule = _SAME if op.name in _SAME_OPS else _UPDATES if op.name in _UPDATE_OPS else _NESTS
        table[op] = (kind, n_outer, to_mark, len(after), rule)
    return table


_OPS = _op_table()
