"""The server's app with the memory steps proposed for it, for the multilingual benchmark's ``+proposed`` contender.

gunicorn imports ``memory_app:make()`` instead of ``bertembed.serve.server.app:create_app()``
(``multilingual.py`` puts this folder on the workers' ``PYTHONPATH``). It builds the same app,
then, in the master before the fork, gives the heap's free pages back to the system
(:func:`bertembed.serve.server.memory.give_back_memory`) and freezes the objects built so far
(``gc.freeze()``: the workers' collections no longer write to the pages they share with the
master); in each worker, once its encoder session is started (the lifespan's startup is
complete), it gives the heap's free pages back again. The app's answers are unchanged.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from bertembed.serve.server.app import create_app
from bertembed.serve.server.memory import give_back_memory


def make() -> Any:
    """The app of :func:`create_app`, with the memory steps around its start."""
    app = create_app()
    give_back_memory()
    gc.freeze()

    async def wrapped(
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "lifespan.startup.complete":
                give_back_memory()
            await send(message)

        await app(scope, receive, sending)

    return wrapped
