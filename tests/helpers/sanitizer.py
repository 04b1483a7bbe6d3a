"""Whether this process runs under AddressSanitizer (``.ci/sanitize.sh`` preloads it).

Under ASan freed memory sits in a quarantine and every allocation carries
redzones and shadow memory, so tests that measure a process's memory growth
are not meaningful there; the sanitizer run checks memory safety instead.
"""

from __future__ import annotations

import pytest


def asan_loaded() -> bool:
    """True when libasan is mapped into this process (and so into its children)."""
    try:
        with open("/proc/self/maps") as f:
            return "libasan" in f.read()
    except OSError:
        return False


#: Marks a test that measures memory growth: skipped under AddressSanitizer.
not_under_asan = pytest.mark.skipif(asan_loaded(), reason="memory growth is not meaningful under AddressSanitizer")
