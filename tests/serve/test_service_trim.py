"""The service serving a trimmed embedding layer: what /info says, the unknown rule on every route, exactness.

The session's export of all-MiniLM-L6-v2 (``out_dir``) is linked into new export directories whose
layer is trimmed: by ``layer.save_layer`` (what ``bertembed export --trim-corpus`` runs) to the
tokens of a small corpus, unknown rule "error"; and by ``bertembed trim ... --unknown unk`` then
``--layer`` (a layer trimmed beforehand). Each is run with ``bertembed serve`` (2 workers) and compared with
the session's untrimmed service (``server``): a text whose tokens are all kept must get exactly the
untrimmed service's answer to the same request; a trimmed-away token gets a 422 naming it (rule
"error") or the unknown token's row (rule "unk": exactly the untrimmed answer for the same ids with
that token replaced by the unknown token). One request with several uncovered inputs gets one 422
naming each (``input[i]``/``inputs[i]``/``texts[i]`` with its first uncovered token); the header
``X-Bertembed-Unknown`` chooses the rule per request; in process, ``SentenceEmbedder`` raises
``TrimmedToken`` listing the uncovered inputs (never the layer's IndexError).
"""

from __future__ import annotations

import json
import re
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
from bertembed.serve.server.pipeline import SentenceEmbedder, TrimmedToken  # noqa: E402

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
#: Covered and uncovered texts in one request: inputs 1, 2 and 4 have tokens CORPUS never has.
MIXED = ["Hello world", UNCOVERED, "The giraffe is nice", "A short sentence.", "rivers and bridges in Paris today"]
#: The header choosing the unknown rule per request.
HEADER = "X-Bertembed-Unknown"


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
    return str(tokenizer.id_to_token(missing[0])), missing[0]


@pytest.fixture(scope="module")
def mixed_uncovered(tokenizer: Tokenizer, corpus_ids: set[int]) -> list[tuple[int, int, int, str]]:
    """(input, position, id, token) of each MIXED text's first token that CORPUS never has (from the
    tokenizer: positions count the leading [CLS], as the service's ids do)."""
    found = []
    for index, encoding in enumerate(tokenizer.encode_batch(MIXED)):
        position = next((k for k, i in enumerate(encoding.ids) if i not in corpus_ids), None)
        if position is not None:
            token_id = encoding.ids[position]
            found.append((index, position, token_id, str(tokenizer.id_to_token(token_id))))
    assert [f[0] for f in found] == [1, 2, 4], found
    return found


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


