"""The README's Python examples (the ``>>>`` lines) run and print what they show."""

import doctest

import pytest
from helpers.paths import ROOT

README = ROOT / "README.md"


@pytest.mark.skipif(not README.exists(), reason="README.md is not beside the tests (installed wheel)")
def test_readme_examples():
    result = doctest.testfile(
        str(README), module_relative=False, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted >= 10, f"only {result.attempted} README examples found"
    assert result.failed == 0


@pytest.mark.skipif(not README.exists(), reason="README.md is not beside the tests (installed wheel)")
def test_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; the detail belongs in docs/"


@pytest.mark.skipif(not README.exists(), reason="README.md is not beside the tests (installed wheel)")
def test_readme_starts_with_the_two_commands():
    text = README.read_text()
    blocks = [b.split("```", 1)[0].strip() for b in text.split("```bash\n")[1:3]]
    assert blocks[0].endswith("pip install . && bertembed demo")
    assert blocks[1].endswith('pip install ".[test]" && python -m pytest')
    ci = (README.parent / ".ci" / "run").read_text()
    assert blocks[1] in ci, ".ci/run must run the README's test command"
    fresh = (README.parent / ".ci" / "readme.sh").read_text()
    assert blocks[0] in fresh and blocks[1] in fresh, ".ci/readme.sh must run the README's two commands as written"
