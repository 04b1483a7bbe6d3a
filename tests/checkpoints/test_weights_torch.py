"""bertembed._checkpoints.readers.torch_zip: torch.save archives read without torch and without running pickle code.

The format and security tests build archives by hand (``helpers.weights``):
they need neither torch nor safetensors. The tests marked ``heavy`` compare
every tensor with ``torch.load(..., weights_only=True)`` on files written by
torch itself, and are skipped without torch.
"""

from __future__ import annotations

import copyreg
import doctest
import os
import pickle
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from helpers.extras import needs
from helpers.weights import (
    ORDERED_DICT,
    REBUILD,
    Build,
    Call,
    G,
    Items,
    PersId,
    Raw,
    assert_mapped,
    encode,
    state_dict,
    storage,
    storage_offsets,
    tensor,
    tiny_bert,
    write_torch_zip,
)

from bertembed._checkpoints.readers import (
    CheckpointError,
    TensorInfo,
    TensorSource,
    TorchZipFile,
    UnsafeCheckpointError,
    open_weights,
    torch_pickle,
)

RNG = np.random.default_rng(7)
W = RNG.standard_normal((6, 4)).astype("<f4")  # storage "0": 24 floats


def _archive(tmp_path, items, storages=None, name="pytorch_model.bin", **kw):
    storages = {"0": W.tobytes()} if storages is None else storages
    return write_torch_zip(tmp_path / name, encode(state_dict(items)), storages, **kw)


def _basic(tmp_path, **kw):
    s = storage("0", 24)
    items = {
        "w": tensor(s, (6, 4)),
        "tied": tensor(s, (6, 4)),
        "t": tensor(s, (4, 6), (1, 4)),  # W.T
        "rows": tensor(s, (2, 4), offset=8),  # W[2:4]
        "col": tensor(s, (6,), (4,), offset=1),  # W[:, 1]
        "scalar": tensor(s, (), ()),
        "empty": tensor(s, (0, 4)),
    }
    return _archive(tmp_path, items, **kw)


EXPECTED = {
    "w": W,
    "tied": W,
    "t": W.T,
    "rows": W[2:4],
    "col": W[:, 1],
    "scalar": W.reshape(-1)[0],
    "empty": np.zeros((0, 4), np.float32),
}


# ---------------------------------------------------------------- reading


def test_keys_info_and_values(tmp_path):
    path = _basic(tmp_path)
    src = TorchZipFile(path)
    assert isinstance(src, TensorSource)
    assert src.keys() == list(EXPECTED)
    assert "w" in src and "nope" not in src and None not in src
    assert src.files() == [path]
    for name, want in EXPECTED.items():
        assert src.info(name) == TensorInfo("F32", want.shape)
        arr = src.array(name)
        assert arr.dtype == np.float32 and arr.dtype.isnative
        assert not arr.flags.writeable
        np.testing.assert_array_equal(arr, want)


@pytest.mark.parametrize(
    ("size", "stride"),
    [((3, 4), (0, 1)), ((4, 3), (1, 0)), ((2, 3), (2, 1)), ((2**20, 2**20), (0, 0))],
)
def test_overlapping_views_are_refused_naming_the_tensor(tmp_path, size, stride):
    """A view whose elements overlap (expand()'s stride 0) would need more bytes than its storage."""
    s = storage("0", 24)
    path = _archive(tmp_path, {"w": tensor(s, (6, 4)), "bcast": tensor(s, size, stride)}, name="m.bin")
    src = TorchZipFile(path)
    np.testing.assert_array_equal(src.array("w"), W)
    assert src.info("bcast").shape == size
    with pytest.raises(CheckpointError, match=r"m\.bin: tensor 'bcast' of size .* whose elements overlap"):
        src.array("bcast")


