"""Load test for the embedding service: concurrent clients, latency percentiles, requests per second.

Usage::

    python loadtest.py http://127.0.0.1:8000 [--clients 16] [--requests 400]
                       [--texts 4] [--words 12] [--new-connections] [--json FILE]

Each of ``--clients`` asyncio tasks sends ``POST /embed`` requests one after
the other until ``--requests`` have been sent in total. A request carries
``--texts`` English-like sentences of about ``--words`` words (between half
and one and a half times that; fixed by ``--seed``). A request counts as
successful when the answer is 200 with one vector per text. By default each
client keeps one connection open (keep-alive); ``--new-connections`` opens a
connection per request (``Connection: close``), so that a request can only
be lost by the worker that accepted it.

Printed: requests, failures, p50/p99/mean latency in milliseconds, requests
per second (successful requests over the wall time of the whole run), and the
mean time per stage that the service reports in its ``Server-Timing`` header.
Needs httpx.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

#: Words the sentences are drawn from.
WORDS = (
    "the of and to in is was for on that with as by at from his her an which are have this be or "
    "model service request vector sentence embedding search query answer document river mountain "
    "city music history science language table window garden winter summer coffee morning train "
    "station market letter friend doctor school street engine storm bridge forest ocean island "
    "quickly slowly bright quiet ancient modern simple complex small large early late red green "
    "runs reads writes builds finds opens carries follows measures returns remembers discovers"
).split()


def make_texts(rng: random.Random, count: int, words: int) -> list[str]:
    """``count`` sentences of ``words // 2`` to ``3 * words // 2`` words.

    Examples
    --------
    >>> make_texts(random.Random(0), 2, 4)  # doctest: +SKIP
    ['Station garden bright runs.', 'Of engine.']
    """
    texts = []
    for _ in range(count):
        n = rng.randint(max(1, words // 2), max(1, 3 * words // 2))
        sentence = " ".join(rng.choice(WORDS) for _ in range(n))
        texts.append(sentence[:1].upper() + sentence[1:] + ".")
    return texts


@dataclass
class Outcome:
    """One request: when it started and ended (monotonic seconds), and how it went."""

    start: float
    end: float
    ok: bool
    error: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def latency(self) -> float:
        return self.end - self.start


@dataclass
class Report:
    """Everything one run measured."""

    outcomes: list[Outcome]
    wall: float
    clients: int
    texts: int

    @property
    def ok(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.ok]

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def summary(self) -> dict[str, Any]:
        """Counts, latency percentiles (ms), requests/s and mean stage times (ms)."""
        latencies = sorted(o.latency * 1e3 for o in self.ok)
        cuts = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99
        stages: dict[str, list[float]] = {}
        for o in self.ok:
            for name, ms in o.timings.items():
                stages.setdefault(name, []).append(ms)
        return {
            "requests": len(self.outcomes),
            "failed": len(self.failed),
            "clients": self.clients,
            "texts_per_request": self.texts,
            "p50_ms": cuts[49] if cuts else float("nan"),
            "p99_ms": cuts[98] if cuts else float("nan"),
            "mean_ms": statistics.fmean(latencies) if latencies else float("nan"),
            "rps": len(latencies) / self.wall if self.wall > 0 else float("nan"),
            "server_ms": {name: statistics.fmean(v) for name, v in stages.items()},
            "errors": sorted({o.error for o in self.failed}),
        }


def _server_timing(header: str) -> dict[str, float]:
    """``{"embed": 0.12, ...}`` (ms) from ``embed;dur=0.120, encoder;dur=3.1``."""
    timings = {}
    for part in header.split(","):
        name, _, rest = part.strip().partition(";dur=")
        if rest:
            timings[name] = float(rest)
    return timings


async def run_load(
    url: str,
    *,
    clients: int = 16,
    requests: int = 400,
    texts: int = 4,
    words: int = 12,
    new_connections: bool = False,
    seed: int = 0,
    timeout: float = 60.0,
    on_progress: Callable[[int], Awaitable[None]] | None = None,
) -> Report:
    """Send ``requests`` requests to ``url/embed`` from ``clients`` concurrent clients.

    Parameters
    ----------
    on_progress : async callable, optional
        Awaited with the number of finished requests after each one (the
        tests use it to kill a worker in the middle of the load).

    Returns
    -------
    Report

    Examples
    --------
    >>> report = asyncio.run(run_load("http://127.0.0.1:8000", requests=100))  # doctest: +SKIP
    >>> report.summary()["failed"]  # doctest: +SKIP
    0
    """
    rng = random.Random(seed)
    bodies = [make_texts(rng, texts, words) for _ in range(requests)]
    queue = iter(range(requests))
    outcomes: list[Outcome] = []
    headers = {"Connection": "close"} if new_connections else {}

    async def client() -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=0 if new_connections else 1)
        async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as http:
            for index in queue:
                start = time.monotonic()
                try:
                    answer = await http.post("/embed", json={"texts": bodies[index]}, headers=headers)
                except httpx.HTTPError as exc:
                    outcomes.append(Outcome(start, time.monotonic(), False, f"{type(exc).__name__}: {exc}"))
                else:
                    end = time.monotonic()
                    ok = answer.status_code == 200 and len(answer.json()["embeddings"]) == len(bodies[index])
                    error = "" if ok else f"HTTP {answer.status_code}: {answer.text[:200]}"
                    timings = _server_timing(answer.headers.get("server-timing", ""))
                    outcomes.append(Outcome(start, end, ok, error, timings))
                if on_progress is not None:
                    await on_progress(len(outcomes))

    began = time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    return Report(outcomes, time.monotonic() - began, clients, texts)


def format_summary(summary: dict[str, Any]) -> str:
    """One human-readable paragraph."""
    stages = ", ".join(f"{name} {ms:.2f}" for name, ms in summary["server_ms"].items())
    lines = [
        f"{summary['requests']} requests ({summary['texts_per_request']} texts each) from "
        f"{summary['clients']} clients: {summary['failed']} failed",
        f"latency p50 {summary['p50_ms']:.1f} ms, p99 {summary['p99_ms']:.1f} ms, "
        f"mean {summary['mean_ms']:.1f} ms; {summary['rps']:.1f} requests/s",
        f"server time per request (ms): {stages}",
    ]
    lines += [f"error: {e}" for e in summary["errors"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; exit status 1 when a request failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("url", help="the service, e.g. http://127.0.0.1:8000")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--texts", type=int, default=4, help="texts per request")
    parser.add_argument("--words", type=int, default=12, help="mean words per text")
    parser.add_argument("--new-connections", action="store_true", help="one connection per request")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the summary to this file")
    args = parser.parse_args(argv)
    report = asyncio.run(
        run_load(
            args.url.rstrip("/"),
            clients=args.clients,
            requests=args.requests,
            texts=args.texts,
            words=args.words,
            new_connections=args.new_connections,
            seed=args.seed,
        )
    )
    summary = report.summary()
    print(format_summary(summary))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=2)
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
