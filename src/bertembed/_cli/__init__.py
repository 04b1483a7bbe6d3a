"""The ``bertembed`` command line (stdlib argparse).

Subcommands:

- ``demo``: the classic sentence-pair example, step by step;
- ``info``: this build (version, OpenMP, threads, compiler, dtypes);
- ``bench``: the comparison harness, with a progress bar, a table, JSON and a plot;
- ``embed``: a checkpoint applied to a large id file in bounded memory, or to
  one text or text pair tokenised with the model's own ``tokenizer.json``;
- ``convert``: a checkpoint's embedding layer stored in another table dtype
  (int8, bfloat16, float16, float32), saved for ``from_pretrained`` to map;
- ``split-onnx``: a whole-model ONNX graph cut into a bertembed layer
  directory and an encoder that takes ``inputs_embeds``;
- ``trim``: a checkpoint's embedding layer with only the token rows a corpus,
  an id list or Unicode scripts need, saved with its id map;
- ``export``: a server artifact from a model directory or a whole-model ONNX
  file (the ``serve`` extra, and torch or onnx);
- ``serve``: an artifact served over HTTP by gunicorn (the ``serve`` extra).

Expected failures (a missing or malformed file, a bad id, a bad argument)
print one line, ``bertembed: error: ...``, on stderr and exit non-zero;
they never print a traceback.

Layout (imports go one way, downwards)::

    parser      build_parser, main                      (top)
    demo, info, bench, embed, convert, split_onnx, trim,
    export, serve                                       one module per subcommand
    text                                                embed --text
    common      CLIError, exit codes, ProgressBar, file helpers   (bottom)

Examples
--------
>>> from bertembed._cli import main
>>> main(["demo"])  # doctest: +ELLIPSIS
Sentence pair: "The cat sat" / "It slept"  (H = 4)
...
0
"""

from .parser import main

__all__ = ["main"]
