"""The kernel and the only code that talks to it.

Owns the compiled kernel (``_kernel.pyx`` and its C headers in ``csrc/``,
joined in ``_kernel.pxd``; the numbers it shares with Python, storage kinds,
position rules and the codes of its id checks, are declared once in the
headers and read by Python as the kernel's ``cpdef enum`` members), the dtype
registry (``dtypes``), tables (``tables``), trimmed token tables' id maps
(``trim``), input normalisation (``validate``), position numbering
(``positions``), the result-buffer pool (``pool``), binding tables to the
kernel and normalising one call (``embed``), the words of a failed id check
(``bad_ids``) and the process runtime:
OpenMP, threads, fork safety, ``show_config`` (``runtime``), the CPU budget
(``cpus``), the ``BERTEMBED_*`` knobs (``knobs``) and the OpenMP wait policy
(``openmp_env``).

May import: NumPy, the standard library and ``bertembed._version``; nothing
else of the package (everything else is built on top of it).
"""
