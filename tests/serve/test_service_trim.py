"""The service serving a trimmed embedding layer: what /info says, the unknown rule on every route, exactness.

The session's export of all-MiniLM-L6-v2 (``out_dir``) is linked into new export directories whose
layer is trimmed: by ``layer.save_layer`` (what ``bertembed export --trim-corpus`` runs) to the
tokens of a small corpus, unknown rule "error"; and by ``bertembed trim ... --unknown unk`` then
``--layer`` (a layer trimmed beforehand). Each is run with ``bertembed serve`` (2 workers) and compared with
the session's untrimmed service (``server``): a text whose tokens are all kept must get exactly the
untrimmed service's answer to the same request; a trimmed-away token gets a 422 naming it (rule
"error") or the unknown token's row (rule "unk": exactly the untrimmed answer for the same ids with
that token replaced by the unknown token).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from service_helpers import MODEL_NAME, Server, serve, skip_without_service_packages

pytestmark = [pytest.mark.heavy]
skip_without_service_packages()
import httpx  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from bertembed import _cli  # noqa: E402
from bertembed.serve.artifact import layer as saved_layer  # noqa: E402
from bertembed.serve.artifact.manifest import EMBEDDINGS_DIR, write_service_config  # noqa: E402

#: The texts the trimmed layers keep the rows of (one per line of the corpus file).
CORPUS = [
    "Hello world",
    "How do I reset my password?",
    "The weather is nice today.",
    "A short sentence about rivers and bridges.",
]
#: Texts whose every token is in CORPUS (in another order and mix).
COVERED = ["Hello world", "the weather about rivers", "How do I reset the bridges?", "", "A nice sentence."]
#: ``bertembed trim``'s options for the lenient layer.
LENIENT = ("--unknown", "unk", "--quiet")
#: The options of a trim on an export's command line.
TRIM_OPTIONS = ("--trim-corpus", "--trim-ids", "--trim-scripts", "--trim-min-count", "--unknown", "--layer")
#: A text with one word that CORPUS never has.
UNCOVERED = "Hello zebra world"


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Tokenizer:
    """The model's tokenizer, without the padding and truncation its file asks for."""
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


@pytest.fixture(scope="module")
def corpus_ids(tokenizer: Tokenizer) -> set[int]:
    return {i for e in tokenizer.encode_batch(CORPUS) for i in e.ids}


@pytest.fixture(scope="module")
def absent(tokenizer: Tokenizer, corpus_ids: set[int]) -> tuple[str, int]:
    """The token of UNCOVERED that CORPUS never has, and its id (from the tokenizer, not the service)."""
    ids = tokenizer.encode(UNCOVERED, add_special_tokens=False).ids
    missing = [i for i in ids if i not in corpus_ids]
    assert len(missing) == 1, missing
    return tokenizer.id_to_token(missing[0]), missing[0]


def _special_ids(model_dir: Path) -> set[int]:
    spec = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    return {t["id"] for t in spec["added_tokens"] if t["special"]}


