"""The ``BERTEMBED_*`` environment variables: declared here, read and checked here.

A bad value is a warning naming the variable, the value and the accepted
values, and the default holds. Every knob is read once, when bertembed is
imported (the kernel picks its row kernel and OpenMP its wait policy then).

Examples
--------
>>> from bertembed._core import knobs
>>> knobs.WAIT_POLICY.accepted
('passive', 'active')
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

_warned: dict[str, str] = {}  # the bad values already warned about


@dataclass(frozen=True)
class Knob:
    """An environment variable: its accepted words (empty: a non-negative integer) and default."""

    name: str
    accepted: tuple[str, ...]
    default: str
    meaning: str

    def describe(self) -> str:
        return ", ".join(self.accepted) if self.accepted else "a non-negative integer"

    def read(self) -> str:
        """The variable's value, or the default (with a warning, once, when the value is not accepted)."""
        raw = os.environ.get(self.name)
        if _warned.get(self.name) == raw:
            return self.default
        if raw is None or raw == "":
            return self.default
        ok = raw in self.accepted if self.accepted else raw.strip().isdigit()
        if not ok:
            _warned[self.name] = raw
            default = repr(self.default) if self.default else "the default"
            warnings.warn(
                f"bertembed: {self.name}={raw!r} is not accepted ({self.describe()}); using {default}",
                RuntimeWarning,
                stacklevel=3,
            )
            return self.default
        return raw.strip()


#: The row kernels' instruction sets, by their number in the C (``BE_ISA_*`` in
#: ``csrc/be_kinds.h``, ``_kernel.ISA_*``): the values of ``BERTEMBED_ISA``.
#: ``tests/core/kernel/test_isa_names.py`` checks that each name's number is
#: its place here. Per architecture, narrowest first:
ISA_NAMES = ("baseline", "avx2", "avx512", "neon")
ISAS_X86 = ISA_NAMES[:3]
ISAS_ARM = (ISA_NAMES[0], ISA_NAMES[3])

ISA = Knob(
    "BERTEMBED_ISA",
    ISA_NAMES,
    "",
    "caps the row kernel's instruction set (x86: baseline < avx2 < avx512)",
)
RESULT_CACHE_MB = Knob(
    "BERTEMBED_RESULT_CACHE_MB",
    (),
    "64",
    "megabytes of released result buffers kept for reuse (0: none)",
)
WAIT_POLICY = Knob(
    "BERTEMBED_WAIT_POLICY",
    ("passive", "active"),
    "passive",
    "what idle OpenMP workers do between calls: sleep (passive) or spin (active)",
)

KNOBS = (ISA, RESULT_CACHE_MB, WAIT_POLICY)


def check_all() -> dict[str, str]:
    """Read every knob (warning about bad values): ``{name: value in effect}``."""
    return {k.name: k.read() for k in KNOBS}
