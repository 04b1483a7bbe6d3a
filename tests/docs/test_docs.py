"""The docstring examples of the public modules run and print what they say."""

import doctest
import importlib

import pytest

MODULES = [
    "bertembed._function",
    "bertembed._layer",
    "bertembed._core.runtime",
    "bertembed._core.dtypes",
    "bertembed._core.tables",
    "bertembed._cli",
    "bertembed._core.positions",
    "bertembed._core.cpus",
    "bertembed._checkpoints.families",
    "bertembed._checkpoints.errors",
    "bertembed._checkpoints.readers.reading",
    "bertembed._checkpoints.readers.files",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0


def test_public_names():
    import bertembed

    assert set(bertembed.__all__) == {
        "BertEmbeddings",
        "PositionRule",
        "__version__",
        "bert_embeddings",
        "max_threads",
        "openmp_enabled",
        "show_config",
        "set_num_threads",
        "get_num_threads",
        "set_result_cache",
        "CheckpointError",
        "UnsafeCheckpointError",
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
