"""Where the repository's parts are, seen from the tests."""

from pathlib import Path

#: The repository root (the tests live in ``ROOT / "tests" / <concern>``).
ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