def _post(server: Server, path: str, body: dict, unknown: str | None = None) -> httpx.Response:
    headers = {} if unknown is None else {HEADER: unknown}
    return httpx.post(f"{server.url}{path}", json=body, headers=headers, timeout=60)


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
        "unknown_rules": ["error", "unk"],  # what a request may choose with the header
        "tokenizer": "full",  # a WordPiece tokenizer is kept whole
        "unknown_header": HEADER,
    }
    unk_id = tokenizer.token_to_id("[UNK]")
    assert httpx.get(f"{lenient.url}/info", timeout=30).json()["embedding_layer"] == {
        "table_dtype": "float32",
        "trimmed": True,
        "vocab_size": vocab,
        "kept_rows": kept,
        "unknown": unk_id,
        "unknown_token": "[UNK]",
        "unknown_rules": ["error", "unk"],
        "tokenizer": "full",
        "unknown_header": HEADER,
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


def _named(field: str, found: list[tuple[int, int, int, str]]) -> str:
    return "; ".join(f"{field}[{k}] has the token {t!r} (id {i}, position {p} of its ids)" for k, p, i, t in found)


@pytest.mark.parametrize("route", list(REFUSED))
def test_one_422_names_every_uncovered_input(
    strict: Server, mixed_uncovered: list[tuple[int, int, int, str]], route: str
) -> None:
    """Inputs 1, 2 and 4 of MIXED are uncovered: one 422 names the three, each with its first uncovered
    token, and says how to be served (the header)."""
    path, body, field = REFUSED[route]
    message = _refusal(_post(strict, path, body(MIXED)), route, field)
    assert message == (
        f"{_named(field, mixed_uncovered)}: 3 of 5 inputs have a token this service's trimmed embedding layer "
        f"does not keep (it keeps {strict.service_json()['embeddings']['kept_rows']} of 30522 token rows); send "
        f"those inputs without such tokens, or with the header '{HEADER}: unk' to embed such tokens as '[UNK]'"
    )


def test_a_422_lists_ten_uncovered_inputs_and_counts_the_others(strict: Server, absent: tuple[str, int]) -> None:
    token, token_id = absent
    texts = ["Hello world"] + [UNCOVERED] * 13
    message = _refusal(_post(strict, "/embed", {"texts": texts}), "own", "texts")
    listed = "; ".join(
        f"texts[{k}] has the token {token!r} (id {token_id}, position 2 of its ids)" for k in range(1, 11)
    )
    assert message.startswith(f"{listed}; and 3 more inputs have one: 13 of 14 inputs have a token "), message
    assert "texts[11]" not in message


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_header_chooses_the_unknown_rule_per_request(
    server: Server, strict: Server, lenient: Server, route: str
) -> None:
    """``X-Bertembed-Unknown: unk`` on the strict layer gives exactly what the layer trimmed with "unk"
    gives; ``error`` on that one gives the strict layer's 422; neither changes an untrimmed service."""
    path, body = ROUTES[route]
    field = REFUSED[route][2]
    lenient_answer = _vectors(_post(lenient, path, body(MIXED)))
    np.testing.assert_array_equal(_vectors(_post(strict, path, body(MIXED), "unk")), lenient_answer)
    np.testing.assert_array_equal(_vectors(_post(lenient, path, body(MIXED), "UNK")), lenient_answer)
    refused = _refusal(_post(lenient, path, body(MIXED), "error"), route, field)
    assert refused == _refusal(_post(strict, path, body(MIXED)), route, field)
    assert _refusal(_post(strict, path, body(MIXED), "error"), route, field) == refused
    untrimmed = _vectors(_post(server, path, body(MIXED)))
    np.testing.assert_array_equal(_vectors(_post(server, path, body(MIXED), "unk")), untrimmed)
    np.testing.assert_array_equal(_vectors(_post(server, path, body(MIXED), "error")), untrimmed)


@pytest.mark.parametrize("route", ["own", "OpenAI"])
def test_a_bad_header_value_is_refused_in_the_protocol_s_shape(strict: Server, route: str) -> None:
    path, body = ROUTES[route]
    answer = _post(strict, path, body(["Hello world"]), "zero")
    expected = f"header {HEADER} must be 'error' or 'unk', got 'zero'"
    if route == "OpenAI":
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["message"] == expected
        assert answer.json()["error"]["type"] == "invalid_request_error"
    else:
        assert answer.status_code == 422, answer.text
        assert answer.json() == {"error": expected, "error_type": "Validation"}


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


@pytest.fixture(scope="module")
def strict_embedder(strict_dir: Path) -> SentenceEmbedder:
    """The pipeline in this process, on the strict layer."""
    embedder = SentenceEmbedder(strict_dir, threads=1)
    embedder.start()
    return embedder


@pytest.fixture(scope="module")
def lenient_embedder(lenient_dir: Path) -> SentenceEmbedder:
    embedder = SentenceEmbedder(lenient_dir, threads=1)
    embedder.start()
    return embedder


def _listed(found: list[tuple[int, int, int, str]]) -> str:
    return re.escape("; ".join(f"input {k}: token {t!r} (id {i}) at position {p}" for k, p, i, t in found))


def test_in_process_every_entry_raises_trimmed_token_naming_each_input(
    strict_embedder: SentenceEmbedder, mixed_uncovered: list[tuple[int, int, int, str]]
) -> None:
    """encode_texts, embed, encode and encode_call raise TrimmedToken listing inputs 1, 2 and 4 of MIXED
    (the layer's own IndexError, which names neither text nor token, never gets out)."""
    listed = _listed(mixed_uncovered)
    message = rf"^3 of 5 inputs have a token that the trimmed embedding layer does not keep .*: {listed}$"
    seqs = strict_embedder.tokenize(MIXED)
    calls = {
        "encode_texts": lambda: strict_embedder.encode_texts(MIXED),
        "embed": lambda: strict_embedder.embed(MIXED),
        "encode": lambda: strict_embedder.encode(seqs),
        "encode_call": lambda: strict_embedder.encode_call(seqs),
    }
    for name, call in calls.items():
        with pytest.raises(TrimmedToken, match=message) as caught:
            call()
        got = [(u.index, u.position, u.token_id, u.token) for u in caught.value.inputs]
        assert got == mixed_uncovered, name
        assert caught.value.count == 5 and caught.value.index == 1, name
        assert caught.value.__cause__ is None and (
            caught.value.__context__ is None or caught.value.__suppress_context__
        )


def test_in_process_trimmed_token_lists_ten_inputs(strict_embedder: SentenceEmbedder, absent: tuple[str, int]) -> None:
    token, token_id = absent
    listed = _listed([(k, 2, token_id, token) for k in range(10)])
    with pytest.raises(TrimmedToken, match=rf"^12 of 12 inputs .*: {listed}; and 2 more$") as caught:
        strict_embedder.encode_texts([UNCOVERED] * 12)
    assert [u.index for u in caught.value.inputs] == list(range(12))


def test_in_process_the_unknown_rule_per_call(
    strict_embedder: SentenceEmbedder, lenient_embedder: SentenceEmbedder, mixed_uncovered: list
) -> None:
    lenient = lenient_embedder.encode_texts(MIXED)
    np.testing.assert_array_equal(strict_embedder.encode_texts(MIXED, unknown="unk"), lenient)
    np.testing.assert_array_equal(strict_embedder.embed(MIXED, unknown="unk")[0], lenient)
    with pytest.raises(TrimmedToken, match=r"^3 of 5 inputs ") as caught:
        lenient_embedder.encode_texts(MIXED, unknown="error")
    assert [u.index for u in caught.value.inputs] == [1, 2, 4]
    with pytest.raises(ValueError, match=r"^unknown must be one of \('error', 'unk'\) or None, got 'zero'$"):
        strict_embedder.encode_texts(MIXED, unknown="zero")
    covered = strict_embedder.encode_texts(COVERED)
    np.testing.assert_array_equal(strict_embedder.encode_texts(COVERED, unknown="unk"), covered)


def test_the_export_s_unk_rule_reads_the_unknown_row(
    out_dir: Path, corpus_file: Path, tmp_path: Path, lenient_embedder: SentenceEmbedder
) -> None:
    """``--trim-corpus FILE --unknown unk`` (what the export saves: ``Trim(..., unknown="unk")``) serves
    the uncovered texts exactly as the layer ``bertembed trim --unknown unk`` made."""
    trim = saved_layer.Trim(corpus=(str(corpus_file),), unknown="unk")
    export = _linked_export(out_dir, tmp_path / "export", out_dir / EMBEDDINGS_DIR, trim=trim)
    embedder = SentenceEmbedder(export, threads=1)
    embedder.start()
    assert embedder.layer_info()["unknown_token"] == "[UNK]"
    np.testing.assert_array_equal(embedder.encode_texts(MIXED), lenient_embedder.encode_texts(MIXED))


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