def test_views_of_one_mapped_storage(tmp_path):
    path = _basic(tmp_path)
    src = TorchZipFile(path)
    for name in ("w", "tied", "t", "rows", "col", "scalar"):
        assert_mapped(src.array(name), path)
    # tied weights and other views of one storage share memory, no copy
    assert np.shares_memory(src.array("w"), src.array("tied"))
    assert np.shares_memory(src.array("w"), src.array("t"))
    assert not src.array("t").flags.c_contiguous  # a strided view: the caller copies if needed
    assert src.array("t").strides == (4, 16)
    # the arrays are the file: rewrite W[2, 1] on disk and every view sees it
    at = storage_offsets(path)["archive/data/0"] + (2 * 4 + 1) * 4
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(np.float32(42.0).tobytes())
    assert src.array("w")[2, 1] == src.array("t")[1, 2] == src.array("col")[2] == src.array("rows")[0, 1] == 42.0


@pytest.mark.parametrize(
    ("kind", "dtype", "numpy_dtype"),
    [("DoubleStorage", "F64", "<f8"), ("HalfStorage", "F16", "<f2"), ("BFloat16Storage", "BF16", "<u2")],
)
def test_float_dtypes_in_stored_precision(tmp_path, kind, dtype, numpy_dtype):
    values = RNG.integers(0, 2**15, size=(3, 5)).astype(numpy_dtype)  # any bits will do
    path = _archive(tmp_path, {"x": tensor(storage("0", 15, kind), (3, 5))}, {"0": values.tobytes()})
    src = TorchZipFile(path)
    assert src.info("x") == (dtype, (3, 5))
    arr = src.array("x")
    assert arr.dtype == np.dtype(numpy_dtype).newbyteorder("=")
    np.testing.assert_array_equal(arr, values)
    assert_mapped(arr, path)


def test_big_endian_archive_gives_native_values(tmp_path):
    s = storage("0", 24)
    path = _archive(
        tmp_path,
        {"w": tensor(s, (6, 4)), "t": tensor(s, (4, 6), (1, 4))},
        {"0": W.astype(">f4").tobytes()},
        byteorder=b"big",
    )
    src = TorchZipFile(path)
    for name, want in (("w", W), ("t", W.T)):
        arr = src.array(name)
        assert arr.dtype.isnative and not arr.flags.writeable
        np.testing.assert_array_equal(arr, want)


def test_missing_byteorder_means_little(tmp_path):
    path = _archive(tmp_path, {"w": tensor(storage("0", 24), (6, 4))}, byteorder=None)
    np.testing.assert_array_equal(TorchZipFile(path).array("w"), W)


def test_unaligned_storage_is_copied(tmp_path):
    path = _archive(tmp_path, {"w": tensor(storage("0", 24), (6, 4))}, align=1)
    arr = TorchZipFile(path).array("w")
    assert arr.flags.aligned and not arr.flags.writeable
    np.testing.assert_array_equal(arr, W)


def test_non_float_tensor_and_missing_name(tmp_path):
    ids = np.arange(5, dtype="<i8")
    path = _archive(tmp_path, {"position_ids": tensor(storage("1", 5, "LongStorage"), (1, 5))}, {"1": ids.tobytes()})
    src = TorchZipFile(path)
    assert src.info("position_ids") == ("I64", (1, 5))
    with pytest.raises(TypeError, match=r"pytorch_model\.bin: tensor 'position_ids' has dtype I64"):
        src.array("position_ids")
    with pytest.raises(KeyError, match=r"pytorch_model\.bin: no tensor 'nope'"):
        src.array("nope")
    with pytest.raises(KeyError, match=r"pytorch_model\.bin: no tensor 'nope'"):
        src.info("nope")


def test_parameters_and_non_tensor_entries(tmp_path):
    s = storage("0", 24)
    param = Call(G("torch._utils", "_rebuild_parameter"), (tensor(s, (6, 4)), True, Call(ORDERED_DICT, ())))
    items = {"p": param, "step": 3, "note": "text", "none": None}
    # torch.save also BUILDs the dict's _metadata attribute
    obj = Build(Items(Call(ORDERED_DICT, ()), list(items.items())), {"_metadata": {"": {"version": 1}}})
    path = write_torch_zip(tmp_path / "m.pt", encode(obj), {"0": W.tobytes()})
    src = TorchZipFile(path)
    assert src.keys() == ["p"]
    np.testing.assert_array_equal(src.array("p"), W)


