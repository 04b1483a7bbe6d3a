"""Split a whole-model ONNX file into a bertembed embedding layer and an ONNX encoder.

A transformer exported to ONNX as one graph (``torch.onnx.export``, Optimum,
ONNX Runtime's optimizer) computes its input embeddings first: table lookups
of the token ids, positions and token types, summed, then a LayerNorm.
:func:`split_model` finds that subgraph by its shape in the graph (never by
tensor names), writes the tables as an embedding layer that
:meth:`bertembed.BertEmbeddings.from_pretrained` loads, and writes the rest
of the graph as ``encoder.onnx``, which takes ``inputs_embeds`` in place of
the ids. Before writing, it checks the layer against the graph's own
embeddings on probe batches, and refuses (a ``ValueError`` naming the node)
what it cannot reproduce.

Needs the ``onnx`` package (``pip install bertembed[onnx]``), imported only
when a function here is called; onnxruntime is not needed.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._core import dtypes

__all__ = ["SplitResult", "split_model"]

#: Above this many bytes of weights, ``encoder.onnx`` keeps them in ``encoder.onnx.data``.
EXTERNAL_DATA_BYTES = 1 << 30


@dataclass(frozen=True)
class SplitResult:
    """What :func:`split_model` wrote and found.

    Parameters
    ----------
    encoder : Path
        ``OUT_DIR/encoder.onnx``: the graph after the embedding LayerNorm.
    layer_dir : Path
        The directory ``BertEmbeddings.from_pretrained`` loads (``OUT_DIR``).
    model_type : str
        The ``model_type`` written to config.json ("bert", "roberta", "mpnet" or "gte").
    position_rule : str
        "absolute", "padding" or "none".
    layer_norm : str
        The form of the LayerNorm found ("LayerNormalization", "decomposed",
        "SkipLayerNormalization" or "EmbedLayerNormalization").
    encoder_inputs : tuple of str
        The encoder's inputs, ``inputs_embeds`` first.
    removed_inputs : tuple of str
        The original inputs the encoder no longer takes (the ids, the token types).
    max_difference : float
        The largest difference between the layer and the graph's embeddings on the probes.
    """

    encoder: Path
    layer_dir: Path
    model_type: str
    position_rule: str
    layer_norm: str
    encoder_inputs: tuple[str, ...]
    removed_inputs: tuple[str, ...]
    max_difference: float


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise ImportError(
            "splitting an ONNX model needs the onnx package: pip install onnx (or bertembed[onnx])"
        ) from None
    return onnx


def _tolerance(table_dtype: np.dtype) -> float:
    """How far the split layer may be from the graph's embeddings (the dtype registry's tolerance of
    the token table's dtype; the splitter reads float16, float32 and float64 tables)."""
    entry = dtypes.of_array(np.dtype(table_dtype))
    if entry is None or entry.tolerance is None:
        raise KeyError(np.dtype(table_dtype))
    return entry.tolerance


def _weights_bytes(model: Any) -> int:
    return sum(len(t.raw_data) for t in model.graph.initializer)


