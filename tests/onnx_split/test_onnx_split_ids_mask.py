"""``bertembed.onnx.split_model`` on exports whose only inputs are ``input_ids`` and ``attention_mask``.

transformers' BERT, RoBERTa and XLM-RoBERTa, called without
``token_type_ids``, gather their token types from a buffer as wide as the
position table (``torch.gather``: ONNX ``GatherElements`` over 512 or 514
entries). onnx's reference GatherElements (``np.choose``) fails there, so the
splitter evaluates it with its own (:mod:`bertembed._onnx.contrib`). Each
model is exported as users export it (``torch.onnx.export(..., dynamo=False)``,
dynamic batch and sequence), split, and the layer then ``encoder.onnx`` must
give the whole model's ``last_hidden_state`` on right- and left-padded
batches, to 1e-5 of its largest value (as in ``test_onnx_split.py``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from helpers.extras import needs

needs("onnx", "peers")
ort = needs("onnxruntime", "peers")
torch = needs("torch", "peers")
needs("transformers", "peers")

from helpers.hf_families import make_checkpoint  # noqa: E402
from helpers.onnx_exports import _Whole, padded_batches  # noqa: E402

from bertembed import BertEmbeddings  # noqa: E402
from bertembed.onnx import split_model  # noqa: E402

pytestmark = pytest.mark.heavy

#: Relative tolerance: max |split - whole| / max(1, max |whole|) (float32).
RTOL = 1e-5

NAMES = ["input_ids", "attention_mask"]

#: Families and config overrides: real models' position-table and type-table sizes.
MODELS = {
    # The XLM-R of the report: 514 positions, one token type, pad id 1.
    "xlm-roberta": (
        "xlm-roberta",
        {
            "vocab_size": 1000,
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 514,
            "pad_token_id": 1,
            "type_vocab_size": 1,
        },
    ),
    "roberta": ("roberta", {"max_position_embeddings": 514, "pad_token_id": 1, "type_vocab_size": 1}),
    "bert": ("bert", {"max_position_embeddings": 512, "type_vocab_size": 2}),
}


def export_ids_mask(model_type: str, overrides: dict, directory, opset: int):
    """``directory/model.onnx``, of inputs ``input_ids`` and ``attention_mask`` only; and its config."""
    directory.mkdir(parents=True, exist_ok=True)
    model: Any = make_checkpoint(model_type, directory / "checkpoint", **overrides)
    with torch.no_grad():  # as onnx_exports.export: keep activations near real scales
        for param in model.parameters():
            if param.ndim == 2:
                param.mul_(0.2)
    example = (torch.ones(2, 7, dtype=torch.long) * 7, torch.ones(2, 7, dtype=torch.long))
    path = directory / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Whole(model, NAMES),
            example,
            str(path),
            input_names=NAMES,
            output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*NAMES, "last_hidden_state"]},
            opset_version=opset,
            dynamo=False,
        )
    return path, model.config.to_dict()


@pytest.mark.parametrize("opset", [17, 14])
@pytest.mark.parametrize("family", list(MODELS))
def test_ids_mask_export_splits_and_equals_whole_model(family, opset, tmp_path, monkeypatch):
    model_type, overrides = MODELS[family]
    path, config = export_ids_mask(model_type, overrides, tmp_path / "whole", opset)
    import onnx

    whole_model = onnx.load(str(path))
    assert [i.name for i in whole_model.graph.input] == NAMES
    assert any(n.op_type == "GatherElements" for n in whole_model.graph.node)  # the token-type buffer

    def refuse(*args, **kwargs):
        raise AssertionError("the split evaluated something through np.choose")

    with monkeypatch.context() as m:
        m.setattr(np, "choose", refuse)
        result = split_model(path, tmp_path / "split")
    assert result.encoder_inputs[0] == "inputs_embeds"
    assert result.removed_inputs == ("input_ids",)
    assert result.position_rule == ("padding" if model_type != "bert" else "absolute")

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    whole = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    encoder = ort.InferenceSession(str(tmp_path / "split" / "encoder.onnx"), opts, providers=["CPUExecutionProvider"])
    layer = BertEmbeddings.from_pretrained(tmp_path / "split")
    for ids, _types, mask in padded_batches(config):  # no types: the graph has no such input
        want = whole.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        feed = {"inputs_embeds": layer(ids, None), "attention_mask": mask, "input_ids": ids}
        got = encoder.run(None, {i.name: feed[i.name] for i in encoder.get_inputs()})[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=RTOL * max(1.0, float(np.abs(want).max())))
