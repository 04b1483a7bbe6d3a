"""What the ``benchmarks/`` scripts share that ``bertembed bench`` does not need, so it stays out of the wheel.

- :mod:`.memory`: the peak memory of one call against its result
  (``run.py``), and :func:`~.memory.rss_peak`, the peak resident memory
  around any call in a fresh process (``table_conversion.py``,
  ``onnx_split.py``);
- :mod:`.checkpoint`: the synthetic XLM-R-shaped checkpoint on disk
  (``load_checks.py``, ``table_conversion.py``, ``trimming.py``);
- :mod:`.trees`: code run under another source tree's bertembed with this
  harness's timing (``call_overhead.py``, ``load_checks.py``, ``isa_builds.py``).

A script imports them as ``shared.memory``, ``shared.checkpoint`` and ``shared.trees``: its own
folder, ``benchmarks/``, is first on ``sys.path`` when it runs, and the child
processes it starts get that folder on ``PYTHONPATH``
(``spawn.run_function(..., paths=[...])``). Both import the harness in the
package (``bertembed._bench``), never the reverse.
"""
