"""Inputs a trimmed embedding layer does not cover, without a model or a server: the 422 that names
every one of them in each protocol's error shape, the ``X-Bertembed-Unknown`` header, and the
pipeline's ``TrimmedToken`` (its message lists ten inputs and counts the others).

``bertembed.serve.protocols`` needs NumPy and orjson, the pipeline ONNX Runtime and tokenizers (the
``serve`` extra); without them the tests that need them skip.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

pytest.importorskip("orjson", reason='the server writes answers with orjson: pip install "bertembed[serve]"')

from bertembed.serve import protocols


def _uncovered(*indices: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(index=k, position=2, token_id=29145, token="zebra") for k in indices]


def _refusal(name: str, indices: tuple[int, ...], count: int, unknown_token: str | None = "[UNK]") -> str:
    exc = protocols.not_kept(
        name, _uncovered(*indices), count, kept_rows=41, vocab_size=30522, unknown_token=unknown_token
    )
    assert (exc.status, exc.param, exc.code, exc.error_type) == (422, name, "token_not_kept", "Validation")
    return exc.message


def test_one_uncovered_input() -> None:
    assert _refusal("input", (1,), 2, None) == (
        "input[1] has the token 'zebra' (id 29145, position 2 of its ids), which this service's trimmed "
        "embedding layer does not keep (it keeps 41 of 30522 token rows); send the input without it"
    )


@pytest.mark.parametrize("name", ["input", "inputs", "texts"])
def test_every_uncovered_input_is_named_with_the_request_s_field(name: str) -> None:
    message = _refusal(name, (0, 3, 7), 8)
    named = "; ".join(f"{name}[{k}] has the token 'zebra' (id 29145, position 2 of its ids)" for k in (0, 3, 7))
    assert message == (
        f"{named}: 3 of 8 inputs have a token this service's trimmed embedding layer does not keep (it keeps 41 "
        "of 30522 token rows); send those inputs without such tokens, or with the header "
        "'X-Bertembed-Unknown: unk' to embed such tokens as '[UNK]'"
    )


def test_ten_inputs_are_listed_the_others_counted() -> None:
    message = _refusal("texts", tuple(range(12)), 20)
    assert re.findall(r"texts\[(\d+)\]", message) == [str(k) for k in range(10)]
    assert "; and 2 more inputs have one: 12 of 20 inputs have a token " in message
    assert "; and 1 more input has one: 11 of 11 " in _refusal("texts", tuple(range(11)), 11)


def test_the_422_in_each_protocol_s_error_shape() -> None:
    exc = protocols.not_kept("input", _uncovered(1), 2, kept_rows=41, vocab_size=30522, unknown_token=None)
    assert protocols.openai_error(exc) == {
        "error": {"message": exc.message, "type": "invalid_request_error", "param": "input", "code": "token_not_kept"}
    }
    assert protocols.tei_error(exc) == {"error": exc.message, "error_type": "Validation"}


def test_the_unknown_header() -> None:
    assert protocols.UNKNOWN_HEADER == "X-Bertembed-Unknown"
    assert [protocols.parse_unknown_header(v, "tei") for v in (None, "unk", " Error ", "UNK")] == [
        None,
        "unk",
        "error",
        "unk",
    ]
    refusal = r"^header X-Bertembed-Unknown must be 'error' or 'unk', got ''$"
    for shape, status in (("openai", 400), ("tei", 422), ("texts", 422)):
        with pytest.raises(protocols.BadRequest, match=refusal):
            protocols.parse_unknown_header("", shape)
        with pytest.raises(protocols.BadRequest, match=r"got 'zero'$") as refused:
            protocols.parse_unknown_header("zero", shape)
        assert refused.value.status == status


def test_trimmed_token_lists_ten_inputs_and_counts_the_others() -> None:
    pytest.importorskip("onnxruntime", reason='the pipeline runs ONNX Runtime: pip install "bertembed[serve]"')
    pytest.importorskip("tokenizers", reason='the pipeline tokenizes with tokenizers: pip install "bertembed[serve]"')
    from bertembed.serve.server.pipeline import TrimmedToken, Uncovered

    inputs = [Uncovered(k, 1, 1879, "東") for k in range(13)]
    listed = "; ".join(f"input {k}: token '東' \\(id 1879\\) at position 1" for k in range(10))
    with pytest.raises(TrimmedToken, match=rf"^13 of 20 inputs have a token .*: {listed}; and 3 more$") as caught:
        raise TrimmedToken(inputs, 20)
    assert caught.value.inputs == tuple(inputs) and caught.value.count == 20
    assert (caught.value.index, caught.value.position, caught.value.token_id, caught.value.token) == (0, 1, 1879, "東")
    assert isinstance(caught.value, ValueError) and not isinstance(caught.value, IndexError)
    with pytest.raises(TrimmedToken, match=r"^1 of 1 inputs .*: input 0: token '東' \(id 1879\) at position 1$"):
        raise TrimmedToken(inputs[:1], 1)
    with pytest.raises(ValueError, match="at least one uncovered input"):
        TrimmedToken([], 3)
