"""Reuse of large result buffers.

A fresh multi-megabyte array costs a page fault per page the first time it
is written (and the kernel zeroes each page): for a (32, 512, 768) float64
result that is more time than computing it. So results of at least
``MIN_BYTES`` are carved from buffers that earlier results released.

A buffer goes back to the free list only when no array viewing it is left:
each result is built on a small lease object (its ``base``), and every view
of the result keeps that lease alive; the lease gives the buffer back when
it is collected. So a result you still hold, or any view of it, is never
reused. The free list keeps at most
``BERTEMBED_RESULT_CACHE_MB`` megabytes (default 64; 0 turns reuse off),
or what :func:`set_result_cache` sets; buffers beyond that are freed at once.
"""

from __future__ import annotations

import _thread  # (threading's RLock without importing threading)
import math

import numpy as np

from . import knobs

MIN_BYTES = 1 << 20


def _cap_from_env() -> int:
    return int(knobs.RESULT_CACHE_MB.read()) << 20


class ResultPool:
    """Free list of released result buffers, at most ``cap`` bytes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._free: list[np.ndarray] = []
        self._lock = _thread.RLock()  # finalizers may run inside take()

    @property
    def free_bytes(self) -> int:
        with self._lock:
            return sum(b.nbytes for b in self._free)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised C-contiguous array, reusing a released buffer if one fits."""
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < MIN_BYTES or self.cap == 0:
            return np.empty(shape, dtype)
        return np.asarray(_Lease(self, self._take(nbytes), shape, dtype))

    def _take(self, nbytes: int) -> np.ndarray:
        with self._lock:
            best = None
            for i, buf in enumerate(self._free):
                # Reuse a buffer at most twice the size needed, the tightest.
                if nbytes <= buf.nbytes <= 2 * nbytes and (best is None or buf.nbytes < self._free[best].nbytes):
                    best = i
            if best is not None:
                return self._free.pop(best)
        return np.empty(nbytes, np.uint8)

    def _give_back(self, buf: np.ndarray) -> None:
        with self._lock:
            self._free.append(buf)
            while self._free and sum(b.nbytes for b in self._free) > self.cap:
                self._free.pop(0)  # the oldest goes first

    def resize(self, cap: int) -> None:
        """Keep at most `cap` bytes from now on (the oldest buffers beyond it are freed)."""
        with self._lock:
            self.cap = cap
            while self._free and sum(b.nbytes for b in self._free) > self.cap:
                self._free.pop(0)

    def clear(self) -> None:
        """Free every released buffer now."""
        with self._lock:
            self._free.clear()


class _Lease:
    """The base object of a pooled result: returns the buffer when collected."""

    __slots__ = ("__array_interface__", "_buf", "_pool")

    def __init__(self, pool: ResultPool, buf: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self._pool = pool
        self._buf = buf
        self.__array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "data": (buf.ctypes.data, False),
            "version": 3,
        }

    def __del__(self) -> None:
        self._pool._give_back(self._buf)


pool = ResultPool(_cap_from_env())


def set_result_cache(mib: int) -> None:
    """Keep at most `mib` MiB of released result buffers for reuse (0: none).

    Results of at least 1 MiB are carved from buffers that earlier results
    released, which saves the page faults of fresh memory; an idle process
    keeps at most this much of them. The default is 64 MiB, or
    ``BERTEMBED_RESULT_CACHE_MB``. :func:`bertembed.show_config` shows the
    size and what is held now.

    Parameters
    ----------
    mib : int
        Megabytes (MiB), >= 0. Lowering it frees the oldest buffers at once.

    Examples
    --------
    >>> import bertembed
    >>> bertembed.set_result_cache(16)
    >>> bertembed.set_result_cache(64)
    """
    if isinstance(mib, bool) or (not isinstance(mib, int) and not hasattr(mib, "__index__")):
        raise TypeError(f"set_result_cache takes a non-negative int of MiB, got {mib!r}")
    n = int(mib.__index__()) if not isinstance(mib, int) else mib
    if n < 0:
        raise ValueError(f"set_result_cache takes a non-negative int of MiB, got {n}")
    pool.resize(n << 20)
