"""``bertembed.onnx.split_model`` on small hand-built graphs: every LayerNorm form, both position
rules, the rewrites of the encoder, and each refusal (onnx only; no torch, no onnxruntime).

The whole graph and the split (layer, then ``encoder.onnx``) are both run by
onnx's reference evaluator and compared.
"""

from __future__ import annotations

import gc
import re

import numpy as np
import pytest
from helpers.extras import needs

onnx = needs("onnx", "onnx")
from helpers.windows import refuse_mapped_files  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from bertembed import BertEmbeddings  # noqa: E402
from bertembed._checkpoints import mapped  # noqa: E402
from bertembed._onnx import contrib  # noqa: E402
from bertembed.onnx import split_model  # noqa: E402

V, P, T, H, PAD = 30, 24, 2, 8, 3
RTOL = 1e-5


def _c(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def build(
    *,
    ln="layernorm",
    positions="absolute",
    types=True,
    opset=17,
    extra=(),
    outputs_extra=(),
    quantised=False,
    mask_index_output=False,
):
    """A BERT-like graph: lookups, sum, LayerNorm, then a small 'encoder' reading the ids' shape."""
    rng = np.random.default_rng(0)
    inits = [
        _c("gamma", rng.standard_normal(H).astype(np.float32)),
        _c("beta", rng.standard_normal(H).astype(np.float32)),
        _c("pos_table", rng.standard_normal((P, H)).astype(np.float32)),
        _c("type_table", rng.standard_normal((T, H)).astype(np.float32)),
        _c("W", rng.standard_normal((H, H)).astype(np.float32)),
        _c("one", np.array(1, np.int64)),
        _c("zero", np.array(0, np.int64)),
        _c("ax0", np.array([0], np.int64)),
        _c("ax1", np.array([1], np.int64)),
        _c("pad", np.array(PAD, np.int64)),
        _c("minus1", np.array([-1], np.int64)),
        _c("ax2", np.array([2], np.int64)),
    ]
    word = rng.standard_normal((V, H)).astype(np.float32)
    nodes = []
    if quantised:
        scale = np.float32(0.05) if quantised == "per-tensor" else np.full(H, 0.05, np.float32)
        zero = np.int8(0) if quantised == "per-tensor" else np.zeros(H, np.int8)
        inits += [_c("word_q", (word * 20).astype(np.int8)), _c("scale", scale), _c("zp", zero)]
        nodes += [
            helper.make_node("Gather", ["word_q", "input_ids"], ["tok_q"]),
            helper.make_node("DequantizeLinear", ["tok_q", "scale", "zp"], ["tok"]),
        ]
    else:
        inits.append(_c("word", word))
        nodes.append(helper.make_node("Gather", ["word", "input_ids"], ["tok"]))
    if positions == "absolute":
        nodes += [
            helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
            helper.make_node("Gather", ["ids_shape", "one"], ["seq"], axis=0),
            helper.make_node("Range", ["zero", "seq", "one"], ["range"]),
            helper.make_node("Unsqueeze", ["range", "ax0"], ["pos_ids"]),
        ]
    else:
        source = "attention_mask" if positions == "mask" else "input_ids"
        if positions == "mask":
            nodes.append(helper.make_node("Identity", ["attention_mask"], ["real_i"]))
        else:
            nodes += [
                helper.make_node("Equal", [source, "pad"], ["is_pad"]),
                helper.make_node("Not", ["is_pad"], ["real"]),
                helper.make_node("Cast", ["real"], ["real_i"], to=TensorProto.INT64),
            ]
        nodes += [
            helper.make_node("CumSum", ["real_i", "one"], ["count"]),
            helper.make_node("Mul", ["count", "real_i"], ["count_real"]),
            helper.make_node("Add", ["count_real", "pad"], ["pos_ids"]),
        ]
    nodes += [
        helper.make_node("Gather", ["pos_table", "pos_ids"], ["pos"]),
        helper.make_node("Add", ["tok", "pos"], ["sum1"]),
    ]
    x = "sum1"
    if types:
        nodes += [
            helper.make_node("Gather", ["type_table", "token_type_ids"], ["typ"]),
            helper.make_node("Add", ["sum1", "typ"], ["sum2"]),
        ]
        x = "sum2"
    if ln == "layernorm":
        nodes.append(helper.make_node("LayerNormalization", [x, "gamma", "beta"], ["emb"], epsilon=1e-5, axis=-1))
    elif ln == "decomposed":
        inits += [_c("two", np.float32(2)), _c("eps", np.float32(1e-5))]
        red = {"axes": [-1]} if opset < 18 else {}
        rin = [] if opset < 18 else ["minus1"]
        nodes += [
            helper.make_node("ReduceMean", [x, *rin], ["mean"], **red),
            helper.make_node("Sub", [x, "mean"], ["d"]),
            helper.make_node("Pow", ["d", "two"], ["d2"]),
            helper.make_node("ReduceMean", ["d2", *rin], ["var"], **red),
            helper.make_node("Add", ["var", "eps"], ["var_eps"]),
            helper.make_node("Sqrt", ["var_eps"], ["std"]),
            helper.make_node("Div", ["d", "std"], ["normed"]),
            helper.make_node("Mul", ["normed", "gamma"], ["scaled"]),
            helper.make_node("Add", ["scaled", "beta"], ["emb"]),
        ]
    elif ln == "skip":
        skip = "pos_typ" if types else "pos"
        nodes.append(
            helper.make_node(
                "SkipLayerNormalization", ["tok", skip, "gamma", "beta"], ["emb"], domain="com.microsoft", epsilon=1e-5
            )
        )
        if types:
            nodes.insert(-1, helper.make_node("Gather", ["type_table", "token_type_ids"], ["typ2"]))
            nodes.insert(-1, helper.make_node("Add", ["pos", "typ2"], ["pos_typ"]))
            nodes = [n for n in nodes if n.output[0] not in ("typ", "sum2", "sum1")]
        else:
            nodes = [n for n in nodes if n.output[0] != "sum1"]
    elif ln == "none":
        nodes.append(helper.make_node("Identity", [x], ["emb"]))
    # The 'encoder': a MatMul, the mask, and a Reshape to the ids' shape + (-1,).
    nodes += [
        helper.make_node("MatMul", ["emb", "W"], ["h"]),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "ax2"], ["mask_3d"]),
        helper.make_node("Mul", ["h", "mask_3d"], ["hm"]),
        helper.make_node("Shape", ["input_ids"], ["ids_shape_after"]),
        helper.make_node("Concat", ["ids_shape_after", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["hm", "target"], ["out"]),
        *extra,
    ]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
    ]
    if types:
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "seq"]))
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)]
    outputs += [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs_extra]
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=opsets)


