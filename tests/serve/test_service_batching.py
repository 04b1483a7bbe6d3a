"""The server's pure parts, without a model or a server: batch planning, the batcher, metrics.

``bertembed.serve.server.batching`` and ``metrics`` need only NumPy. The planner is checked against
an exhaustive search, the batcher with a fake encoder that records its calls (no timing). The
protocols are in ``test_service_protocols.py``.
"""

from __future__ import annotations

import itertools
import re
import threading

import numpy as np
import pytest

from bertembed.serve.server import batching, metrics


def _cost(lengths: list[int], groups: list[list[int]], call_cost: int) -> int:
    return sum(len(g) * max(lengths[i] for i in g) + call_cost for g in groups)


def _best_contiguous(lengths: list[int], max_texts: int, max_tokens: int, call_cost: int) -> int:
    """The least cost over every cut of the sorted lengths into contiguous groups (brute force)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    best = None
    for cuts in itertools.product([False, True], repeat=len(order) - 1):
        groups, current = [], [order[0]]
        for cut, index in zip(cuts, order[1:], strict=True):
            if cut:
                groups.append(current)
                current = []
            current.append(index)
        groups.append(current)
        ok = all(
            len(g) <= max_texts and (len(g) == 1 or len(g) * max(lengths[i] for i in g) <= max_tokens) for g in groups
        )
        if ok:
            cost = _cost(lengths, groups, call_cost)
            best = cost if best is None else min(best, cost)
    assert best is not None
    return best


@pytest.mark.parametrize("seed", range(12))
def test_plan_batches_is_optimal_and_complete(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.integers(1, 300, size=int(rng.integers(1, 10)))]
    max_texts, max_tokens, call_cost = int(rng.integers(1, 5)), int(rng.integers(256, 900)), 16
    groups = batching.plan_batches(lengths, max_texts=max_texts, max_tokens=max_tokens, call_cost=call_cost)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        assert 1 <= len(group) <= max_texts
        assert len(group) == 1 or len(group) * max(lengths[i] for i in group) <= max_tokens
    assert _cost(lengths, groups, call_cost) == _best_contiguous(lengths, max_texts, max_tokens, call_cost)


def test_plan_batches_pads_less_than_batches_in_the_given_order() -> None:
    rng = np.random.default_rng(0)
    lengths = [int(x) for x in np.minimum(rng.lognormal(3.2, 1.0, size=200).astype(int) + 3, 256)]
    given = [list(range(k, min(k + 32, 200))) for k in range(0, 200, 32)]
    planned = batching.plan_batches(lengths, max_texts=32, max_tokens=4096)
    real = sum(lengths)
    assert real <= batching.padded_tokens(lengths, planned) < batching.padded_tokens(lengths, given)
    # Sorted into batches of 32 (sentence-transformers' way) pads at least as much as the plan.
    order = sorted(range(200), key=lambda i: -lengths[i])
    sorted32 = [order[k : k + 32] for k in range(0, 200, 32)]
    assert batching.padded_tokens(lengths, planned) <= batching.padded_tokens(lengths, sorted32)


def test_plan_batches_refuses_empty_limits() -> None:
    with pytest.raises(ValueError, match=r"max_texts and max_tokens must be >= 1, got 0 and 10"):
        batching.plan_batches([3], max_texts=0, max_tokens=10)


def _job(lengths: list[int], arrival: float) -> object:
    return batching.Job([np.zeros(n, np.int64) for n in lengths], lambda r, e: None, arrival=arrival)


def test_fair_share_takes_small_jobs_whole_and_shares_the_rest() -> None:
    big = _job([200] * 20, arrival=0.0)
    other = _job([150] * 20, arrival=1.0)
    small = _job([12], arrival=2.0)
    taken = dict((id(j), chosen) for j, chosen in batching.fair_share([big, other, small], budget=1000))
    assert taken[id(small)] == [0]
    # What is left (988) is shared equally by the two big jobs: 494 each, whole sequences only.
    assert len(taken[id(big)]) == 494 // 200 and len(taken[id(other)]) == 494 // 150
    total = sum(len(j.seqs[i]) for j in (big, other, small) for i in taken[id(j)])
    assert total <= 1000


def test_fair_share_always_moves_the_oldest_job() -> None:
    huge = _job([300, 300], arrival=0.0)  # each sequence over the budget
    newer = [_job([5], arrival=float(k + 1)) for k in range(3)]
    taken = batching.fair_share([huge, *newer], budget=100)
    assert any(job is huge and chosen == [0] for job, chosen in taken)
    assert {id(j) for j, _ in taken} >= {id(j) for j in newer}


def _fake_encoder(calls: list[list[int]]):
    """An encoder whose vector for a sequence is (its length, its first id): checks the order of results."""

    def encode(seqs: list[np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        calls.append([len(s) for s in seqs])
        return np.array([[len(s), s[0]] for s in seqs], dtype=np.float32), {"encoder": 0.0}

    return encode


def _submit(batcher: object, lengths: list[int], tag: int, results: dict, order: list) -> None:
    seqs = [np.full(n, tag * 1000 + k, np.int64) for k, n in enumerate(lengths)]
    done = threading.Event()

    def finished(vectors: np.ndarray | None, error: BaseException | None) -> None:
        results[tag] = (vectors, error)
        order.append(tag)
        done.set()

    batcher.submit(seqs, finished)
    results.setdefault("events", []).append(done)


def test_batcher_answers_each_request_in_its_order() -> None:
    calls: list[list[int]] = []
    batcher = batching.Batcher(_fake_encoder(calls), max_batch_tokens=256, max_texts=4)
    results: dict = {}
    order: list = []
    requests = {tag: [int(n) for n in np.random.default_rng(tag).integers(1, 100, size=7)] for tag in range(6)}
    for tag, lengths in requests.items():  # queued before the thread starts: one pool to batch
        _submit(batcher, lengths, tag, results, order)
    batcher.start()
    for event in results["events"]:
        assert event.wait(30)
    batcher.stop()
    for tag, lengths in requests.items():
        vectors, error = results[tag]
        assert error is None
        np.testing.assert_array_equal(vectors[:, 0], lengths)
        np.testing.assert_array_equal(vectors[:, 1], [tag * 1000 + k for k in range(len(lengths))])
    assert all(len(call) <= 4 and (len(call) == 1 or len(call) * max(call) <= 256) for call in calls)
    # Requests were grouped: fewer calls than the one-request-at-a-time plans would make.
    alone = sum(len(batching.plan_batches(lens, max_texts=4, max_tokens=256)) for lens in requests.values())
    assert len(calls) < alone


def test_batcher_does_not_let_a_huge_request_starve_a_small_one() -> None:
    """A one-text request queued after a huge one is answered while the huge one is still in progress."""
    calls: list[list[int]] = []
    release = threading.Event()
    encode = _fake_encoder(calls)

    def slow_first(seqs: list[np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        release.wait(30)  # hold the first step until both requests are queued
        return encode(seqs)

    batcher = batching.Batcher(slow_first, max_batch_tokens=512, max_texts=8)
    results: dict = {}
    order: list = []
    batcher.start()
    _submit(batcher, [200] * 40, 0, results, order)  # 8,000 tokens: about 16 steps
    _submit(batcher, [10], 1, results, order)
    release.set()
    for event in results["events"]:
        assert event.wait(30)
    batcher.stop()
    assert order == [1, 0]
    small_call = next(k for k, call in enumerate(calls) if 10 in call)
    assert small_call <= 2  # in the first step after the one in progress


def test_batcher_hands_an_encoder_error_to_the_requests_of_that_call() -> None:
    def encode(seqs: list[np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        if any(len(s) == 13 for s in seqs):
            raise RuntimeError("encoder failed")
        return np.zeros((len(seqs), 2), np.float32), {}

    batcher = batching.Batcher(encode, max_batch_tokens=64, max_texts=1)
    results: dict = {}
    order: list = []
    _submit(batcher, [13, 5], 0, results, order)
    _submit(batcher, [7], 1, results, order)
    batcher.start()
    for event in results["events"]:
        assert event.wait(30)
    batcher.stop()
    assert results[0][0] is None and str(results[0][1]) == "encoder failed"
    assert results[1][1] is None and results[1][0].shape == (1, 2)
    assert order.count(0) == 1  # answered once, although its other sequence was in another call


def test_batcher_waits_a_bounded_time_for_more_requests() -> None:
    calls: list[list[int]] = []
    batcher = batching.Batcher(_fake_encoder(calls), max_batch_tokens=1024, max_texts=8, max_wait=60.0)
    results: dict = {}
    order: list = []
    batcher.start()
    _submit(batcher, [600], 0, results, order)
    _submit(batcher, [500], 1, results, order)  # together over the budget: no waiting for the deadline
    for event in results["events"]:
        assert event.wait(30)
    batcher.stop()
    assert sorted(order) == [0, 1]


# --- metrics and hints ------------------------------------------------------------------


def test_metrics_text_format() -> None:
    m = metrics.Metrics(lambda: (2, 300))
    m.request("/embed", 200, 0.02)
    m.request("/embed", 200, 3.0)
    m.request("/embed", 422, 0.001)
    m.call(8, 512, 400, 0.1)
    text = m.render()
    assert re.search(r'^embedding_requests_total\{worker="\d+",route="/embed",status="200"\} 2$', text, re.M)
    assert re.search(
        r'^embedding_request_duration_seconds_bucket\{worker="\d+",route="/embed",le="0.025"\} 2$', text, re.M
    )
    assert re.search(r'^embedding_request_duration_seconds_count\{worker="\d+",route="/embed"\} 3$', text, re.M)
    assert re.search(r'^embedding_batch_size_bucket\{worker="\d+",le="8"\} 1$', text, re.M)
    assert re.search(r'^embedding_queue_tokens\{worker="\d+"\} 300$', text, re.M)
    for line in text.splitlines():
        assert line.startswith("# ") or re.match(r"^[a-z_]+\{[^}]*\} [0-9.e+-]+$", line), line


def test_a_hub_id_gets_the_download_command() -> None:
    from bertembed.serve.artifact import model_config as st_config

    with pytest.raises(
        st_config.UnsupportedModel,
        match=r"^org/no-such-model: no such directory; .*: hf download org/no-such-model --local-dir ./no-such-model$",
    ):
        st_config.read_sentence_config("org/no-such-model")


def test_the_settings_table_in_the_docs_is_the_declared_one() -> None:
    """docs/serve.md shows exactly the table bertembed.serve.settings prints (one declaration)."""
    from helpers.paths import ROOT

    from bertembed.serve import settings

    page = ROOT / "docs" / "serve.md"
    if not page.is_file():
        pytest.skip("docs/ is not in this checkout")
    text = page.read_text(encoding="utf-8")
    shown = text.split("<!-- settings-table -->\n", 1)[1].split("\n<!-- /settings-table -->", 1)[0]
    assert shown == settings.table()


def test_settings_parse_and_refuse() -> None:
    from bertembed.serve import settings

    values = settings.read({"SERVICE_MAX_BATCH": "32", "SERVICE_MAX_WAIT_MS": "0", "SERVICE_ACCESS_LOG": "off"})
    assert (values["max_batch"], values["max_wait_ms"], values["access_log"]) == (32, 0.0, False)
    assert values["max_body_bytes"] == settings.BY_NAME["max_body_bytes"].default
    with pytest.raises(ValueError, match=r"^SERVICE_MAX_BATCH='0': must be positive$"):
        settings.read({"SERVICE_MAX_BATCH": "0"})
    with pytest.raises(ValueError, match=r"^SERVICE_BODY_TIMEOUT_S='soon': expected float$"):
        settings.read({"SERVICE_BODY_TIMEOUT_S": "soon"})
    assert settings.environment({"max_batch": 8, "metrics_open": True, "threads": None}) == {
        "SERVICE_MAX_BATCH": "8",
        "SERVICE_METRICS_OPEN": "1",
    }
    assert 8 <= settings.default_max_connections() <= 1024
