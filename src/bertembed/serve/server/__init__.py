"""Serving an artifact: the ASGI app (:mod:`.app`), its batcher, metrics and pipeline, the launcher (:mod:`.run`)."""
