"""Memory of the server's processes: heap given back after loading, encoder weights shared by the workers.

Two helpers for a pre-forking server (``bertembed serve``: a gunicorn master that
builds the app, W workers forked from it):

:func:`give_back_memory`
    Loading leaves freed memory in the C heap: the tokenizer's JSON parse in
    the master (about 10 MiB for XLM-R's 250,002-piece tokenizer), ONNX
    Runtime's parse of ``encoder.onnx`` and the weights it replaced by their
    prepacked copies in each worker (about 31 MiB for a 12-layer, 384-wide
    encoder). glibc keeps such memory for later allocations instead of
    returning it; ``malloc_trim(0)`` returns every free page. Call it once
    after each load: in the master before the fork (the workers then inherit
    less), in each worker after its encoder session is created.

:func:`shared_encoder`
    ONNX Runtime copies an encoder's weights into each session, and prepacks
    the matrix weights (another layout, in private memory): W workers hold W
    copies. Saved once with its prepacked weights in an external data file
    (``session.save_external_prepacked_constant_initializers``), the optimized
    encoder's weights are memory-mapped by every session that loads it, in
    their prepacked form: the workers share one copy in the page cache, and
    the results are bit-for-bit those of ``encoder.onnx`` (same kernels, same
    packed weights). The prepacked layout belongs to the ONNX Runtime version
    and the CPU that wrote it, so the file is written on the serving machine,
    into a cache keyed by both, by a child process (the caller never holds
    the model).
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: Files of a shared encoder: the optimized graph and its external data (plain and prepacked weights).
SHARED_FILE = "encoder.onnx"
SHARED_DATA = "encoder.onnx.data"
#: Initializers smaller than this stay inside the graph file.
EXTERNAL_MIN_BYTES = 1024
#: The ONNX Runtime session settings that write a shared encoder (the graph optimisation level is the caller's).
SAVE_CONFIG = {
    "session.optimized_model_external_initializers_file_name": SHARED_DATA,
    "session.optimized_model_external_initializers_min_size_in_bytes": str(EXTERNAL_MIN_BYTES),
    "session.save_external_prepacked_constant_initializers": "1",
}
#: Longest the child that writes a shared encoder may run, in seconds.
BUILD_TIMEOUT_S = 600
#: The file in each cache entry that names the encoder it was written from (older entries of the same
#: source are removed when a new one is written: the cache holds one entry per artifact).
SOURCE_FILE = "source.txt"

_TRIM: Any = None


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (another C library, another system)."""
    global _TRIM
    if _TRIM is None:
        _TRIM = False
        if sys.platform.startswith("linux"):
            try:
                _TRIM = getattr(ctypes.CDLL(None), "malloc_trim", False)
            except (OSError, TypeError):
                _TRIM = False
            if _TRIM:
                _TRIM.argtypes = [ctypes.c_size_t]
                _TRIM.restype = ctypes.c_int
    return _TRIM or None


def _resident_bytes() -> int:
    """This process's resident memory (``/proc/self/statm``), 0 where there is no such file."""
    import mmap

    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * mmap.PAGESIZE
    except (OSError, ValueError, IndexError):
        return 0


def give_back_memory() -> int:
    """Collect Python's garbage, then give the C heap's free pages back to the system.

    Calls ``gc.collect()`` and then glibc's ``malloc_trim(0)`` where there is
    one (Linux with glibc; elsewhere only the collection runs: musl and
    macOS's allocators give large free blocks back by themselves). Safe to
    call from any thread at any time; it takes a few milliseconds on a heap
    of a few hundred MiB.

    Returns
    -------
    int
        Bytes by which this process's resident memory went down (0 when
        nothing was given back, or where it cannot be read).

    Examples
    --------
    >>> give_back_memory() >= 0
    True
    """
    before = _resident_bytes()
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    return max(0, before - _resident_bytes())


