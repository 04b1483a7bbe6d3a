"""The child side of the isolated scenario: one variant of one case, in a fresh process.

:func:`main` reads a JSON spec (the case, the variant, the peer, repeats,
seed, where bertembed's output is saved), makes the case's tables from the
fixed seed (every process gets the same values), builds the variant, checks
its first output, times it alone and returns the result, which
:mod:`bertembed._bench.child` prints as one marked JSON line. Nothing else runs in the
process: no other runtime's workers spin next to it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .data import BERTEMBED, Case, Context, Variant, make_inputs
from .measure import Skip, build_variant, check_isa, load_peer
from .subject import automatic_threads
from .timing import time_interleaved


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Time one variant of one case as ``spec`` says; see :func:`main`.

    Returns
    -------
    dict
        ``status`` ("ok", "unavailable", "mismatch" or "error"); with "ok"
        the timing (``median_s``, ``min_s``, ``calls_per_sample``), else a
        ``reason``; ``pid``, the process it ran in. For bertembed at its
        automatic choice, ``auto_threads``.
    """
    case = Case(**spec["case"])
    variant = Variant(spec["contender"], spec["threads"])
    peer = None if variant.contender == BERTEMBED else load_peer(spec["peer"])
    inputs = make_inputs(case, spec["seed"])
    expected = None
    if spec.get("expected"):
        expected = np.load(spec["expected"], mmap_mode="r", allow_pickle=False)
    result: dict[str, Any] = {"pid": os.getpid()}
    try:
        check_isa(case)
    except Skip as skip:
        return {**result, **skip.as_dict()}
    with contextlib.ExitStack() as stack:
        ctx = Context(variant.threads or spec["T"], stack)
        try:
            contender, got = build_variant(case, inputs, variant, peer, ctx, expected)
        except Skip as skip:
            return {**result, **skip.as_dict()}
        if spec.get("save_expected"):
            np.save(spec["save_expected"], got, allow_pickle=False)
        del got, expected
        timing = time_interleaved(
            {variant.label: contender},
            spec["repeats"],
            min_sample_s=spec.get("min_sample_s"),
            gap_s=0.0,
        )[variant.label]
    if variant.contender == BERTEMBED and variant.threads is None:
        result["auto_threads"] = automatic_threads()
    return {**result, "status": "ok", **timing}


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Entry point of a worker process (:func:`bertembed._bench.spawn.run_function`): ``argv[0]`` is the JSON spec.

    The spec's keys: ``case`` (the :class:`Case` fields), ``contender`` and
    ``threads`` (the :class:`Variant`), ``peer`` (a reference from
    :func:`bertembed._bench.measure.peer_ref`, for peers), ``T``, ``repeats``,
    ``seed``, ``min_sample_s``, and ``expected`` (bertembed's output to check
    against) or ``save_expected`` (where to save this output).
    """
    return measure(json.loads(argv[0]))
