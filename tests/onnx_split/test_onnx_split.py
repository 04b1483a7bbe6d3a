"""``bertembed.onnx.split_model`` on whole-model ONNX exports of small random transformers models.

Each family of :data:`onnx_exports.FAMILIES` is exported with each exporter
of :data:`onnx_exports.EXPORTERS` (once per session), split, and the split
model (the bertembed layer, then ``encoder.onnx`` in ONNX Runtime) must give
the whole model's ``last_hidden_state`` on right- and left-padded batches,
to 1e-5 of the output's largest value. A split the splitter refuses must be
one of :data:`REFUSED`, with its message. ``pytest -s`` prints the measured
differences per family and exporter.
"""

from __future__ import annotations

import pytest
from helpers.extras import needs

needs("onnx", "peers")
needs("onnxruntime", "peers")
needs("torch", "peers")
needs("transformers", "peers")
needs("onnxscript", "peers")

from helpers import onnx_exports  # noqa: E402
from helpers.hf_families import print_measured  # noqa: E402

from bertembed.onnx import split_model  # noqa: E402

pytestmark = pytest.mark.heavy

#: Relative tolerance: max |split - whole| / max(1, max |whole|) (float32).
RTOL = 1e-5

#: (family, exporter) pairs the splitter refuses, with a pattern of the message.
REFUSED: dict[tuple[str, str], str] = {}

_MEASURED: dict[str, float] = {}


@pytest.fixture(scope="session")
def exports(tmp_path_factory):
    cache: dict[tuple[str, str], tuple] = {}

    def get(family: str, exporter: str):
        key = (family, exporter)
        if key not in cache:
            directory = tmp_path_factory.mktemp(f"{family}-{exporter}")
            if exporter == "int8":  # from the cached classic17 file
                path, config = get(family, "classic17")
                cache[key] = onnx_exports.quantize(path, directory), config
            else:
                cache[key] = onnx_exports.export(family, exporter, directory)
        return cache[key]

    return get


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print_measured(_MEASURED, "max |split - whole| / max(1, max |whole|), per family / exporter")


#: The dynamo exporter takes ~30 s per model here: those cases are marked slow.
_EXPORTER_PARAMS = [pytest.param(e, marks=pytest.mark.slow) if e == "dynamo" else e for e in onnx_exports.EXPORTERS]


@pytest.mark.parametrize("exporter", _EXPORTER_PARAMS)
@pytest.mark.parametrize("family", onnx_exports.FAMILIES)
def test_split_equals_whole_model(family, exporter, exports, tmp_path):
    path, config = exports(family, exporter)
    if (family, exporter) in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[family, exporter]):
            split_model(path, tmp_path)
        _MEASURED[f"{family} / {exporter}"] = float("nan")
        return
    result = split_model(path, tmp_path)
    assert result.encoder_inputs[0] == "inputs_embeds"
    assert "input_ids" in result.removed_inputs
    difference = onnx_exports.compare(path, tmp_path, config)
    _MEASURED[f"{family} / {exporter} ({result.layer_norm}, {result.position_rule})"] = difference
    assert difference <= RTOL
