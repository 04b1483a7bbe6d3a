"""Benchmark harness: bertembed side by side with NumPy, torch and ONNX Runtime.

The one place that times, isolates and records: ``bertembed bench`` and every
timing script of ``benchmarks/`` time through :mod:`.timing`, start their
child processes through :mod:`.spawn` (a child runs a module's function,
:mod:`.child`), and read and write results through :mod:`.schema`. It
imports the rest of the package (the layer, the kernel's helpers for the
thread choice), never the reverse.

Layout (each module imports only modules listed below it)::

    runner      run(): both scenarios, every case and contender; goal evaluation   (top)
    plot        draw(): the one plotter of the results (bench --plot, the docs' figure)
    worker      the child process of the isolated scenario: one contender, one case
    child       python -m bertembed._bench.child TARGET ARGS: call a function, emit its result
    report      format_table, format_goals, format_table_dtypes, format_run
    schema      the results' JSON: SCHEMA_VERSION, parse/load (checked), dumps, typed accessors
    measure     build a contender, call it once, check it against bertembed
    peers       NumPy, np.take, np.copyto, torch, ONNX Runtime builders; PEERS
    subject     bertembed_call: the contender being measured; bert_base_layer
    check       mismatch: a peer's output against bertembed's
    machine     machine_info
    cases       DEFAULT_CASES, TABLE_CASES, GOALS (the performance goals)
    data        Case, Inputs, Context, Peer, Variant, make_inputs
    spawn       start a fresh Python: a module's function (run_function), a program (run_child, run_program)
    timing      time_interleaved, time_once, CallLog, Contender: the only clock   (bottom)

What ships in the wheel and why: ``bertembed bench`` is a user's command
(measure on your own host: ``docs/performance.rst``, ``docs/cli.rst``), so
everything it runs ships: ``runner``, ``worker``, ``child``, ``report``,
``schema``, ``plot`` (``--plot``), ``measure``, ``peers``, ``subject``,
``check``, ``machine``, ``cases`` and ``data`` are its cases, peers, processes,
tables and JSON, and ``timing`` its clock. Three parts serve only the
``benchmarks/`` scripts and still ship, each for one reason:

- ``spawn``'s ``run_child``, ``in_rounds``, ``run_command``,
  ``start_process``, ``stop_process`` and ``TIMING_FILE``: the scripts under
  ``benchmarks/service/`` run from their own folder, where only the installed
  or ``PYTHONPATH`` bertembed is importable (not ``benchmarks/shared/``), and
  ``benchmarks/quota.py``'s child joins its cgroup before bertembed is
  imported (``run_child``);
- ``timing.CallLog``: the thread-choice scripts log calls with the clock that
  times them, which lives here;
- ``subject.bert_base_layer`` and ``subject.layer_arrays``: the scripts build
  their BERT-base layers and look inside layers through the same code as the
  harness's cases (a few lines, beside ``bertembed_call``).

What only the scripts use and ``bertembed bench`` never runs lives out of
the wheel, in ``benchmarks/shared/``: the peak-memory measurement
(``shared.memory``), the synthetic checkpoint on disk
(``shared.checkpoint``) and the runs under another source tree
(``shared.trees``).

Only NumPy is needed to import any of them (:mod:`.timing`, only the standard
library): torch, onnx, onnxruntime, ml_dtypes and matplotlib are imported
when a peer, case or figure needs them, and a missing one is reported as
unavailable.
"""