def _linked_export(out_dir: Path, target: Path, source: Path, **options: object) -> Path:
    """The session's artifact, linked, with its layer saved again from `source` as `options` say."""
    target.mkdir()
    for name in ("encoder.onnx", "tokenizer"):
        (target / name).symlink_to(out_dir / name)
    service = json.loads((out_dir / "service.json").read_text(encoding="utf-8"))
    saved_layer.save_layer(target, service, source, **options)  # type: ignore[arg-type]
    write_service_config(target, service)
    return target


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trim-corpus") / "corpus.txt"
    path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def strict_dir(out_dir: Path, corpus_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export whose layer keeps the corpus's rows; unknown rule "error"."""
    trim = saved_layer.Trim(corpus=(str(corpus_file),))
    return _linked_export(
        out_dir, tmp_path_factory.mktemp("trim-strict") / "export", out_dir / EMBEDDINGS_DIR, trim=trim
    )


@pytest.fixture(scope="module")
def lenient_dir(out_dir: Path, corpus_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export mapping the layer ``bertembed trim --unknown unk`` saved (``--layer``)."""
    root = tmp_path_factory.mktemp("trim-lenient")
    trimmed = root / "trimmed"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bertembed",
            "trim",
            str(out_dir / EMBEDDINGS_DIR),
            str(trimmed),
            "--tokenizer",
            str(out_dir / "tokenizer" / "tokenizer.json"),
            "--corpus",
            str(corpus_file),
            *LENIENT,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return _linked_export(out_dir, root / "export", trimmed)


@pytest.fixture(scope="module")
def strict(strict_dir: Path) -> Iterator[Server]:
    yield from serve(strict_dir, "server-trim-strict.log")


@pytest.fixture(scope="module")
def lenient(lenient_dir: Path) -> Iterator[Server]:
    yield from serve(lenient_dir, "server-trim-lenient.log")


def _post(server: Server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def _vectors(answer: httpx.Response) -> np.ndarray:
    """float32 vectors of any route's 200 answer."""
    assert answer.status_code == 200, answer.text
    data = answer.json()
    if isinstance(data, dict) and "embeddings" in data:
        data = data["embeddings"]
    elif isinstance(data, dict):
        data = [row["embedding"] for row in data["data"]]
    return np.asarray(data, dtype=np.float32)


def test_info_says_the_layer_is_trimmed(
    server: Server, strict: Server, lenient: Server, model_dir: Path, corpus_ids: set[int], tokenizer: Tokenizer
) -> None:
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    kept = len(corpus_ids | _special_ids(model_dir))
    untrimmed = httpx.get(f"{server.url}/info", timeout=30).json()["embedding_layer"]
    assert untrimmed == {
        "table_dtype": "float32",
        "trimmed": False,
        "vocab_size": vocab,
        "kept_rows": vocab,
        "unknown": "error",
    }
    info = httpx.get(f"{strict.url}/info", timeout=30).json()
    assert info["model_id"] == MODEL_NAME
    assert info["embedding_layer"] == {
        "table_dtype": "float32",
        "trimmed": True,
        "vocab_size": vocab,
        "kept_rows": kept,
        "unknown": "error",
    }
    unk_id = tokenizer.token_to_id("[UNK]")
    assert httpx.get(f"{lenient.url}/info", timeout=30).json()["embedding_layer"] == {
        "table_dtype": "float32",
        "trimmed": True,
        "vocab_size": vocab,
        "kept_rows": kept,
        "unknown": unk_id,
        "unknown_token": "[UNK]",
    }
    assert httpx.get(f"{strict.url}/healthz", timeout=30).json()["trimmed"] is True
    assert httpx.get(f"{server.url}/healthz", timeout=30).json()["trimmed"] is False
    service = json.loads((strict.out_dir / "service.json").read_text())
    assert service["embeddings"]["kept_rows"] == kept and service["embeddings"]["trimmed"] is True


#: (route, body of COVERED) for every protocol.
ROUTES = {
    "own": ("/embed", lambda texts: {"texts": texts}),
    "TEI /embed": ("/embed", lambda texts: {"inputs": texts}),
    "TEI /": ("/", lambda texts: {"inputs": texts, "normalize": False}),
    "OpenAI": ("/v1/embeddings", lambda texts: {"input": texts, "model": MODEL_NAME, "encoding_format": "float"}),
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_covered_texts_equal_the_untrimmed_service(server: Server, strict: Server, lenient: Server, route: str) -> None:
    path, body = ROUTES[route]
    expected = _vectors(_post(server, path, body(COVERED)))
    np.testing.assert_array_equal(_vectors(_post(strict, path, body(COVERED))), expected)
    np.testing.assert_array_equal(_vectors(_post(lenient, path, body(COVERED))), expected)


#: The trimmed-away token in each protocol's request, and the field the error names.
REFUSED = {
    "own": ("/embed", lambda texts: {"texts": texts}, "texts"),
    "TEI /embed": ("/embed", lambda texts: {"inputs": texts}, "inputs"),
    "TEI /": ("/", lambda texts: {"inputs": texts}, "inputs"),
    "OpenAI": ("/v1/embeddings", lambda texts: {"input": texts, "model": MODEL_NAME}, "input"),
}


def _refusal(answer: httpx.Response, route: str, field: str) -> str:
    """The message of a 422 for a trimmed-away token, its protocol's error shape checked."""
    assert answer.status_code == 422, answer.text
    if route == "OpenAI":
        error = answer.json()["error"]
        assert error.keys() == {"message", "type", "param", "code"}
        assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", field, "token_not_kept")
        return str(error["message"])
    assert answer.json().keys() == {"error", "error_type"}  # TEI's shape
    assert answer.json()["error_type"] == "Validation"
    return str(answer.json()["error"])


@pytest.mark.parametrize("route", list(REFUSED))
def test_a_trimmed_away_token_gets_a_422_naming_it(strict: Server, absent: tuple[str, int], route: str) -> None:
    path, body, field = REFUSED[route]
    token, token_id = absent
    message = _refusal(_post(strict, path, body(["Hello world", UNCOVERED])), route, field)
    assert message.startswith(f"{field}[1] has the token {token!r} (id {token_id}, position "), message
    assert "does not keep" in message


@pytest.mark.parametrize("route", ["TEI /embed", "TEI /", "OpenAI"])
def test_a_trimmed_away_token_id_gets_a_422_naming_it(
    strict: Server, tokenizer: Tokenizer, absent: tuple[str, int], route: str
) -> None:
    path, body, field = REFUSED[route]
    token, token_id = absent
    ids = tokenizer.encode(UNCOVERED, add_special_tokens=False).ids
    message = _refusal(_post(strict, path, body([ids])), route, field)
    assert message.startswith(f"{field}[0] has the token {token!r} (id {token_id}, position "), message


def test_still_serving_after_refusals(strict: Server) -> None:
    assert _post(strict, "/embed", {"texts": [UNCOVERED]}).status_code == 422
    assert _vectors(_post(strict, "/embed", {"texts": ["Hello world"]})).shape == (1, 384)


@pytest.mark.parametrize("route", ["own", "TEI /", "OpenAI"])
def test_the_unk_rule_reads_the_unknown_token(
    server: Server, lenient: Server, tokenizer: Tokenizer, absent: tuple[str, int], route: str
) -> None:
    """With unknown "unk" the text is embedded as if its trimmed-away token were [UNK]: the untrimmed
    service's answer for the same ids with that id replaced (sent as token ids)."""
    path, body = ROUTES[route]
    _, token_id = absent
    unk_id = tokenizer.token_to_id("[UNK]")
    ids = [unk_id if i == token_id else i for i in tokenizer.encode(UNCOVERED, add_special_tokens=False).ids]
    got = _vectors(_post(lenient, path, body([UNCOVERED])))
    id_body = body([UNCOVERED])
    id_body.pop("texts", None)
    key = "input" if route == "OpenAI" else "inputs"
    id_body[key] = [ids]
    if route == "own":  # the own shape takes texts only: TEI's shape with the same normalisation
        id_body = {"inputs": [ids]}
    np.testing.assert_array_equal(got, _vectors(_post(server, path, id_body)))
    assert not np.array_equal(got, _vectors(_post(server, path, body([UNCOVERED]))))


def test_trim_options_parse_to_a_trim(corpus_file: Path) -> None:
    parser = _cli.parser.build_parser()
    given = ("--trim-scripts", "Latin,Greek", "Cyrillic", "--trim-min-count", "2", "--unknown", "unk")
    args = parser.parse_args(["export", "m", "o", "--trim-corpus", str(corpus_file), *given, "--table-dtype", "int8"])
    trim = _cli.export.trim_of(args)
    assert trim == saved_layer.Trim((str(corpus_file),), None, ("Latin", "Greek", "Cyrillic"), 2, "unk")
    assert args.table_dtype == "int8" and args.layer is None
    assert _cli.export.trim_of(parser.parse_args(["export", "m", "o"])) is None
    with pytest.raises(SystemExit):
        parser.parse_args(["export", "m", "o", "--trim-min-count", "0"])
    with pytest.raises(ValueError, match="nothing to keep"):
        saved_layer.Trim()
    with pytest.raises(ValueError, match="unknown must be one of"):
        saved_layer.Trim(ids="ids.txt", unknown="zero")


def test_the_export_command_takes_the_trim_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bertembed", "export", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    for option in TRIM_OPTIONS:
        assert option in done.stdout, option


def _cased_copy(model_dir: Path, target: Path) -> Path:
    """The model's tokenizer.json with its lowercasing turned off (a cased tokenizer, for do_lower_case)."""
    spec = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    assert spec["normalizer"]["type"] == "BertNormalizer" and spec["normalizer"]["lowercase"] is True
    spec["normalizer"]["lowercase"] = False
    target.write_text(json.dumps(spec), encoding="utf-8")
    return target


def test_do_lower_case_counts_the_corpus_as_the_service_tokenizes_it(model_dir: Path, tmp_path: Path) -> None:
    """sentence-transformers' do_lower_case: the service lowercases before a cased tokenizer, so must the trim."""
    cased = _cased_copy(model_dir, tmp_path / "tokenizer.json")
    upper, lower = tmp_path / "upper.txt", tmp_path / "lower.txt"
    upper.write_text("\n".join(CORPUS).upper() + "\n", encoding="utf-8")
    lower.write_text("\n".join(CORPUS).lower() + "\n", encoding="utf-8")
    width = 4
    layer = saved_layer.BertEmbeddings(
        np.zeros((Tokenizer.from_file(str(cased)).get_vocab_size(), width), np.float32),
        np.zeros((8, width), np.float32),
    )

    def kept(corpus: Path, do_lower_case: bool) -> list[int]:
        trim = saved_layer.Trim(corpus=(str(corpus),))
        return saved_layer.trimmed(layer, cased, trim, do_lower_case=do_lower_case).kept_ids.tolist()

    assert kept(upper, True) == kept(lower, False)
    assert kept(upper, False) != kept(lower, False)


def test_missing_trim_files_are_refused_first(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.txt"
    with pytest.raises(FileNotFoundError, match=r"nowhere\.txt: no such file"):
        saved_layer.check_files(saved_layer.Trim(corpus=(str(missing),)), None)
    with pytest.raises(FileNotFoundError, match=r"no config\.json; --layer takes a saved layer"):
        saved_layer.check_files(None, tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bertembed",
            "export",
            str(tmp_path),
            str(tmp_path / "out"),
            "--onnx",
            "--trim-ids",
            str(missing),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "nowhere.txt: no such file" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
