"""The worker's metrics, written in Prometheus' text exposition format (``GET /metrics``).

A few counters, gauges and histograms kept in plain Python (no client
library): updated from the event loop and the batcher's thread under one
lock, read by :meth:`Metrics.render`. Each worker process has its own; every
sample carries a ``worker`` label (the pid), so that series from different
workers never mix (sum over ``worker`` for the service).
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Callable, Sequence

#: Seconds: request latency buckets.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Sequences per encoder call.
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
#: Padded tokens per encoder call.
BATCH_TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384)


class _Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value

    def lines(self, name: str, labels: str) -> list[str]:
        out, running = [], 0
        sep = "," if labels else ""
        for bound, count in zip(self.buckets, self.counts, strict=False):
            running += count
            out.append(f'{name}_bucket{{{labels}{sep}le="{bound:g}"}} {running}')
        running += self.counts[-1]
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {running}')
        out.append(f"{name}_sum{{{labels}}} {self.total:.6f}")
        out.append(f"{name}_count{{{labels}}} {running}")
        return out


class Metrics:
    """Counters, gauges and histograms of one worker.

    Parameters
    ----------
    queue : callable
        ``queue() -> (requests, tokens)`` waiting in the batcher (read at each scrape).

    Examples
    --------
    >>> m = Metrics(lambda: (0, 0))
    >>> m.request("/embed", 200, 0.012)
    >>> 'embedding_requests_total{worker="' in m.render()
    True
    """

    def __init__(self, queue: Callable[[], tuple[int, int]]) -> None:
        self._queue = queue
        self._lock = threading.Lock()
        self._worker = f'worker="{os.getpid()}"'
        self._requests: dict[tuple[str, int], int] = {}
        self._latency: dict[str, _Histogram] = {}
        self._batch_size = _Histogram(BATCH_SIZE_BUCKETS)
        self._batch_tokens = _Histogram(BATCH_TOKEN_BUCKETS)
        self._counters = {"inputs": 0, "tokens": 0, "padded_tokens": 0, "encoder_seconds": 0.0, "cancelled": 0}

    def reset_worker(self) -> None:
        """Label samples with this process's pid (call after the fork)."""
        self._worker = f'worker="{os.getpid()}"'

    def request(self, route: str, status: int, seconds: float) -> None:
        """One answered request."""
        with self._lock:
            key = (route, status)
            self._requests[key] = self._requests.get(key, 0) + 1
            self._latency.setdefault(route, _Histogram(LATENCY_BUCKETS)).observe(seconds)

    def inputs(self, count: int, tokens: int) -> None:
        """Inputs and tokens (special tokens included) of an accepted request."""
        with self._lock:
            self._counters["inputs"] += count
            self._counters["tokens"] += tokens

    def cancelled(self) -> None:
        """A request whose client went away before its answer: its queued work was dropped."""
        with self._lock:
            self._counters["cancelled"] += 1

    def call(self, sequences: int, padded: int, real: int, seconds: float) -> None:
        """One encoder call (the batcher's ``on_call``)."""
        with self._lock:
            self._batch_size.observe(sequences)
            self._batch_tokens.observe(padded)
            self._counters["padded_tokens"] += padded
            self._counters["encoder_seconds"] += seconds

    def render(self) -> str:
        """Everything, in the text exposition format (version 0.0.4)."""
        requests, tokens = self._queue()
        w = self._worker
        with self._lock:
            lines = [
                "# HELP embedding_requests_total Requests answered, by route and status.",
                "# TYPE embedding_requests_total counter",
            ]
            for (route, status), n in sorted(self._requests.items()):
                lines.append(f'embedding_requests_total{{{w},route="{route}",status="{status}"}} {n}')
            lines += [
                "# HELP embedding_request_duration_seconds Time from the request's arrival to its answer.",
                "# TYPE embedding_request_duration_seconds histogram",
            ]
            for route, histogram in sorted(self._latency.items()):
                lines += histogram.lines("embedding_request_duration_seconds", f'{w},route="{route}"')
            lines += [
                "# HELP embedding_batch_size Sequences per encoder call.",
                "# TYPE embedding_batch_size histogram",
                *self._batch_size.lines("embedding_batch_size", w),
                "# HELP embedding_batch_tokens Padded tokens per encoder call.",
                "# TYPE embedding_batch_tokens histogram",
                *self._batch_tokens.lines("embedding_batch_tokens", w),
                "# HELP embedding_inputs_total Inputs (texts or token lists) accepted.",
                "# TYPE embedding_inputs_total counter",
                f"embedding_inputs_total{{{w}}} {self._counters['inputs']}",
                "# HELP embedding_tokens_total Tokens of the accepted inputs, special tokens included.",
                "# TYPE embedding_tokens_total counter",
                f"embedding_tokens_total{{{w}}} {self._counters['tokens']}",
                "# HELP embedding_padded_tokens_total Tokens the encoder computed, padding included.",
                "# TYPE embedding_padded_tokens_total counter",
                f"embedding_padded_tokens_total{{{w}}} {self._counters['padded_tokens']}",
                "# HELP embedding_encoder_seconds_total Time spent in encoder calls.",
                "# TYPE embedding_encoder_seconds_total counter",
                f"embedding_encoder_seconds_total{{{w}}} {self._counters['encoder_seconds']:.6f}",
                "# HELP embedding_cancelled_total Requests whose client left before the answer (work dropped).",
                "# TYPE embedding_cancelled_total counter",
                f"embedding_cancelled_total{{{w}}} {self._counters['cancelled']}",
                "# HELP embedding_queue_requests Requests waiting for or in the batcher.",
                "# TYPE embedding_queue_requests gauge",
                f"embedding_queue_requests{{{w}}} {requests}",
                "# HELP embedding_queue_tokens Tokens of the waiting requests not yet computed.",
                "# TYPE embedding_queue_tokens gauge",
                f"embedding_queue_tokens{{{w}}} {tokens}",
            ]
        return "\n".join(lines) + "\n"
