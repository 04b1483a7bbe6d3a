"""Benchmark harness: bertembed side by side with NumPy, torch and ONNX Runtime.

The one place that times, isolates and records: ``bertembed bench`` and every
timing script of ``benchmarks/`` time through :mod:`.timing`, start their
child processes through :mod:`.spawn`, and read and write results through
:mod:`.schema`. It imports the rest of the package (the layer, the kernel's
helpers for the thread choice, the checkpoint writer), never the reverse.

Layout (each module imports only modules listed below it)::

    runner      run(): both scenarios, every case and contender; goal evaluation   (top)
    worker      the child process of the isolated scenario: one contender, one case
    report      format_table, format_goals, format_table_dtypes, format_run
    schema      the results' JSON: SCHEMA_VERSION, parse/load (checked), dumps, typed accessors
    memory      peak_memory: extra memory of one call / result size; rss_peak around any call
    measure     build a contender, call it once, check it against bertembed
    peers       NumPy, np.take, np.copyto, torch, ONNX Runtime builders; PEERS
    subject     bertembed_call: the contender being measured
    check       mismatch: a peer's output against bertembed's
    machine     machine_info
    cases       DEFAULT_CASES, TABLE_CASES, GOALS (the performance goals)
    data        Case, Inputs, Context, Peer, Variant, make_inputs
    spawn       start a fresh Python: this same bertembed (run_child) or another tree's (run_in_tree)
    timing      time_interleaved, time_once, CallLog, Contender: the only clock   (bottom)

Only NumPy is needed to import any of them (:mod:`.timing`, only the standard
library): torch, onnx, onnxruntime and ml_dtypes are imported when a peer or
case needs them, and a missing one is reported as unavailable.
"""
