"""gunicorn's server hooks for ``bertembed serve`` (``--config python:bertembed.serve.server.hooks``).

:func:`when_ready` runs in the master once the app is built (``--preload``)
and before the first worker is forked: it gives the heap's free pages back
(what parsing the tokenizer and checking the layer freed) and freezes the
objects built so far (``gc.freeze()``), so that the workers' garbage
collections never write to the pages they share with the master.
:func:`pre_fork`, :func:`post_fork` and :func:`child_exit` keep each worker's
slot on the board that spreads connections over the workers
(:mod:`.balance`).
"""

from __future__ import annotations

import gc
from typing import Any

from . import balance
from .memory import give_back_memory


def when_ready(server: Any) -> None:
    """Before the first fork: heap pages given back, the app's objects frozen."""
    given = give_back_memory()
    gc.freeze()
    frozen = gc.get_freeze_count()
    server.log.info("master: %.1f MiB given back, %d objects frozen before the fork", given / 2**20, frozen)


def pre_fork(server: Any, worker: Any) -> None:
    """In the master, before a worker is forked: its slot on the connection board."""
    worker.bertembed_slot = balance.board().claim()


def post_fork(server: Any, worker: Any) -> None:
    """In the new worker: take its place on the board."""
    balance.join(getattr(worker, "bertembed_slot", None))


def child_exit(server: Any, worker: Any) -> None:
    """In the master, once a worker has exited: its slot is free again."""
    slot = getattr(worker, "bertembed_slot", None)
    if slot is not None:
        balance.board().release(slot)
