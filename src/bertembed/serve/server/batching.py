"""Grouping token sequences into encoder calls: within a request, and across concurrent requests.

Two pieces, both pure Python (no model, no ONNX Runtime), so that they can be
tested on their own:

- :func:`plan_batches` sorts sequences by length and cuts them into encoder
  calls so that little is padded: the in-process pipeline uses it for one list
  of texts, the batcher for the sequences of one step.
- :class:`Batcher` is the per-worker dynamic batcher of the HTTP service: one
  thread that takes the sequences of concurrent requests in steps of at most
  ``max_batch_tokens`` tokens, runs each step as one or a few encoder calls
  of similar lengths, and hands each request its vectors as soon as its last
  sequence is computed.

Fairness. A step's token budget is shared out among the waiting requests by
*water-filling*: requests are served smallest first, each up to an equal share
of what is left, so a request that needs less than its share is taken whole (a
one-text request always is), and the rest of the budget goes to the large
ones, the oldest of which always gets at least one sequence. Inside a step the
calls run shortest sequences first, so small requests are answered at its
start. A request waits at most for the step in progress, then gets its share:
one huge request is cut into many steps and cannot hold the others back.

The immediate path. A request that finds the batcher idle (nothing queued, no
encoder call running) and fits one encoder call may run its call on the
caller's own thread (:meth:`Batcher.run_now`) instead of being handed to the
batcher's thread and back: a lone request then pays for no thread hand-off
and no ``max_wait``. The batcher's thread waits while such a call runs, so a
worker still runs one encoder call at a time, and nothing queued is ever
overtaken (the path is refused as soon as anything waits). Nor is it taken
right after a step that served several requests: clients that take turns
(each sends its next request when its answer comes) would otherwise find
the batcher idle one at a time and each run a call of its own, where the
batcher's wait groups them; the first request after such a step goes
through the batcher, and once a step serves one request the path is open
again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Cost of one encoder call, in tokens: what a call costs beyond its padded tokens
#: (measured on all-MiniLM-L6-v2 with ONNX Runtime: about 3 ms, the time of ~10 tokens).
CALL_COST_TOKENS = 16


def plan_batches(
    lengths: Sequence[int], *, max_texts: int, max_tokens: int, call_cost: int = CALL_COST_TOKENS
) -> list[list[int]]:
    """Encoder calls for sequences of the given lengths: indices grouped, longest group first.

    The sequences are sorted by length (longest first, ties in the given
    order) and cut into contiguous groups that minimise the padded tokens
    (each group is padded to its longest sequence) plus ``call_cost`` per
    group, with at most ``max_texts`` sequences and ``max_tokens`` padded
    tokens in a group (a sequence longer than ``max_tokens`` gets a group of
    its own). A dynamic programme over the sorted lengths, O(n * max_texts).

    Parameters
    ----------
    lengths : sequence of int
        Tokens of each sequence (special tokens included).
    max_texts : int
        Most sequences in one call.
    max_tokens : int
        Most padded tokens (sequences x longest length) in one call.
    call_cost : int
        The fixed cost of a call, in tokens.

    Returns
    -------
    list of list of int
        Indices into ``lengths``; every index appears exactly once.

    Examples
    --------
    >>> plan_batches([5, 100, 6, 98], max_texts=32, max_tokens=4096)
    [[1, 3], [2, 0]]
    >>> plan_batches([10] * 5, max_texts=2, max_tokens=4096)
    [[0, 1], [2, 3], [4]]
    """
    if max_texts < 1 or max_tokens < 1:
        raise ValueError(f"max_texts and max_tokens must be >= 1, got {max_texts} and {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    sorted_lengths = [max(1, int(lengths[i])) for i in order]
    n = len(order)
    best = [0.0] + [float("inf")] * n
    start = [0] * (n + 1)
    for end in range(1, n + 1):
        for begin in range(end - 1, max(-1, end - 1 - max_texts), -1):
            count = end - begin
            padded = count * sorted_lengths[begin]  # sorted longest first: the group's longest is its first
            if count > 1 and padded > max_tokens:
                break  # a longer group only adds longer sequences
            cost = best[begin] + padded + call_cost
            if cost < best[end]:
                best[end], start[end] = cost, begin
    groups: list[list[int]] = []
    end = n
    while end > 0:
        groups.append(order[start[end] : end])
        end = start[end]
    groups.reverse()
    return groups


def padded_tokens(lengths: Sequence[int], groups: Sequence[Sequence[int]]) -> int:
    """Padded tokens of a plan: sum over groups of size x longest length.

    Examples
    --------
    >>> padded_tokens([5, 100, 6, 98], [[1, 3], [2, 0]])
    212
    """
    return sum(len(g) * max(lengths[i] for i in g) for g in groups if g)


@dataclass(eq=False)
class Job:
    """One request waiting in the batcher: its sequences and where their vectors go."""

    seqs: list[np.ndarray]
    done: Callable[[np.ndarray | None, BaseException | None], None]
    arrival: float
    #: Indices of the sequences not yet taken into a step, longest first.
    todo: list[int] = field(default_factory=list)
    results: np.ndarray | None = None
    left: int = 0
    failed: bool = False
    #: Seconds per stage of the encoder calls this job was part of (whole calls, shared with other jobs).
    stages: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.todo = sorted(range(len(self.seqs)), key=lambda i: -len(self.seqs[i]))
        self.left = len(self.seqs)

    @property
    def todo_tokens(self) -> int:
        return sum(len(self.seqs[i]) for i in self.todo)


def fair_share(jobs: Sequence[Job], budget: int) -> list[tuple[Job, list[int]]]:
    """The sequences one step takes from each waiting job (water-filling, smallest job first).

    Jobs are served in order of the tokens they still need (ties: oldest
    first), each up to an equal share of the budget left; a job that needs
    less is taken whole, so its unused share goes to the larger ones. The
    oldest job always gets at least one sequence, so every job progresses.
    Within a job, its longest sequences are taken first.

    Examples
    --------
    >>> import numpy as np
    >>> big = Job([np.zeros(100)] * 8, lambda r, e: None, arrival=0.0)
    >>> small = Job([np.zeros(10)], lambda r, e: None, arrival=1.0)
    >>> [(j is small, len(taken)) for j, taken in fair_share([big, small], budget=410)]
    [(True, 1), (False, 4)]
    """
    waiting = [j for j in jobs if j.todo]
    if not waiting:
        return []
    oldest = min(waiting, key=lambda j: j.arrival)
    order = sorted(waiting, key=lambda j: (j.todo_tokens, j.arrival))
    left = budget
    taken: list[tuple[Job, list[int]]] = []
    for rank, job in enumerate(order):
        share = left // (len(order) - rank)
        chosen: list[int] = []
        used = 0
        for index in job.todo:
            size = len(job.seqs[index])
            if used + size > share and (chosen or job is not oldest):
                break
            chosen.append(index)
            used += size
        if chosen:
            taken.append((job, chosen))
            left -= used
    return taken


class Batcher:
    """A worker's dynamic batcher: one thread runs the encoder on the sequences of concurrent requests.

    Parameters
    ----------
    encode : callable
        ``encode(seqs) -> (vectors, stages)``: one encoder call on sequences
        of similar length (it pads them), float32 ``(len(seqs), D)`` vectors
        and the seconds of each of its stages.
    max_batch_tokens : int
        Most tokens in one step, and most padded tokens in one encoder call
        (this bounds the encoder's working memory).
    max_texts : int
        Most sequences in one encoder call.
    max_wait : float
        Seconds the batcher may wait, once free, for more requests while what
        waits is less than a step's budget (counted from the oldest waiting
        request's arrival); 0 starts at once.
    on_call : callable, optional
        ``on_call(sequences, padded_tokens, real_tokens, seconds)`` after each
        encoder call (metrics).

    Examples
    --------
    >>> import numpy as np
    >>> batcher = Batcher(lambda seqs: (np.ones((len(seqs), 2), np.float32), {}), max_batch_tokens=64, max_texts=8)
    >>> batcher.start()
    >>> got = []
    >>> job = batcher.submit([np.arange(3), np.arange(5)], lambda result, error: got.append(result.shape))
    >>> batcher.stop()
    >>> got
    [(2, 2)]
    """

    def __init__(
        self,
        encode: Callable[[list[np.ndarray]], tuple[np.ndarray, dict[str, float]]],
        *,
        max_batch_tokens: int,
        max_texts: int,
        max_wait: float = 0.0,
        on_call: Callable[[int, int, int, float], Any] | None = None,
    ) -> None:
        if max_batch_tokens < 1 or max_texts < 1 or max_wait < 0:
            raise ValueError("max_batch_tokens and max_texts must be >= 1 and max_wait >= 0")
        self._encode = encode
        self.max_batch_tokens = max_batch_tokens
        self.max_texts = max_texts
        self.max_wait = max_wait
        self._on_call = on_call
        self._jobs: list[Job] = []
        self._cond = threading.Condition()
        self._stopping = False
        #: An encoder call is running: a step on the batcher's thread, or an immediate call (run_now).
        self._busy = False
        #: Requests the last step (or immediate call) served: run_now runs only after one that served one.
        self._last_served = 1
        self._thread: threading.Thread | None = None

    @property
    def step_tokens(self) -> int:
        """Tokens one step takes at most (``max_batch_tokens``)."""
        return self.max_batch_tokens

    def queue(self) -> tuple[int, int]:
        """Requests waiting or in progress, and the tokens they still need computed."""
        with self._cond:
            return len(self._jobs), sum(j.todo_tokens for j in self._jobs)

    def submit(self, seqs: list[np.ndarray], done: Callable[[np.ndarray | None, BaseException | None], None]) -> Job:
        """Queue one request's sequences; ``done(vectors, None)`` or ``done(None, error)`` is called once,
        from the batcher's thread, with the vectors in the order of ``seqs``. Returns the queued job."""
        if not seqs:
            raise ValueError("a request needs at least one sequence")
        job = Job(list(seqs), done, arrival=time.monotonic())
        with self._cond:
            if self._stopping:
                raise RuntimeError("the batcher is stopped")
            self._jobs.append(job)
            self._cond.notify()
        return job

    def fits_one_call(self, seqs: Sequence[np.ndarray]) -> bool:
        """Whether the sequences make one encoder call (at most ``max_texts``, at most
        ``max_batch_tokens`` padded tokens): what :meth:`run_now` takes."""
        return 0 < len(seqs) <= self.max_texts and len(seqs) * max(len(s) for s in seqs) <= self.max_batch_tokens

    def run_now(self, seqs: Sequence[np.ndarray]) -> tuple[np.ndarray, dict[str, float]] | None:
        """Run the sequences' encoder calls on the calling thread when the batcher is idle: ``(vectors, stages)``.

        The calls are those the batcher makes of a request alone in a step
        (:func:`plan_batches`, shortest first), so a request's vectors are
        the same bits through either path.

        Returns None, having run nothing, when anything is queued or an
        encoder call is running, when the last step served several requests
        (concurrent clients: the batcher groups them), when the batcher is
        stopped, or when the sequences do not fit one call
        (:meth:`fits_one_call`): the caller then submits them. The batcher's thread starts no step while the call
        runs. An encoder error is raised to the caller.
        """
        if not self.fits_one_call(seqs):
            return None
        with self._cond:
            if self._jobs or self._busy or self._stopping or self._last_served > 1:
                return None
            self._busy = True
            self._last_served = 1
        try:
            # The calls the batcher would make of this request alone (plan_batches, shortest first), so that
            # its vectors are the same bits whichever path it takes.
            lengths = [len(s) for s in seqs]
            calls = plan_batches(lengths, max_texts=self.max_texts, max_tokens=self.max_batch_tokens)
            vectors: np.ndarray | None = None
            stages: dict[str, float] = {}
            for call in reversed(calls):
                began = time.perf_counter()
                got, took = self._encode([seqs[k] for k in call])
                if self._on_call is not None:
                    padded = len(call) * max(lengths[k] for k in call)
                    self._on_call(len(call), padded, sum(lengths[k] for k in call), time.perf_counter() - began)
                if vectors is None:
                    vectors = np.empty((len(seqs), got.shape[1]), dtype=got.dtype)
                vectors[call] = got
                for name, seconds in took.items():
                    stages[name] = stages.get(name, 0.0) + seconds
            assert vectors is not None
            return vectors, stages
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify()

    def cancel(self, job: Job) -> bool:
        """Drop what is left of a queued job (its client went away, or its deadline passed).

        Sequences already in an encoder call finish with it; none of the
        job's other sequences is computed, and ``done`` is not called.
        Returns whether the job was still waiting.
        """
        with self._cond:
            waiting = job in self._jobs
            job.failed = True
            job.todo = []
            if waiting:
                self._jobs.remove(job)
            return waiting

    def start(self) -> None:
        """Start the batcher's thread (in the worker, after any fork)."""
        self._thread = threading.Thread(target=self._run, name="batcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish what is queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _next_step(self) -> list[tuple[Job, list[int]]] | None:
        with self._cond:
            while (not self._jobs or self._busy) and not self._stopping:
                self._cond.wait()
            while self._busy:  # stopping: let the immediate call finish first
                self._cond.wait()
            if not self._jobs:
                return None
            if self.max_wait > 0 and not self._stopping:
                deadline = min(j.arrival for j in self._jobs) + self.max_wait
                while sum(j.todo_tokens for j in self._jobs) < self.step_tokens:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self._stopping:
                        break
                    self._cond.wait(remaining)
            step = fair_share(self._jobs, self.step_tokens)
            self._last_served = len(step)
            for job, chosen in step:
                taken = set(chosen)
                job.todo = [i for i in job.todo if i not in taken]
            self._busy = True
            return step

    def _run(self) -> None:
        while (step := self._next_step()) is not None:
            try:
                seqs = [job.seqs[i] for job, chosen in step for i in chosen]
                owners = [(job, i) for job, chosen in step for i in chosen]
                lengths = [len(s) for s in seqs]
                calls = plan_batches(lengths, max_texts=self.max_texts, max_tokens=self.max_batch_tokens)
                for call in reversed(calls):  # shortest sequences first: small requests finish early in the step
                    self._run_call(call, seqs, owners, lengths)
            finally:
                with self._cond:
                    self._busy = False

    def _run_call(
        self, call: list[int], seqs: list[np.ndarray], owners: list[tuple[Job, int]], lengths: list[int]
    ) -> None:
        call = [k for k in call if not owners[k][0].failed]
        if not call:
            return
        began = time.perf_counter()
        try:
            vectors, stages = self._encode([seqs[k] for k in call])
        except BaseException as exc:  # handed to every request of the call
            self._fail({id(owners[k][0]): owners[k][0] for k in call}.values(), exc)
            return
        if self._on_call is not None:
            padded = len(call) * max(lengths[k] for k in call)
            self._on_call(len(call), padded, sum(lengths[k] for k in call), time.perf_counter() - began)
        finished = []
        for job in {id(owners[k][0]): owners[k][0] for k in call}.values():
            for name, seconds in stages.items():
                job.stages[name] = job.stages.get(name, 0.0) + seconds
        for row, k in enumerate(call):
            job, index = owners[k]
            if job.results is None:
                job.results = np.empty((len(job.seqs), vectors.shape[1]), dtype=vectors.dtype)
            job.results[index] = vectors[row]
            job.left -= 1
            if job.left == 0 and not job.failed:
                finished.append(job)
        if finished:
            with self._cond:
                # A job cancelled during this call is gone from the queue and gets no answer.
                finished = [job for job in finished if not job.failed]
                for job in finished:
                    self._jobs.remove(job)
            for job in finished:
                job.done(job.results, None)

    def _fail(self, jobs: Any, exc: BaseException) -> None:
        jobs = [j for j in jobs if not j.failed]
        with self._cond:
            for job in jobs:
                job.failed = True
                job.todo = []
                if job in self._jobs:
                    self._jobs.remove(job)
        for job in jobs:
            job.done(None, exc)
