"""The kept fuzz corpus (``tests/fuzz/corpus/<target>/``) replayed through the fuzzers' oracles.

The inputs are those the fuzz campaigns found that reach new code, plus the
ones that once made a reader fail (``regression-*``); ``tests/fuzz/replay.py``
explains the replay and ``tests/fuzz/campaign.py`` how the corpus grows.
"""

from __future__ import annotations

import pytest
import replay
from helpers.extras import needs


@pytest.mark.parametrize("target", replay.READERS)
def test_every_kept_input_reads_or_fails_cleanly(target):
    files = replay.inputs(target)
    assert len(files) >= 5, f"the kept corpus of {target} has {len(files)} inputs"
    outcomes, failures = replay.replay(target, files)
    assert not failures, "\n".join(failures)
    assert sum(outcomes.values()) == len(files)
    assert outcomes["ok"] >= 1  # the valid seeds are part of it


def test_every_kept_embed_input_meets_the_oracle():
    needs("atheris", None)
    files = replay.inputs("embed")
    assert len(files) >= 5
    outcomes, failures = replay.replay("embed", files)
    assert not failures, "\n".join(failures)
    assert outcomes["ok"] >= 1


def test_the_replay_reports_an_input_the_oracle_rejects(tmp_path, monkeypatch):
    import fuzz_checkpoints

    (tmp_path / "pickle").mkdir()
    (tmp_path / "pickle" / "memo").write_bytes(b"\x80\x02}r\x00\x00\x00\x40.")
    assert replay.replay("pickle", replay.inputs("pickle", tmp_path)) == ({"CheckpointError": 1}, [])

    def recurse(*args, **kwargs):
        raise RecursionError("deep")

    monkeypatch.setattr(fuzz_checkpoints, "load_state_dict", recurse)
    outcomes, failures = replay.replay("pickle", replay.inputs("pickle", tmp_path))
    assert not outcomes
    assert len(failures) == 1 and "memo: Failure: RecursionError escaped the reader" in failures[0]
