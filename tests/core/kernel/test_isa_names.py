"""The row kernels' names are declared once, in knobs.py: the C names them the same."""

from __future__ import annotations

import re

import pytest
from helpers import cpu
from helpers.paths import ROOT

from bertembed._core import _kernel, knobs

BE_ROWS = ROOT / "src" / "bertembed" / "_core" / "csrc" / "be_rows.h"


def _c_names() -> dict[str, set[str]]:
    """The ISA names be_rows.h uses: in ``be_isas``, assigned to ``be_isa``, compared with the cap."""
    text = BE_ROWS.read_text(encoding="utf-8")
    built = re.findall(r'be_isas\s*=\s*"([^"]*)"', text)
    return {
        "built": {name for line in built for name in line.split()},
        "chosen": set(re.findall(r'be_isa\s*=\s*"([^"]*)"', text)),
        "caps": set(re.findall(r'strcmp\(cap,\s*"([^"]*)"\)', text)),
        "lists": {" ".join(line.split()) for line in built},
    }


@pytest.mark.skipif(not BE_ROWS.is_file(), reason="no source tree beside the tests")
def test_the_c_names_are_the_knobs():
    names = _c_names()
    accepted = set(knobs.ISA.accepted)
    assert names["built"] and names["chosen"] and names["caps"]
    assert names["built"] <= accepted
    assert names["chosen"] == names["built"] == accepted
    assert names["caps"] <= accepted
    # Each build's list is a prefix of its architecture's order, narrowest first.
    orders = (knobs.ISAS_X86, knobs.ISAS_ARM)
    for line in names["lists"]:
        listed = tuple(line.split())
        assert any(order[: len(listed)] == listed for order in orders), line


def test_the_knob_lists_every_isa_once():
    assert knobs.ISA.accepted == tuple(dict.fromkeys(knobs.ISAS_X86 + knobs.ISAS_ARM))
    assert knobs.ISAS_X86[0] == knobs.ISAS_ARM[0] == "baseline"


def test_this_build_names_only_known_isas():
    info = _kernel.build_info()
    assert info["isa"] in knobs.ISA.accepted
    assert info["isas"] == cpu.order()[: len(info["isas"])]
