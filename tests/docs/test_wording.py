"""The repository speaks in its own words: no reference a reader cannot follow.

Every text file of the repository (README, docs, sources, examples,
benchmarks, tests) is searched for phrases that point outside it: a
"seed" problem the reader never saw, or design notes that are not shipped.
RNG seeds (``seed=0``, ``--seed``) are fine and not matched.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers.paths import ROOT

ROOT = ROOT

# Built from pieces so that this file does not match itself.
_WORD = "se" + "ed"
FORBIDDEN = [
    re.compile(rf"\b{_WORD} problem", re.IGNORECASE),
    re.compile(rf"\bthe {_WORD}'s\b", re.IGNORECASE),
    re.compile(r"DESIGN" + r"\.md"),
    re.compile(r"/work/" + r"shared"),
]

#: Files the check skips (none: the release notes are part of the docs too).
EXEMPT: set[str] = set()

TEXT_SUFFIXES = {
    ".py",
    ".pyx",
    ".pyi",
    ".h",
    ".md",
    ".rst",
    ".txt",
    ".toml",
    ".cfg",
    ".sh",
    ".yml",
    ".yaml",
    ".json",
    ".in",
    "",
}


def _repository_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        names = [ROOT / n for n in out.splitlines()]
    except (OSError, subprocess.SubprocessError):
        names = [
            p
            for top in ("README.md", "docs", "src", "examples", "benchmarks", "tests", ".ci")
            for p in ([ROOT / top] if (ROOT / top).is_file() else (ROOT / top).rglob("*"))
        ]
    return [
        p
        for p in names
        if p.is_file() and p.suffix in TEXT_SUFFIXES and p.name not in EXEMPT and "_build" not in p.parts
    ]


def test_the_file_list_covers_the_shipped_text() -> None:
    if not (ROOT / "src" / "bertembed").is_dir():
        pytest.skip("src/ is not beside the tests (installed wheel)")
    files = {p.relative_to(ROOT).as_posix() for p in _repository_files()}
    assert {
        "README.md",
        "docs/index.rst",
        "src/bertembed/_cli/demo.py",
        "src/bertembed/_bench/report.py",
        "docs/serve.md",
    } <= files


def test_no_reference_outside_the_repository() -> None:
    hits = []
    for path in _repository_files():
        if path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for pattern in FORBIDDEN:
                if pattern.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "words from outside the project:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "line, bad",
    [
        (f"runs the {_WORD}'s sentence-pair example", True),
        (f"the sentence-pair example of the {_WORD} problem", True),
        ("the " + "DESIGN" + ".md goals", True),
        ("rng = np.random.default_rng(seed)", False),
        ("parser.add_argument('--seed', type=int, default=0)", False),
        ("fuzz targets seeded from valid files", False),
    ],
)
def test_patterns(line: str, bad: bool) -> None:
    assert any(p.search(line) for p in FORBIDDEN) is bad