def eln_model():
    """ONNX Runtime's fused form: EmbedLayerNormalization, its mask_index read by the encoder."""
    rng = np.random.default_rng(1)
    inits = [
        _c("word", rng.standard_normal((V, H)).astype(np.float32)),
        _c("pos_table", rng.standard_normal((P, H)).astype(np.float32)),
        _c("type_table", rng.standard_normal((T, H)).astype(np.float32)),
        _c("gamma", rng.standard_normal(H).astype(np.float32)),
        _c("beta", rng.standard_normal(H).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids32"], to=TensorProto.INT32),
        helper.make_node("Cast", ["token_type_ids"], ["types32"], to=TensorProto.INT32),
        helper.make_node("Cast", ["attention_mask"], ["mask32"], to=TensorProto.INT32),
        helper.make_node(
            "EmbedLayerNormalization",
            ["ids32", "types32", "word", "pos_table", "type_table", "gamma", "beta", "mask32"],
            ["out", "mask_index"],
            domain="com.microsoft",
            epsilon=1e-5,
        ),
        helper.make_node("Cast", ["mask_index"], ["lengths"], to=TensorProto.INT64),
    ]
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    outputs = [
        helper.make_tensor_value_info("out", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("lengths", TensorProto.INT64, None),
    ]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _batches(types: bool):
    rng = np.random.default_rng(5)
    ids = rng.integers(0, V, size=(3, 9))
    ids[ids == PAD] = PAD + 1
    mask = np.ones_like(ids)
    ids[1, 6:], mask[1, 6:] = PAD, 0  # right padding
    ids[2, :3], mask[2, :3] = PAD, 0  # left padding
    tt = rng.integers(0, T, size=ids.shape) if types else None
    return [(ids, tt, mask), (ids[:, :1], None if tt is None else tt[:, :1], mask[:, :1])]


def _run(model, feeds):
    ev = ReferenceEvaluator(model, new_ops=contrib.OPS)
    names = [i.name for i in model.graph.input]
    return ev.run(None, {n: feeds[n] for n in names})


def _check(model, out_dir, types=True):
    result = split_model(model, out_dir)
    layer = BertEmbeddings.from_pretrained(out_dir)
    encoder = onnx.load(str(out_dir / "encoder.onnx"))
    for ids, tt, mask in _batches(types):
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids) if tt is None else tt}
        want = _run(model, feeds)
        feeds["inputs_embeds"] = layer(ids, tt)
        got = _run(encoder, feeds)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_allclose(g, w, rtol=0, atol=RTOL * max(1.0, float(np.abs(w).max())))
    return result, encoder


@pytest.mark.parametrize("ln", ["layernorm", "decomposed", "skip"])
@pytest.mark.parametrize("positions", ["absolute", "padding"])
@pytest.mark.parametrize("types", [True, False])
def test_forms_and_rules(ln, positions, types, tmp_path):
    result, encoder = _check(build(ln=ln, positions=positions, types=types), tmp_path, types)
    assert result.position_rule == positions
    assert result.encoder_inputs == ("inputs_embeds", "attention_mask")
    kept = {t.name for t in encoder.graph.initializer}
    assert not kept & {"word", "pos_table", "type_table"}  # unused initializers dropped


def test_opset14_shape_rewrite(tmp_path):
    result, encoder = _check(build(ln="decomposed", opset=14), tmp_path)
    assert result.layer_norm == "decomposed"
    assert not any("input_ids" in n.input for n in encoder.graph.node)


