"""Benchmark harness: bertembed side by side with NumPy, torch and ONNX Runtime.

Layout (each module imports only modules listed below it)::

    runner      run(): both scenarios, every case and contender; goal evaluation   (top)
    worker      the child process of the isolated scenario: one contender, one case
    report      format_table, format_goals
    memory      peak_memory: extra memory of one call / result size
    measure     build a contender, call it once, check it against bertembed
    peers       NumPy, np.take, np.copyto, torch, ONNX Runtime builders; PEERS
    subject     bertembed_call: the contender being measured
    spawn       start a fresh Python that imports this same bertembed
    timing      time_interleaved
    check       mismatch: a peer's output against bertembed's
    machine     machine_info
    cases       DEFAULT_CASES, GOALS (the performance goals)
    data        Case, Inputs, Context, Contender, Peer, Variant, make_inputs    (bottom)

Only NumPy is needed to import any of them: torch, onnx, onnxruntime and
ml_dtypes are imported when a peer or case needs them, and a missing one is
reported as unavailable.
"""
