"""The docstring examples of the public modules run and print what they say."""

import doctest
import importlib

import pytest

MODULES = ["bertembed._api", "bertembed._model", "bertembed._config", "bertembed._cli",
           "bertembed._positions", "bertembed._families", "bertembed._weights.errors",
           "bertembed._weights.reading", "bertembed._weights.files"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0


def test_public_names():
    import bertembed

    assert set(bertembed.__all__) == {
        "BertEmbeddings", "PositionRule", "__version__", "bert_embeddings", "max_threads", "openmp_enabled",
        "show_config", "CheckpointError", "UnsafeCheckpointError",
    }
    assert isinstance(bertembed.openmp_enabled(), bool)
    assert bertembed.max_threads() >= 1


def test_show_config_prints_facts(capsys):
    import bertembed

    bertembed.show_config()
    text = capsys.readouterr().out
    for key in ("bertembed:", "openmp:", "max_threads:", "compiler:"):
        assert key in text
    assert f"bertembed: {bertembed.__version__}" in text