def _cpu_signature() -> str:
    """What the prepacked layout may depend on: the machine, and the CPU's model and feature flags."""
    import platform

    parts = [platform.machine()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key = line.split(":", 1)[0].strip()
                if key in ("vendor_id", "model name", "flags", "Features", "CPU implementer", "CPU part"):
                    parts.append(line.strip())
                elif not line.strip() and len(parts) > 1:
                    break  # the first processor's block is enough
    except OSError:
        parts.append(platform.processor())
    return "\n".join(parts)


def shared_encoder_key(encoder: str | os.PathLike[str], graph_optimization: str) -> str:
    """The cache key of a shared encoder: the source file (path, size, mtime), ONNX Runtime's version,
    the graph optimisation level and the CPU (:func:`_cpu_signature`)."""
    import onnxruntime as ort

    path = Path(encoder).resolve()
    stat = path.stat()
    text = json.dumps(
        [str(path), stat.st_size, stat.st_mtime_ns, ort.__version__, graph_optimization, _cpu_signature()]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/bertembed/encoders`` (``~/.cache`` by default); the server's setting
    ``SERVICE_ENCODER_CACHE`` chooses another."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bertembed" / "encoders"


def _remove_older(root: Path, current: Path, source: Path) -> None:
    """Remove the cache entries written from ``source`` other than ``current`` (best effort: a worker
    that still maps one keeps its pages until it exits)."""
    for entry in root.iterdir():
        if entry == current or entry.name.startswith(".") or not entry.is_dir():
            continue
        try:
            if (entry / SOURCE_FILE).read_text(encoding="utf-8") == str(source):
                shutil.rmtree(entry)
        except OSError:
            continue


def shared_encoder(
    encoder: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    graph_optimization: str = "all",
) -> Path:
    """The encoder saved so that every worker's session maps its (prepacked) weights: its path.

    Written once per source file, ONNX Runtime version, graph optimisation
    level and CPU, into ``cache_dir/KEY/`` (:func:`shared_encoder_key`), by a
    child process that also checks it gives bit-for-bit the source's results.
    Load it with the session options used for ``encoder.onnx`` (prepacking
    left on, any graph optimisation level): ONNX Runtime then maps
    ``encoder.onnx.data`` instead of copying and prepacking the weights.
    Safe when several processes ask at once (each writes into a temporary
    directory; the first rename wins).

    Parameters
    ----------
    encoder : path
        The artifact's ``encoder.onnx``.
    cache_dir : path, optional
        Default :func:`default_cache_dir`.
    graph_optimization : {"basic", "extended", "all"}
        The level of the sessions that will load it.

    Returns
    -------
    pathlib.Path
        ``cache_dir/KEY/encoder.onnx``.

    Raises
    ------
    OSError
        The cache directory cannot be written.
    RuntimeError
        The child failed or ran longer than :data:`BUILD_TIMEOUT_S` (the message holds the end of its
        output). Either way nothing is left in the cache: load ``encoder.onnx`` instead.

    Examples
    --------
    >>> path = shared_encoder("out/encoder.onnx")  # doctest: +SKIP
    >>> session = ort.InferenceSession(str(path), options)  # doctest: +SKIP
    """
    if graph_optimization not in ("basic", "extended", "all"):
        raise ValueError(f"graph_optimization must be basic, extended or all, got {graph_optimization!r}")
    source = Path(encoder).resolve()
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / shared_encoder_key(source, graph_optimization)
    if (target / SHARED_FILE).is_file():
        return target / SHARED_FILE
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    work = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        command = [sys.executable, "-m", f"{__package__}.shared_build", str(source), str(work), graph_optimization]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"writing the shared encoder took longer than {BUILD_TIMEOUT_S} s") from None
        if done.returncode != 0:
            raise RuntimeError(f"writing the shared encoder failed: {(done.stderr or done.stdout)[-2000:]}")
        (work / SOURCE_FILE).write_text(str(source), encoding="utf-8")
        try:
            work.rename(target)
        except OSError:
            if not (target / SHARED_FILE).is_file():  # not another process's finished copy
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _remove_older(root, target, source)
    return target / SHARED_FILE