def test_docstring_examples():
    result = doctest.testmod(torch_pickle, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------- refusing code


class _Exec:
    """Unpickling this runs ``exec(code)``: the classic malicious pickle."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return exec, (self.code,)


class _System:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _marker_code(marker) -> str:
    return f"open({str(marker)!r}, 'w').close()"


def test_malicious_pickle_is_refused_and_not_run(tmp_path):
    marker = tmp_path / "pwned"
    # A valid archive (a real tensor, storages, byteorder) whose pickle also
    # holds an object that runs code when unpickled.
    evil = pickle.dumps(_Exec(_marker_code(marker)), 2)
    items = {"w": tensor(storage("0", 24), (6, 4)), "evil": Raw(evil[2:-1])}  # without PROTO and STOP
    path = _archive(tmp_path, items)
    # protocol 2 (torch's) spells the module the Python 2 way: __builtin__
    match = r"pytorch_model\.bin: refusing to load: the pickle references the global '__builtin__\.exec'"
    with pytest.raises(UnsafeCheckpointError, match=match) as info:
        TorchZipFile(path)
    assert "nothing from the file was run" in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(UnsafeCheckpointError, match=r"__builtin__\.exec"):
        open_weights(path)
    assert not marker.exists()
    # The pickle is real: plain pickle runs it.
    pickle.loads(evil)
    assert marker.exists()


def test_os_system_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    command = f'python -c "{_marker_code(marker)}"'
    items = {"evil": Raw(pickle.dumps(_System(command), 2)[2:-1])}
    path = _archive(tmp_path, items)
    module = os.system.__module__  # posix or nt
    with pytest.raises(UnsafeCheckpointError, match=rf"the global '{module}\.system'"):
        TorchZipFile(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("opcodes", "name"),
    [
        (b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94.", "os.system"),  # STACK_GLOBAL (protocol 4)
        (b"(S'echo'\nios\nsystem\n.", "os.system"),  # INST (protocol 0)
        (b"(cos\nsystem\nS'echo'\no.", "os.system"),  # OBJ
        (b"\x80\x02cbuiltins\ngetattr\n.", "builtins.getattr"),
        (b"\x80\x02ctorch\nload\n.", "torch.load"),
        (b"\x80\x02ctorch._utils\n_rebuild_qtensor\n.", "torch._utils._rebuild_qtensor"),
        (b"\x80\x02ccollections\nOrderedDict.__class__\n.", "collections.OrderedDict.__class__"),
    ],
)
def test_every_route_to_a_global_is_refused(tmp_path, opcodes, name):
    path = write_torch_zip(tmp_path / "x.bin", opcodes, {})
    with pytest.raises(UnsafeCheckpointError, match=rf"the global '{name}'"):
        TorchZipFile(path)


def test_extension_codes_go_through_the_allow_list(tmp_path):
    path = write_torch_zip(tmp_path / "x.bin", b"\x80\x02\x82\xf0.", {})  # EXT1 0xf0
    with pytest.raises(ValueError, match="not a valid state dict pickle"):
        TorchZipFile(path)  # unregistered
    copyreg.add_extension("os", "system", 0xF0)
    try:
        with pytest.raises(UnsafeCheckpointError, match=r"the global 'os\.system'"):
            TorchZipFile(path)
    finally:
        copyreg.remove_extension("os", "system", 0xF0)


# ---------------------------------------------------------------- allowed classes used in odd ways

S24 = storage("0", 24)
HOOKS = Call(ORDERED_DICT, ())


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        # out-of-bounds views: an error, never a view past the storage
        (tensor(S24, (7, 4)), r"reads element 27 of storage '0', which has 24 elements"),
        (tensor(S24, (6, 4), offset=1), "reads element 24"),
        (tensor(S24, (2, 2), (100, 1)), "reads element 101"),
        (tensor(S24, (1,), (1,), offset=24), "reads element 24"),
        (tensor(S24, (2**40, 2**40), (0, 0)), "too large"),
        (tensor(S24, (2,), (-1,), offset=5), r"stride\[0\] must be an int"),
        (tensor(S24, (2,), (1,), offset=-1), "storage_offset must be an int"),
        (tensor(S24, (True, 4)), r"size\[0\] must be an int"),
        (tensor(S24, (6, 4), (4,)), "have different lengths"),
        (tensor(S24, (0,), (1,), offset=25), "past the end"),
        (Call(REBUILD, (S24, 0, [6, 4], (4, 1), False, HOOKS)), "size must be a tuple of ints, got list"),
        (Call(REBUILD, ("0", 0, (6, 4), (4, 1), False, HOOKS)), "storage must be a persistent storage reference"),
        (Call(REBUILD, (S24,)), r"not a valid state dict pickle \(TypeError"),
        (Call(G("torch._utils", "_rebuild_parameter"), (S24, True, HOOKS)), "a parameter's data must be a tensor"),
        # storages: the pickle must agree with the archive
        (tensor(storage("0", 25), (5,)), r"storage '0' \(25 x F32\) needs 100 bytes, its zip member holds 96"),
        (tensor(storage("9", 2), (2,)), "storage '9' has no zip member data/9"),
        ([tensor(S24, (2,)), tensor(storage("0", 48, "HalfStorage"), (2,))], r"referenced as 24 x F32 and as 48 x F16"),
        (PersId("0"), "unknown persistent id '0'"),
        (PersId(("storage", ORDERED_DICT, "0", "cpu", 24)), "is not a storage type"),
        (PersId(("storage", G("torch", "FloatStorage"), 0, "cpu", 24)), "the key must be a str"),
        (PersId(("storage", G("torch", "FloatStorage"), "0", "cpu", -1)), "element count of storage '0' must be"),
        # OrderedDict with odd arguments, stand-ins called or built
        (Call(ORDERED_DICT, (1, 2)), r"not a valid state dict pickle \(TypeError"),
        (Call(ORDERED_DICT, ("abc",)), r"not a valid state dict pickle \(ValueError"),
        (Call(G("torch", "FloatStorage"), ()), r"not a valid state dict pickle \(TypeError"),
        (Raw(b"ctorch._utils\n_rebuild_tensor_v2\n)\x81"), r"not a valid state dict pickle \(UnpicklingError"),
    ],
)
def test_allowed_classes_used_in_odd_ways(tmp_path, obj, match):
    path = write_torch_zip(tmp_path / "odd.bin", encode({"x": obj}), {"0": W.tobytes()})
    with pytest.raises(ValueError, match=r"odd\.bin: .*" + match):
        TorchZipFile(path)


@pytest.mark.parametrize(
    "target",
    [REBUILD, G("torch", "FloatStorage"), ORDERED_DICT, tensor(S24, (6, 4)), S24],
    ids=["rebuild", "storage-type", "ordered-dict-type", "tensor", "storage"],
)
@pytest.mark.parametrize(
    "state",
    [{"dtype": "I64", "__call__": 1}, (None, {"dtype": "I64", "numel": 10**6, "__code__": None})],
    ids=["dict", "slots"],
)
def test_build_cannot_alter_stand_ins(tmp_path, target, state):
    path = write_torch_zip(tmp_path / "odd.bin", encode({"x": Build(target, state)}), {"0": W.tobytes()})
    with pytest.raises(ValueError, match=r"odd\.bin: not a valid state dict pickle"):
        TorchZipFile(path)
    # the allow-list is intact: a valid file still reads as before
    assert torch_pickle.ALLOWED[("torch", "FloatStorage")].dtype == "F32"
    np.testing.assert_array_equal(TorchZipFile(_basic(tmp_path)).array("t"), W.T)


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        ([1, 2], "the pickle holds a list, not a state dict"),
        ({1: tensor(S24, (6, 4))}, "has a key 1 that is not a str"),
        ({"model": {"w": tensor(S24, (6, 4))}}, "nested under 'model'"),
    ],
)
def test_not_a_state_dict(tmp_path, obj, match):
    path = write_torch_zip(tmp_path / "odd.bin", encode(obj), {"0": W.tobytes()})
    with pytest.raises(ValueError, match=match):
        TorchZipFile(path)


# ---------------------------------------------------------------- the archive


def test_compressed_storage_is_refused(tmp_path):
    path = _basic(tmp_path, compress=True)
    with pytest.raises(ValueError, match=r"zip member 'archive/data/0' is compressed \(method 8\).*private copy"):
        TorchZipFile(path)


def test_legacy_torch_format_is_refused(tmp_path):
    path = tmp_path / "old.bin"
    path.write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps({}, protocol=2))
    with pytest.raises(ValueError, match=r"old\.bin: the legacy torch\.save format \(torch < 1\.6"):
        TorchZipFile(path)
    with pytest.raises(ValueError, match=r"legacy torch\.save format"):
        open_weights(path)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "not a zip archive"),
        (b"hello world", "not a zip archive"),
        (b"PK\x03\x04" + b"\0" * 60, "not a valid zip archive"),
    ],
)
def test_not_a_torch_archive(tmp_path, content, match):
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"x\.pt: " + match):
        TorchZipFile(path)


def test_archive_layout_errors(tmp_path):
    pkl = encode(state_dict({"w": tensor(S24, (6, 4))}))
    none = tmp_path / "a.bin"
    with zipfile.ZipFile(none, "w") as zf:
        zf.writestr("archive/version", b"3\n")
    with pytest.raises(ValueError, match=r"holds one '<archive>/data\.pkl', this zip has none"):
        TorchZipFile(none)
    two = write_torch_zip(tmp_path / "b.bin", pkl, {"0": W.tobytes()}, extra={"other/data.pkl": pkl})
    with pytest.raises(ValueError, match=r"this zip has archive/data\.pkl, other/data\.pkl"):
        TorchZipFile(two)
    odd = write_torch_zip(tmp_path / "c.bin", pkl, {"0": W.tobytes()}, byteorder=b"middle")
    with pytest.raises(ValueError, match=r"archive/byteorder is b'middle', expected b'little' or b'big'"):
        TorchZipFile(odd)
    with pytest.raises(FileNotFoundError, match=r"nope\.bin: no such file"):
        TorchZipFile(tmp_path / "nope.bin")


def test_archive_name_is_any_directory(tmp_path):
    path = _archive(tmp_path, {"w": tensor(S24, (6, 4))}, archive="pytorch_model")
    np.testing.assert_array_equal(TorchZipFile(path).array("w"), W)


# ---------------------------------------------------------------- against torch itself


def _torch_reference(t):
    """A torch tensor as the NumPy array TensorSource.array gives (BF16 as raw bits)."""
    import torch

    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


TORCH_NAMES = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16", "int64": "I64"}


def _check_against_torch(path, expect_keys=None):
    """Every tensor of `path` equals torch.load(weights_only=True)'s, mapped, with the right info."""
    import torch

    theirs = torch.load(path, weights_only=True, map_location="cpu")
    src = open_weights(path)
    assert src.keys() == list(theirs if expect_keys is None else expect_keys)
    for name, t in theirs.items():
        assert src.info(name) == (TORCH_NAMES[str(t.dtype).removeprefix("torch.")], tuple(t.shape))
        if t.dtype.is_floating_point:
            arr = src.array(name)
            np.testing.assert_array_equal(arr, _torch_reference(t))
            assert arr.strides == tuple(s * t.element_size() for s in t.stride())
            if arr.size:
                assert_mapped(arr, path)
        else:
            with pytest.raises(TypeError, match=f"tensor '{name}' has dtype"):
                src.array(name)
    return src


@pytest.mark.heavy
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_torch_save_state_dict_of_a_bert_model(tmp_path, dtype):
    torch = needs("torch", "peers")
    model = tiny_bert(getattr(torch, dtype))
    path = tmp_path / "pytorch_model.bin"
    torch.save(model.state_dict(), path)
    src = _check_against_torch(path)
    assert src.info("embeddings.word_embeddings.weight") == (TORCH_NAMES[dtype], (120, 32))


@pytest.mark.heavy
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_transformers_style_bin_with_tied_weights(tmp_path, dtype):
    # transformers 5 writes only safetensors; pytorch_model.bin is what
    # transformers 4 wrote with save_pretrained(..., safe_serialization=False):
    # torch.save of the whole state dict, tied weights included.
    torch = needs("torch", "peers")
    model = tiny_bert(getattr(torch, dtype), "BertForMaskedLM")
    path = tmp_path / "pytorch_model.bin"
    torch.save(model.state_dict(), path)
    src = _check_against_torch(path)
    tok = src.array("bert.embeddings.word_embeddings.weight")
    assert np.shares_memory(tok, src.array("cls.predictions.decoder.weight"))


@pytest.mark.heavy
def test_torch_strided_and_offset_tensors(tmp_path):
    torch = needs("torch", "peers")
    base = torch.randn(10, 6)
    tensors = {
        "t": base.t(),
        "slice": base[3:7],
        "col": base[:, 2],
        "step": base[::2, 1::3],
        "half_t": base.half().t(),
        "scalar": torch.tensor(1.5),
    }
    path = tmp_path / "views.pt"
    torch.save(tensors, path)
    _check_against_torch(path)
    torch.save({"expand": torch.randn(6).expand(4, 6)}, path)
    with pytest.raises(CheckpointError, match=r"views\.pt: tensor 'expand' .* overlap"):
        open_weights(path).array("expand")


@pytest.mark.heavy
def test_torch_parameters_and_pickle_protocol_4(tmp_path):
    torch = needs("torch", "peers")
    model = torch.nn.Linear(5, 3)
    kept = tmp_path / "keep_vars.pt"  # Parameters: torch._utils._rebuild_parameter
    torch.save(model.state_dict(keep_vars=True), kept)
    _check_against_torch(kept)
    proto4 = tmp_path / "proto4.pt"  # FRAME, MEMOIZE, STACK_GLOBAL
    torch.save(dict(model.named_parameters()), proto4, pickle_protocol=4)
    src = open_weights(proto4)
    for name, t in model.named_parameters():  # torch's weights_only reader refuses protocol 4
        np.testing.assert_array_equal(src.array(name), t.detach().numpy())
        assert_mapped(src.array(name), proto4)


@pytest.mark.heavy
def test_torch_load_also_refuses_the_malicious_file(tmp_path):
    torch = needs("torch", "peers")
    marker = tmp_path / "pwned"
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(2), "evil": _Exec(_marker_code(marker))}, path)
    with pytest.raises(UnsafeCheckpointError, match=r"the global '__builtin__\.exec'"):
        open_weights(path)
    assert not marker.exists()
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    assert not marker.exists()


