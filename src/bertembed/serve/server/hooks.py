"""gunicorn's server hooks for ``bertembed serve`` (``--config python:bertembed.serve.server.hooks``).

:func:`when_ready` runs in the master once the app is built (``--preload``)
and before the first worker is forked: it gives the heap's free pages back
(what parsing the tokenizer and checking the layer freed) and freezes the
objects built so far (``gc.freeze()``), so that the workers' garbage
collections never write to the pages they share with the master.
"""

from __future__ import annotations

import gc
from typing import Any

from .memory import give_back_memory


def when_ready(server: Any) -> None:
    """Before the first fork: heap pages given back, the app's objects frozen."""
    given = give_back_memory()
    gc.freeze()
    frozen = gc.get_freeze_count()
    server.log.info("master: %.1f MiB given back, %d objects frozen before the fork", given / 2**20, frozen)
