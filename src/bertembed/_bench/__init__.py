"""Benchmark harness: bertembed side by side with NumPy, torch and ONNX Runtime.

Layout (imports go one way, downwards)::

    runner      run(): every case, every contender; results and goals   (top)
    report      format_table
    memory      peak_memory: extra memory of one call / result size
    peers       NumPy, np.copyto, torch, ONNX Runtime builders; PEERS
    subject     bertembed_call: the contender being measured
    timing      time_interleaved
    check       mismatch: a peer's output against bertembed's
    machine     machine_info
    cases       DEFAULT_CASES, GOALS (the DESIGN.md goal table)
    data        Case, Inputs, Context, Peer, make_inputs                (bottom)

Only NumPy is needed to import any of them: torch, onnx and onnxruntime are
imported when their peer is built, and a missing one is reported as
unavailable.
"""
