"""The row kernels' instruction sets: numbered once in the C (``be_kinds.h``), named once in knobs.py."""

from __future__ import annotations

import re

import pytest
from helpers import cpu
from helpers.paths import ROOT

from bertembed._core import _kernel, knobs

CSRC = ROOT / "src" / "bertembed" / "_core" / "csrc"


def test_each_name_is_at_its_number():
    numbers = {name: getattr(_kernel, "ISA_" + name.upper()) for name in knobs.ISA_NAMES}
    assert numbers == {name: i for i, name in enumerate(knobs.ISA_NAMES)}
    assert _kernel.ISA_COUNT == len(knobs.ISA_NAMES)


@pytest.mark.skipif(not CSRC.is_dir(), reason="no source tree beside the tests")
def test_the_c_spells_no_isa_name():
    """The C picks and reports its row kernel by number: no name is restated there."""
    names = "|".join(knobs.ISA_NAMES)
    for header in sorted(CSRC.glob("*.h")):
        quoted = re.findall(rf'"({names})[" ]', header.read_text(encoding="utf-8"))
        assert not quoted, (header.name, quoted)


def test_the_knob_lists_every_isa_once():
    assert knobs.ISA.accepted == knobs.ISA_NAMES == tuple(dict.fromkeys(knobs.ISAS_X86 + knobs.ISAS_ARM))
    assert knobs.ISAS_X86[0] == knobs.ISAS_ARM[0] == "baseline"


def test_this_build_names_only_known_isas():
    info = _kernel.build_info()
    assert info["isa"] in knobs.ISA.accepted
    assert info["isas"] == cpu.order()[: len(info["isas"])]
    assert info["isa"] in info["isas"]
