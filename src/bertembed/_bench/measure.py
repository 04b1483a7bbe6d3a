"""One variant (a contender at a thread count) built, called once and checked.

Used by both scenarios: by the worker process of the isolated scenario and
by the runner itself in the shared-process scenario. Nothing is timed here.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import replace
from typing import Any

import numpy as np

from .._core import dtypes
from .check import mismatch
from .data import BERTEMBED, Case, Context, Inputs, Peer, Variant
from .peers import PEERS
from .subject import BertembedCall, bertembed_call, token_values
from .timing import Contender, as_contender


class Skip(Exception):
    """A variant that cannot be timed: ``status`` is unavailable, mismatch or error."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason

    def as_dict(self) -> dict[str, str]:
        """``{"status", "reason"}``, as results record it."""
        return {"status": self.status, "reason": self.reason}


def check_isa(case: Case) -> None:
    """Raise :class:`Skip` (unavailable) unless this process runs the row kernel ``case.isa`` (None: any)."""
    if case.isa is None:
        return
    from .._core import _kernel

    running = _kernel.build_info()["isa"]
    if running != case.isa:
        raise Skip(
            "unavailable",
            f"this process runs the {running} row kernel, not {case.isa} (BERTEMBED_ISA={case.isa} "
            "names a kernel this CPU or build lacks, or the scenario cannot switch kernels)",
        )


def peer_ref(peer: Peer) -> dict[str, Any]:
    """How a child process finds ``peer``: by name if it is a known peer, else by import path.

    Raises
    ------
    ValueError
        A custom peer whose builder is not a module-level function (a lambda
        or a closure cannot be found by a fresh process).
    """
    if PEERS.get(peer.name) is peer:
        return {"name": peer.name}
    build = peer.build
    module = getattr(build, "__module__", None)
    qualname = getattr(build, "__qualname__", "")
    if not module or "<" in qualname:
        raise ValueError(
            f"peer {peer.name!r}: a custom peer timed in its own process needs a module-level "
            "build function (or use the shared-process scenario)"
        )
    path = getattr(importlib.import_module(module), "__file__", None)
    return {
        "name": peer.name,
        "build": f"{module}:{qualname}",
        "path": None if path is None else os.path.dirname(path),
        "checked": peer.checked,
        "threaded": peer.threaded,
    }


def load_peer(ref: dict[str, Any]) -> Peer:
    """The :class:`Peer` that :func:`peer_ref` described (in a child process)."""
    if "build" not in ref:
        return PEERS[ref["name"]]
    module, _, qualname = ref["build"].partition(":")
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return Peer(ref["name"], lambda case: True, target, ref["checked"], ref["threaded"])


def _widened(inputs: Inputs, dtype: str, call: Any) -> Inputs:
    """The inputs with `dtype` tables holding the values bertembed's layer reads
    (an int8 token table dequantised)."""
    if isinstance(call, BertembedCall) and dtypes.BY_NAME[call.layer.table_dtype].quantised:
        tok = token_values(call).astype(dtype, copy=False)
    else:
        tok = inputs.tok.astype(dtype)
    return replace(inputs, tok=tok, pos=inputs.pos.astype(dtype), seg=inputs.seg.astype(dtype))


def build_variant(
    case: Case,
    inputs: Inputs,
    variant: Variant,
    peer: Peer | None,
    ctx: Context,
    expected: np.ndarray | None = None,
) -> tuple[Contender, np.ndarray]:
    """Build ``variant``, call it once and check its output; return it and that output.

    Parameters
    ----------
    case, inputs : Case, Inputs
    variant : Variant
    peer : Peer or None
        None for bertembed.
    ctx : Context
        ``ctx.threads`` is the variant's thread count.
    expected : ndarray, optional
        bertembed's output for the case; a checked peer must match it.

    Returns
    -------
    (Contender, ndarray)

    Raises
    ------
    Skip
        ``unavailable`` (a library missing, or bfloat16 tables this bertembed
        refuses with TypeError), ``mismatch`` (the output differs from
        bertembed's) or ``error`` (anything else the call raised).
    """
    try:
        if peer is None:
            contender = Contender(bertembed_call(case, inputs, variant.threads))
        else:
            contender = as_contender(peer.build(case, inputs, ctx))
        if contender.prepare is not None:
            contender.prepare()
        got = np.asarray(contender.call())
    except ImportError as exc:
        raise Skip("unavailable", str(exc)) from None
    except TypeError as exc:
        if peer is None and case.table_dtype is not None:
            raise Skip("unavailable", f"this bertembed refuses {case.table_dtype} tables (TypeError: {exc})") from None
        raise Skip("error", f"TypeError: {exc}") from None
    except Exception as exc:
        raise Skip("error", f"{type(exc).__name__}: {exc}") from None
    problem = None
    if peer is None and case.table_dtype is not None:
        # Low-precision tables: the same as float32 arithmetic on the widened values.
        plain = replace(case, table_dtype=None)
        widened = _widened(inputs, case.dtype, contender.call)
        problem = mismatch(bertembed_call(plain, widened, 1)(), got, case.dtype)
        del widened
    if problem is None and expected is not None and (peer is None or peer.checked):
        problem = mismatch(expected, got, case.dtype)
    if problem is not None:
        name = BERTEMBED if peer is None else peer.name
        raise Skip("mismatch", f"{name}: {problem}")
    return contender, got
