"""The hostile-checkpoint corpus (``tests/helpers/hostile_checkpoints.py``): every case a clean refusal or a load.

The corpus is generated into a temporary directory and loaded by a worker
process under a 3 GiB address-space limit (Linux; elsewhere without it); a
case that crashes the worker or hangs is reported by name, and the worker
goes on with the next case.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time

import pytest
from helpers.paths import env_with_helpers

# The corpus has FIFOs and links to /dev/zero (POSIX: Linux and macOS). The
# worker's address-space limit is set only where Linux enforces it
# (hostile_checkpoints._limit_address_space): macOS runs the corpus without it.
pytestmark = pytest.mark.skipif(
    not (hasattr(os, "mkfifo") and os.path.exists("/dev/zero")), reason="FIFOs and /dev/zero (POSIX)"
)

#: The worker: the helpers module run as a program, with tests/ on its PYTHONPATH.
WORKER = [sys.executable, "-m", "helpers.hostile_checkpoints"]
#: Wall-clock limit of one worker run (the whole corpus takes well under this; AddressSanitizer slows it).
RUN_SECONDS = 1800 if "libasan" in os.environ.get("LD_PRELOAD", "") else 600

#: Error types a refusal may have: ValueError (normally bertembed.CheckpointError) and these OSErrors.
ALLOWED = ("ValueError", "FileNotFoundError", "IsADirectoryError")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    start = time.monotonic()
    env = env_with_helpers()
    subprocess.run([*WORKER, "build", str(root)], check=True, capture_output=True, env=env)
    cases = json.loads((root / "cases.json").read_text())
    built = time.monotonic() - start
    outcomes: dict[int, dict] = {}
    first = 0
    while first < len(cases):
        proc = subprocess.run(
            [*WORKER, "run", str(root), str(first)],
            capture_output=True,
            text=True,
            timeout=RUN_SECONDS,
            env=env,
        )
        started = None
        for line in proc.stdout.splitlines():
            record = json.loads(line)
            if "start" in record:
                started = record["i"]
            else:
                outcomes[record["i"]] = record
                started = None
        if started is None:  # every case reported
            assert proc.returncode == 0, proc.stderr[-3000:]
            break
        outcomes[started] = {"outcome": "died", "returncode": proc.returncode, "stderr": proc.stderr[-2000:]}
        first = started + 1
    print(
        f"\nhostile corpus: {len(cases)} cases, built in {built:.1f} s, run in {time.monotonic() - start - built:.1f} s"
    )
    return cases, outcomes


def test_the_corpus_covers_every_category(corpus):
    from helpers.hostile_checkpoints import CATEGORIES

    cases, _ = corpus
    counts = collections.Counter(c[0] for c in cases)
    print("cases by category:", dict(counts))
    assert len(cases) >= 100
    assert set(counts) == set(CATEGORIES)
    assert all(k >= 5 for k in counts.values())


def test_every_case_ends_cleanly(corpus):
    cases, outcomes = corpus
    bad = []
    for i, (category, name, _target, expect, names) in enumerate(cases):
        got = outcomes.get(i, {"outcome": "not run"})
        if expect == "load":
            if got["outcome"] != "loaded":
                bad.append(f"{category} / {name}: must load, got {got}")
            continue
        if got["outcome"] != "error":
            bad.append(f"{category} / {name}: expected a clean error, got {got}")
            continue
        message = got["message"]
        if not any(t in got["mro"] for t in ALLOWED):
            bad.append(f"{category} / {name}: {got['type']} is not a ValueError: {message[:300]}")
        elif names not in message:
            bad.append(f"{category} / {name}: the message does not name {names}: {message[:300]}")
        elif "int_max_str_digits" in message or got["length"] > 2000:
            bad.append(
                f"{category} / {name}: an unhelpful or unbounded message ({got['length']} chars): {message[:300]}"
            )
    assert not bad, "\n".join(bad)


def test_the_address_space_limit_is_left_out_off_linux(monkeypatch):
    """macOS's setrlimit refuses RLIMIT_AS (ValueError): the worker runs the corpus without the limit there."""
    import resource

    from helpers import hostile_checkpoints

    def refuse(*args):
        raise ValueError("current limit exceeds maximum limit")

    monkeypatch.setattr(resource, "setrlimit", refuse)
    monkeypatch.setattr(hostile_checkpoints.sys, "platform", "darwin")
    assert hostile_checkpoints._limit_address_space() is False
