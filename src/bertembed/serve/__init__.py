"""The embedding server: ``bertembed export`` builds an artifact, ``bertembed serve`` serves it.

Install it with ``pip install "bertembed[serve]"`` (and ``"bertembed[export]"``
where an artifact is built from a torch model). Layout, imports going one way
(downwards)::

    server/     the ASGI app, its batcher, metrics and pipeline, the gunicorn launcher
    protocols   the OpenAI, Text Embeddings Inference and {"texts"} request and answer shapes
    artifact/   building an artifact (from torch or a whole-model ONNX file) and reading one

Nothing outside this folder imports it; importing it loads none of the
server's packages (each module imports what it needs).
"""
