"""A short run of the fuzz target under pytest (hypothesis drives it).

``tests/fuzz_embed.py`` explains the cases and the oracle; run it directly
for a long atheris (or hypothesis) session.
"""

from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from fuzz_embed import HypothesisDraw, run_case  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_calls_give_the_reference_or_a_clean_error(data):
    with np.errstate(all="ignore"):
        run_case(HypothesisDraw(data))


def test_the_oracle_rejects_a_wrong_result(monkeypatch):
    """The harness can fail: a kernel returning wrong rows is reported."""
    import bertembed._api as api

    real = api.embed_ids

    def off_by_one(*args, **kwargs):
        return real(*args, **kwargs) + 1.0

    monkeypatch.setattr(api, "embed_ids", off_by_one)

    @settings(max_examples=500, deadline=None, database=None, phases=[Phase.generate],
              report_multiple_bugs=False, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def fuzz(data):
        with np.errstate(all="ignore"):
            run_case(HypothesisDraw(data))

    with pytest.raises(AssertionError, match=r"differ|not `out`|Mismatch"):
        fuzz()
