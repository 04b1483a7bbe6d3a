"""``BertEmbeddings.__call__`` has one declared signature: what help() and
``inspect.signature`` show is what a call accepts, keyword for keyword."""

from __future__ import annotations

import inspect
import pydoc

import numpy as np
import pytest

from bertembed import BertEmbeddings

P = inspect.Parameter


@pytest.fixture
def layer(rng):
    return BertEmbeddings(
        rng.standard_normal((20, 4)),
        rng.standard_normal((8, 4)),
        rng.standard_normal((2, 4)),
        task_embeddings=rng.standard_normal((3, 4)),
    )


def _keywords(sig: inspect.Signature) -> list[str]:
    return [p.name for p in sig.parameters.values() if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)]


def test_the_shown_signature_is_the_checked_paths(layer):
    shown = inspect.signature(layer.__call__)
    assert shown == inspect.signature(layer._call)
    assert _keywords(shown)[:2] == ["token_ids", "segment_ids"]
    assert {"position_ids", "task_type_ids", "attention_mask", "out", "num_threads"} <= set(_keywords(shown))
    assert {"input_ids", "token_type_ids"} <= set(_keywords(shown))
    assert list(shown.parameters.values())[-1].kind is P.VAR_KEYWORD


def test_help_shows_that_signature(layer):
    text = pydoc.render_doc(BertEmbeddings, renderer=pydoc.plaintext)
    # The signature as help() shows it: one line, or (Python 3.13 on) one
    # parameter per line up to the closing parenthesis.
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "__call__(" in line)
    end = next(i for i in range(start, len(lines)) if ")" in lines[i].split("->")[0])
    shown = " ".join(lines[start : end + 1])
    for name in _keywords(inspect.signature(layer.__call__)):
        assert f" {name}: " in shown, name


def test_every_keyword_shown_is_accepted(layer):
    """Each keyword of the signature, given alone (with a value that means "as if
    not given" where there is one), is taken by a call; one not shown is not."""
    ids = np.array([[1, 2, 3]])
    values = {
        "token_ids": ids,
        "segment_ids": np.zeros_like(ids),
        "position_ids": np.arange(3),
        "task_type_ids": np.zeros_like(ids),
        "attention_mask": np.ones_like(ids),
        "out": None,
        "num_threads": 1,
        "input_ids": ids,
        "token_type_ids": np.zeros_like(ids),
    }
    want = layer(ids)
    shown = _keywords(inspect.signature(layer.__call__))
    assert sorted(shown) == sorted(values)  # a keyword added to the signature is added here too
    for name in shown:
        kw = {name: values[name]}
        if name not in ("token_ids", "input_ids"):
            kw["token_ids"] = ids
        np.testing.assert_array_equal(layer(**kw), want, err_msg=name)
    with pytest.raises(TypeError, match="position_idz"):
        layer(ids, position_idz=np.arange(3))