def split_model(model: str | os.PathLike[str] | Any, out_dir: str | os.PathLike[str]) -> SplitResult:
    """Split a whole-model ONNX graph into an embedding layer and ``encoder.onnx``.

    Parameters
    ----------
    model : path or onnx.ModelProto
        The whole model: inputs ``input_ids`` (any name), the attention mask,
        optionally token types. A file's external data (models over 2 GB) is
        read from beside it. A ``ModelProto`` is copied, never changed.
    out_dir : path
        Created if needed. Receives ``encoder.onnx`` (plus
        ``encoder.onnx.data`` when the weights exceed 1 GiB), ``config.json``
        and ``model.safetensors``; existing files of those names are replaced
        (on POSIX a layer that maps the old ``model.safetensors`` keeps
        reading it; on Windows a live map of it is refused, see Raises).

    Returns
    -------
    SplitResult

    Raises
    ------
    ImportError
        The ``onnx`` package is not installed.
    ValueError
        The embedding subgraph is not found, or not one this layer computes
        exactly (the message names the node and why): positions computed from
        the attention mask, the ids read after the embeddings other than by
        their shape, a lookup's rows or a partial sum read elsewhere (a tied
        output table), a quantised table with a per-axis scale; or the layer's
        check failed.
    PermissionError
        On Windows, a live layer maps ``OUT_DIR/model.safetensors`` (in
        this process: refused before any work; in another one: when the
        rename is refused, before any file of `out_dir` is replaced). The
        message names the file and what to do.

    Examples
    --------
    >>> from bertembed import BertEmbeddings
    >>> from bertembed.onnx import split_model
    >>> result = split_model("model.onnx", "split/")  # doctest: +SKIP
    >>> result.encoder_inputs, result.position_rule  # doctest: +SKIP
    (('inputs_embeds', 'attention_mask'), 'absolute')
    >>> layer = BertEmbeddings.from_pretrained("split/")  # doctest: +SKIP
    >>> import onnxruntime  # doctest: +SKIP
    >>> encoder = onnxruntime.InferenceSession("split/encoder.onnx")  # doctest: +SKIP
    >>> hidden = encoder.run(None, {"inputs_embeds": layer(ids), "attention_mask": mask})[0]  # doctest: +SKIP
    """
    onnx = _import_onnx()
    from ._checkpoints import mapped, save
    from ._layer import BertEmbeddings
    from ._onnx import cut, layer, layernorm, lookups, rules
    from ._onnx.graph import Graph

    save.check_destination(Path(out_dir))  # (Windows: a live layer maps the weights there)
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        external = False
    else:
        path = Path(model)
        proto = onnx.load(str(path), load_external_data=False)
        external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
        if external:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(proto, str(path.resolve().parent))
    graph = Graph(proto)
    ln = None
    for node in graph.nodes:
        ln = layernorm.match(graph, node)
        if ln is not None:
            break
    if ln is None:
        raise ValueError(
            "no LayerNorm found (LayerNormalization, its decomposed form, SkipLayerNormalization or "
            "EmbedLayerNormalization): the embeddings of this graph are not a sum of lookups "
            "followed by a LayerNorm"
        )
    found = lookups.find(graph, ln)
    roles = rules.find_roles(graph, found)
    tensors, config = layer.tables(ln, found, roles)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    staging = out / ".split-onnx.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        layer.write(staging, tensors, config)
        del tensors
        emb = BertEmbeddings.from_pretrained(staging)
        difference = layer.check(graph, ln, roles, emb, config, _tolerance(roles.token.table.dtype))
        del emb
        removed = tuple(n for n in (roles.ids_input, roles.segment_input) if n)
        encoder = cut.cut(graph, ln, found, roles)
        big = external or _weights_bytes(encoder) > EXTERNAL_DATA_BYTES
        encoder_path = staging / "encoder.onnx"
        if big:
            onnx.save_model(
                encoder,
                str(encoder_path),
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location="encoder.onnx.data",
                size_threshold=1024,
            )
        else:
            onnx.save_model(encoder, str(encoder_path))
        inputs = tuple(i.name for i in encoder.graph.input)
        # The file a live layer may map goes first: if it cannot be replaced, nothing is.
        written = sorted(os.listdir(staging), key=lambda name: name != save.WEIGHTS_NAME)
        for name in written:
            mapped.replace(staging / name, out / name)
        for stale in ("encoder.onnx.data",):
            if stale not in written:
                (out / stale).unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return SplitResult(
        encoder=out / "encoder.onnx",
        layer_dir=out,
        model_type=config["model_type"],
        position_rule=roles.rule,
        layer_norm=ln.kind,
        encoder_inputs=inputs,
        removed_inputs=removed,
        max_difference=difference,
    )
