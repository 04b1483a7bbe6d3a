"""The kernel and the only code that talks to it.

Owns the compiled kernel (``_kernel.pyx`` and its C headers in ``csrc/``;
the numbers it shares with Python, storage kinds and position rules, are
declared once in ``csrc/be_kinds.h`` and exported by it), the dtype registry
(``dtypes``), tables (``tables``), trimmed token tables' id maps (``trim``),
input validation (``validate``), position
numbering (``positions``), the result-buffer pool (``pool``), binding tables
to the kernel and checking one call (``embed``) and the process runtime:
OpenMP, threads, fork safety, ``show_config`` (``runtime``), the CPU budget
(``cpus``), the ``BERTEMBED_*`` knobs (``knobs``) and the OpenMP wait policy
(``openmp_env``).

May import: NumPy, the standard library and ``bertembed._version``; nothing
else of the package (everything else is built on top of it).
"""
