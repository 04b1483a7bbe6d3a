"""The dtype registry's facts are the ones the rest of the package acts on."""

import importlib.util

import numpy as np
import pytest

from bertembed._cli import convert as cli_convert
from bertembed._cli import trim as cli_trim
from bertembed._core import dtypes
from bertembed._core.tables import convert_tables, converted_by, prepare_tables


def test_conversions_are_table_dtypes_and_the_cli_offers_them():
    assert set(dtypes.CONVERSIONS) <= set(dtypes.TABLE_DTYPES)
    assert not any(dtypes.BY_NAME[n].wide for n in dtypes.CONVERSIONS)
    assert cli_convert.TABLE_DTYPES == dtypes.CONVERSIONS
    assert cli_trim.TABLE_DTYPES == dtypes.CONVERSIONS


@pytest.mark.parametrize("target", dtypes.TABLE_DTYPES)
@pytest.mark.parametrize("given", [np.float32, np.float16])
def test_converted_by_names_the_tables_convert_tables_changes(target, given):
    rng = np.random.default_rng(0)
    tok, pos, seg = (rng.standard_normal((n, 4)).astype(given) for n in (10, 6, 2))
    tables = prepare_tables(tok, pos, seg, None, None, 1e-12, None, None)
    new = convert_tables(tables, target)
    changed = [old for old, now in zip(tables[:4], new[:4], strict=True) if old is not None and now is not old]
    assert [id(t) for t in converted_by(tables, target)] == [id(t) for t in changed]
    if dtypes.BY_NAME[target].quantised:
        assert all(t is tables.tok for t in changed)


def test_every_float_array_dtype_has_a_tolerance():
    # The ONNX splitter reads NumPy float tables (float16, float32, float64) and checks by their tolerance.
    for entry in dtypes.AS_STORED:
        if entry.storage.kind == "f":
            assert entry.tolerance is not None and 0 < entry.tolerance < 0.01, entry.name
    assert dtypes.FLOAT64.tolerance < dtypes.FLOAT32.tolerance < dtypes.FLOAT16.tolerance


def test_array_dtype():
    for entry in dtypes.AS_STORED:
        if entry is dtypes.BFLOAT16 and importlib.util.find_spec("ml_dtypes") is None:
            with pytest.raises(TypeError, match="ml_dtypes"):
                dtypes.array_dtype(entry.name)
            continue
        assert dtypes.of_array(dtypes.array_dtype(entry.name)) is entry
    with pytest.raises(ValueError, match="quantising"):
        dtypes.array_dtype(dtypes.INT8.name)