def test_embed_layer_normalization_mask_index_rebuilt(tmp_path):
    result, encoder = _check(eln_model(), tmp_path)
    assert result.layer_norm == "EmbedLayerNormalization"
    assert "ReduceSum" in {n.op_type for n in encoder.graph.node}


def test_tied_output_table_kept_in_encoder(tmp_path):
    tied = [
        helper.make_node("Transpose", ["word"], ["word_t"]),
        helper.make_node("MatMul", ["emb", "word_t"], ["logits"]),
    ]
    _, encoder = _check(build(extra=tied, outputs_extra=("logits",)), tmp_path)
    assert "word" in {t.name for t in encoder.graph.initializer}


def test_refuses_positions_from_the_mask(tmp_path):
    with pytest.raises(ValueError, match=r"Gather node .*attention_mask.*attention mask"):
        split_model(build(positions="mask"), tmp_path)


def test_refuses_ids_read_after_the_cut(tmp_path):
    reads = [helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT)]
    with pytest.raises(ValueError, match=r"Cast node .*reads 'input_ids' after the embeddings, other than by"):
        split_model(build(extra=reads, outputs_extra=("ids_f",)), tmp_path)


def test_refuses_partial_sum_read_elsewhere(tmp_path):
    with pytest.raises(ValueError, match="a partial sum of the embeddings is also read by a graph output"):
        split_model(build(outputs_extra=("sum1",)), tmp_path)


def test_dequantised_table_is_split_exactly(tmp_path):
    _check(build(quantised="per-tensor"), tmp_path)


def test_refuses_quantised_table_per_axis(tmp_path):
    with pytest.raises(ValueError, match=r"DequantizeLinear node .*cannot be dequantised exactly: its scale"):
        split_model(build(quantised="per-axis"), tmp_path)


def test_refuses_no_layernorm(tmp_path):
    with pytest.raises(ValueError, match="no LayerNorm found"):
        split_model(build(ln="none"), tmp_path)


def test_model_proto_not_changed_and_files_written(tmp_path):
    model = build()
    before = model.SerializeToString()
    split_model(model, tmp_path / "new" / "dir")
    assert model.SerializeToString() == before
    assert sorted(p.name for p in (tmp_path / "new" / "dir").iterdir()) == [
        "config.json",
        "encoder.onnx",
        "model.safetensors",
    ]


def test_cli_split_onnx(tmp_path, capsys):
    from bertembed._cli import main

    path = tmp_path / "model.onnx"
    onnx.save(build(positions="padding"), str(path))
    assert main(["split-onnx", str(path), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "encoder.onnx (inputs: inputs_embeds, attention_mask)" in out
    assert "model_type roberta, positions padding" in out
    onnx.save(build(positions="mask"), str(path))
    assert main(["split-onnx", str(path), str(tmp_path / "out2")]) == 1
    assert "computed from an attention mask" in capsys.readouterr().err
    assert not (tmp_path / "out2" / "encoder.onnx").exists()


def test_external_data_read_and_written(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    model = build()
    onnx.save_model(
        model,
        str(source / "model.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="model.onnx.data",
        size_threshold=0,
    )
    split_model(source / "model.onnx", tmp_path / "out")  # its tensors are all below 1 KiB: kept inline
    _check(build(), tmp_path / "again")  # the same graph, inline: same numbers
    layer_a = BertEmbeddings.from_pretrained(tmp_path / "out")
    layer_b = BertEmbeddings.from_pretrained(tmp_path / "again")
    ids = np.array([[1, 2, PAD, 4]])
    np.testing.assert_array_equal(layer_a(ids), layer_b(ids))
    encoder = onnx.load(str(tmp_path / "out" / "encoder.onnx"))
    feeds = {"inputs_embeds": layer_a(ids), "attention_mask": np.ones_like(ids)}
    np.testing.assert_array_equal(
        _run(encoder, feeds)[0], _run(onnx.load(str(tmp_path / "again" / "encoder.onnx")), feeds)[0]
    )


@pytest.mark.parametrize("how", ["platform", "rename refused"])
def test_split_into_a_directory_a_live_layer_maps(how, tmp_path, monkeypatch):
    """Windows' rule (played): refused naming the file, every file of the directory and the live layer
    untouched (the weights are replaced first, so no encoder.onnx is replaced either); fine once it is gone."""
    split_model(build(), tmp_path)
    live = BertEmbeddings.from_pretrained(tmp_path)
    ids = _batches(True)[0][0]
    before = live(ids)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    if how == "platform":
        monkeypatch.setattr(mapped, "REPLACE_REFUSED", True)
    else:
        refuse_mapped_files(monkeypatch)
    weights = re.escape(str(tmp_path / "model.safetensors"))
    with pytest.raises(PermissionError, match=weights + r": cannot replace this file: a live layer in this process"):
        split_model(build(positions="padding"), tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files
    np.testing.assert_array_equal(live(ids), before)
    del live
    gc.collect()
    assert split_model(build(positions="padding"), tmp_path).position_rule == "padding"
    assert BertEmbeddings.from_pretrained(tmp_path).position_rule.kind == "padding"