@pytest.mark.heavy
def test_torch_legacy_format_and_big_endian(tmp_path):
    torch = needs("torch", "peers")
    legacy = tmp_path / "legacy.bin"
    torch.save({"w": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(ValueError, match=r"legacy\.bin: the legacy torch\.save format"):
        open_weights(legacy)
    # torch reads our hand-made big-endian archive the same way we do
    s = storage("0", 24)
    big = _archive(
        tmp_path,
        {"w": tensor(s, (6, 4)), "t": tensor(s, (4, 6), (1, 4))},
        {"0": W.astype(">f4").tobytes()},
        byteorder=b"big",
        name="big.bin",
    )
    theirs = torch.load(big, weights_only=True)
    src = open_weights(big)
    for name in ("w", "t"):
        np.testing.assert_array_equal(src.array(name), theirs[name].numpy())


def test_only_the_members_of_the_tensors_read_are_mapped(tmp_path):
    """Each storage's member is mapped on its own, at its first array(); other members never are."""
    s0, s1 = storage("0", 24), storage("1", 1000)
    path = _archive(
        tmp_path,
        {"w": tensor(s0, (6, 4)), "t": tensor(s0, (4, 6), (1, 4)), "encoder": tensor(s1, (1000,))},
        storages={"0": W.tobytes(), "1": np.ones(1000, np.float32).tobytes()},
    )
    offsets = storage_offsets(path)
    src = TorchZipFile(path)
    w = src.array("w")
    base = w
    while not isinstance(base, np.memmap):
        base = base.base
    assert base.offset == offsets["archive/data/0"] and base.nbytes == W.nbytes
    assert_mapped(w, path)
    assert np.shares_memory(w, src.array("t"))  # one map per storage, shared by its tensors
    assert list(src._storages) == ["0"]  # the encoder's member was never mapped


def test_a_member_that_cannot_be_mapped_is_an_error_naming_it(tmp_path, monkeypatch):
    path = _basic(tmp_path, name="m.bin")
    src = TorchZipFile(path)
    at = storage_offsets(path)["archive/data/0"]

    def no_address_space(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(np, "memmap", no_address_space)
    with pytest.raises(
        CheckpointError,
        match=rf"m\.bin: cannot map zip member 'archive/data/0' \(96 bytes at byte {at}\): .*Cannot allocate memory",
    ):
        src.array("w")


def test_a_memo_index_beyond_the_limit_is_refused_before_unpickling():
    """(Found by the pickle fuzz target: LONG_BINPUT 174417761 made CPython's unpickler allocate 2.7 GB.)"""
    for op in (b"r\xff\xff\xff\x7f", b"r" + (torch_pickle.MAX_PICKLE_MEMO).to_bytes(4, "little"), b"p99999999\n"):
        with pytest.raises(CheckpointError, match=r"x\.bin: .* stores memo entry \d+, beyond the limit of 1000000"):
            torch_pickle.load_state_dict(b"\x80\x02N" + op + b".", "x.bin", lambda key: None)
    assert torch_pickle.load_state_dict(b"\x80\x02}r\x05\x00\x00\x00.", "x.bin", lambda key: None) == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and sparse files")
@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""), reason="ASan reserves the address space")
def test_a_member_larger_than_the_address_space_is_an_error_naming_it(tmp_path):
    """Under a 3 GiB address-space limit: a 3.25 GiB table cannot be mapped, a 3.25 GiB unused member costs nothing."""
    from helpers.hostile_checkpoints import Member, sparse_zip

    huge = 13 * 2**28
    items = {"big": tensor(storage("1", huge // 4), (huge // 16, 4)), "w": tensor(storage("0", 24), (6, 4))}
    path = sparse_zip(
        tmp_path / "pytorch_model.bin",
        [
            Member("archive/data.pkl", encode(state_dict(items))),
            Member("archive/data/1", b""),
            Member("archive/data/0", W.tobytes()),
        ],
        hole="archive/data/1",
        hole_size=huge,
    )
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))\n"
        "import numpy as np\n"
        "from bertembed._checkpoints.readers import CheckpointError, TorchZipFile\n"
        "src = TorchZipFile(sys.argv[1])\n"
        "print(src.array('w').sum(dtype=np.float64))\n"
        "try:\n"
        "    src.array('big')\n"
        "except CheckpointError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True).stdout
    total, message = out.splitlines()
    np.testing.assert_allclose(float(total), W.sum(dtype=np.float64), rtol=1e-6)
    assert re.fullmatch(
        rf".*pytorch_model\.bin: cannot map zip member 'archive/data/1' \({huge} bytes at byte \d+\): .*", message
    ), message
