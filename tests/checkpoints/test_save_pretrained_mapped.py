"""Saving into a directory whose weights file a live layer maps: each platform's rule.

POSIX: the rename over the mapped file succeeds, the live layer keeps
reading the old file. Windows refuses to replace a mapped file; the saver
refuses first (``mapped.REPLACE_REFUSED``, set here to play Windows) or
turns the refused rename (``helpers.windows.refuse_mapped_files``, Windows'
rule simulated on Linux) into ``MappedFileError`` naming the file; either
way the directory and the live layer are untouched, and saving again after
the layer is dropped succeeds. Which files are mapped: the package's own
registry (every platform) and, on Linux, ``/proc/self/maps``.
"""

from __future__ import annotations

import gc
import re
import sys

import numpy as np
import pytest
from helpers.windows import refuse_mapped_files, rule_installed
from test_save_pretrained import LAYERS, _calls

from bertembed import BertEmbeddings
from bertembed._checkpoints import mapped
from bertembed._checkpoints.mapped import MappedFileError


def _contents(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _play_windows(how, monkeypatch):
    if how in ("platform", "both"):
        monkeypatch.setattr(mapped, "REPLACE_REFUSED", True)
    if how in ("rename refused", "both"):
        refuse_mapped_files(monkeypatch)


@pytest.mark.parametrize("how", ["platform", "rename refused", "both"])
@pytest.mark.parametrize("table_dtype", [None, "int8"])
def test_saving_over_a_live_layer_is_refused_where_windows_refuses(how, table_dtype, tmp_path, monkeypatch):
    saved = tmp_path / "saved"
    BertEmbeddings(**LAYERS["bert"], table_dtype=table_dtype).save_pretrained(saved)
    live = BertEmbeddings.from_pretrained(saved)
    before, files = _calls(live), _contents(saved)
    _play_windows(how, monkeypatch)
    other = BertEmbeddings(**LAYERS["no-layernorm"])
    weights = saved / "model.safetensors"
    with pytest.raises(
        PermissionError, match=re.escape(str(weights)) + r": .*a live layer in this process maps it"
    ) as info:
        other.save_pretrained(saved)
    assert isinstance(info.value, MappedFileError) and info.value.filename == str(weights)
    assert "Save into another directory" in str(info.value) and "del layer" in str(info.value)
    assert _contents(saved) == files  # nothing written, no temporary file left
    for x, y in zip(before, _calls(live), strict=True):
        np.testing.assert_array_equal(x, y)
    # Another directory is fine; this one once the layer is gone.
    other.save_pretrained(tmp_path / "elsewhere")
    del live
    gc.collect()
    other.save_pretrained(saved)
    again = BertEmbeddings.from_pretrained(saved)
    assert again.has_layer_norm is False
    for x, y in zip(_calls(other), _calls(again), strict=True):
        np.testing.assert_array_equal(x, y)
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "model.safetensors"]


def test_a_trimmed_layer_maps_its_id_map(tmp_path, monkeypatch):
    """A trimmed token table converted on load is a private copy, but the id map is a map of the file."""
    saved = tmp_path / "saved"
    tokens = np.random.default_rng(2).standard_normal((50, 12)).astype(np.float32)
    BertEmbeddings(tokens, None).trimmed([3, 4, 5]).save_pretrained(saved)
    live = BertEmbeddings.from_pretrained(saved, table_dtype="int8")
    assert live.is_trimmed and live.table_dtype == "int8"
    monkeypatch.setattr(mapped, "PROC_MAPS", "")  # the registry alone, as off Linux
    monkeypatch.setattr(mapped, "REPLACE_REFUSED", True)
    with pytest.raises(MappedFileError, match="a live layer in this process maps it"):
        BertEmbeddings(**LAYERS["bert"]).save_pretrained(saved)
    del live
    gc.collect()
    BertEmbeddings(**LAYERS["bert"]).save_pretrained(saved)


@pytest.mark.parametrize("where", ["registry", "/proc/self/maps"])
def test_which_files_are_mapped(where, tmp_path, monkeypatch):
    if where == "registry":
        monkeypatch.setattr(mapped, "PROC_MAPS", "")
    elif not sys.platform.startswith("linux"):
        pytest.skip("/proc/self/maps is Linux's")
    else:
        monkeypatch.setattr(mapped, "register", lambda *args: None)  # nothing registered: /proc alone
    saved = tmp_path / "saved"
    BertEmbeddings(**LAYERS["bert"], table_dtype="int8").save_pretrained(saved)
    weights = saved / "model.safetensors"
    assert not mapped.is_mapped(weights) and not mapped.is_mapped(saved / "config.json")
    assert not mapped.is_mapped(tmp_path / "missing")
    live = BertEmbeddings.from_pretrained(saved)
    assert mapped.is_mapped(weights)
    assert mapped.is_mapped(tmp_path / "." / "saved" / "model.safetensors")  # any path to the file
    assert not mapped.is_mapped(saved / "config.json")
    del live
    gc.collect()
    assert not mapped.is_mapped(weights)


@pytest.mark.skipif(sys.platform == "win32", reason="Windows refuses to replace a mapped file")
def test_posix_replaces_the_file_under_a_live_layer(tmp_path):
    if rule_installed():
        pytest.skip("Windows' rule for mapped files is simulated in this run")
    assert mapped.REPLACE_REFUSED is False
    saved = tmp_path / "saved"
    BertEmbeddings(**LAYERS["bert"]).save_pretrained(saved)
    live = BertEmbeddings.from_pretrained(saved)
    before = _calls(live)
    live.save_pretrained(saved)  # over its own file: replaced, not overwritten
    other = BertEmbeddings(**LAYERS["no-layernorm"])
    other.save_pretrained(saved)
    # The live layer reads the old file, now unnamed; the name is the new file, which nothing maps.
    for x, y in zip(before, _calls(live), strict=True):
        np.testing.assert_array_equal(x, y)
    assert not mapped.is_mapped(saved / "model.safetensors")
    for x, y in zip(_calls(other), _calls(BertEmbeddings.from_pretrained(saved)), strict=True):
        np.testing.assert_array_equal(x, y)
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "model.safetensors"]


def test_another_process_s_refusal_is_explained(tmp_path, monkeypatch):
    """A rename Windows refuses for a file this process does not map (a server elsewhere maps it)."""
    import os

    saved = tmp_path / "saved"
    BertEmbeddings(**LAYERS["bert"]).save_pretrained(saved)
    files = _contents(saved)

    def refused(src, dst):
        exc = PermissionError(13, "Access is denied", str(dst))
        exc.winerror = 5
        raise exc

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(MappedFileError, match=r"model\.safetensors: cannot replace this file \(Access is denied\)"):
        BertEmbeddings(**LAYERS["bert"]).save_pretrained(saved)
    assert _contents(saved) == files

    # Any other refusal is left as it is.
    def read_only(src, dst):
        raise PermissionError(13, "read-only")

    monkeypatch.setattr(os, "replace", read_only)
    with pytest.raises(PermissionError, match="read-only") as info:
        BertEmbeddings(**LAYERS["bert"]).save_pretrained(saved)
    assert not isinstance(info.value, MappedFileError)
    assert _contents(saved) == files
