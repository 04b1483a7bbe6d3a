"""A short run of the fuzz target under pytest (hypothesis drives it).

``tests/fuzz/fuzz_embed.py`` explains the cases and the oracle; run it directly
for a long atheris (or hypothesis) session.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.extras import needs

hypothesis = needs("hypothesis", "test")
from fuzz_embed import HypothesisDraw, run_case  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_calls_give_the_reference_or_a_clean_error(data):
    with np.errstate(all="ignore"):
        run_case(HypothesisDraw(data))


def _expect_rejection(force=None):
    """Random cases (some decisions fixed by `force`) until the oracle reports one."""

    # Up to 3,000 cases: the search stops at the first report, so this costs
    # only when the drawn cases rarely expose the fault (int8 offsets matter
    # only in some of them).
    @settings(
        max_examples=3000,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def fuzz(data):
        with np.errstate(all="ignore"):
            run_case(HypothesisDraw(data), force)

    with pytest.raises(AssertionError, match=r"differ|not `out`|Mismatch"):
        fuzz()


def test_the_oracle_rejects_a_wrong_result(monkeypatch):
    """The harness can fail: a kernel returning wrong rows is reported."""
    import bertembed._function as api

    real = api.embed_ids

    def off_by_one(*args, **kwargs):
        return real(*args, **kwargs) + 1.0

    monkeypatch.setattr(api, "embed_ids", off_by_one)
    _expect_rejection()


def test_the_oracle_rejects_a_wrong_int8_dequantisation(monkeypatch):
    """The kernel reading int8 rows without their offsets is reported, though
    the layer keeps (and the oracle reads) the right scales and offsets."""
    from bertembed import _layer
    from bertembed._core.dtypes import I8

    def no_offsets(tables):
        if tables.tok.kind != I8:
            return tables
        scale = tables.tok.scale.copy()
        scale[:, 1] = 0.0
        return tables._replace(tok=tables.tok._replace(scale=scale))

    real_init, real_embed = _layer.BertEmbeddings._init, _layer.embed_ids

    def init(self, tables, *args, **kwargs):
        real_init(self, no_offsets(tables), *args, **kwargs)  # the kernel's plan (the common call)
        self._tables = tables

    def embed(tables, *args, **kwargs):  # the checked path
        return real_embed(no_offsets(tables), *args, **kwargs)

    monkeypatch.setattr(_layer.BertEmbeddings, "_init", init)
    monkeypatch.setattr(_layer, "embed_ids", embed)
    _expect_rejection({"api": "layer", "table_dtype": "int8"})


def test_the_oracle_rejects_float16_bits_in_a_bfloat16_result(monkeypatch):
    """A kernel writing float16 bits into a bfloat16 result is reported."""
    needs("ml_dtypes", "bfloat16")
    import bertembed._function as api

    real = api.embed_ids

    def float16_bits(*args, **kwargs):
        result = real(*args, **kwargs)
        if result.dtype.name == "bfloat16":
            bits = result.astype(np.float32).astype(np.float16).view(np.uint16)
            result.view(np.uint16)[...] = bits
        return result

    monkeypatch.setattr(api, "embed_ids", float16_bits)
    _expect_rejection({"api": "function", "dtype": "bfloat16"})


def test_the_oracle_rejects_a_wrong_padding_rule(monkeypatch):
    """A layer numbering positions from the wrong padding id is reported (wrong rows, or a wrong error)."""
    from bertembed import _layer
    from bertembed._core.positions import PositionRule

    real = _layer._as_rule

    def shifted(rule, padding_idx, tables):
        got = real(rule, padding_idx, tables)
        return PositionRule("padding", padding_idx=got.padding_idx + 1) if got.kind == "padding" else got

    monkeypatch.setattr(_layer, "_as_rule", shifted)

    @settings(
        max_examples=3000,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def fuzz(data):
        with np.errstate(all="ignore"):
            run_case(HypothesisDraw(data), {"api": "layer", "position_rule": "padding"})

    with pytest.raises(AssertionError, match=r"differ|Mismatch|unexpected ValueError|call succeeded"):
        fuzz()
