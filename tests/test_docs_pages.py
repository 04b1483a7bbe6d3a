"""The examples (``>>>`` lines) of the documentation pages in docs/ run and print what they show.

The README's examples are tested by test_readme.py, the docstrings' by
test_docs.py. The pages are read as plain doctest files: no Sphinx needed.
"""

import doctest
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
SKIP_DIRS = {"_build", "_data", "_ext", "_templates", "generated"}
#: Pages that must keep at least this many examples (so that examples turned
#: into plain code blocks by mistake are noticed).
LEAST_EXAMPLES = {"user-guide.rst": 10, "precision.rst": 10, "checkpoints.rst": 10}
#: Optional packages a page's examples import (the test extra has them).
NEEDS = {"checkpoints.rst": ["safetensors"]}


def _pages() -> list[Path]:
    if not DOCS.is_dir():
        return []
    return sorted(
        p for p in DOCS.rglob("*")
        if p.suffix in (".rst", ".md") and not SKIP_DIRS.intersection(p.relative_to(DOCS).parts)
    )


PAGES = _pages()
needs_docs = pytest.mark.skipif(not PAGES, reason="docs/ is not beside the tests (installed wheel)")


@needs_docs
@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
def test_page_examples(page):
    for module in NEEDS.get(page.relative_to(DOCS).as_posix(), []):
        pytest.importorskip(module)
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
