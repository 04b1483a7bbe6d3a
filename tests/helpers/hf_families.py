"""Small random checkpoints of every family, saved by transformers, and its own embeddings of them.

Helpers for the family tests (they need torch and transformers):

- :func:`make_checkpoint` builds a small random model of a ``model_type``,
  randomises every weight (LayerNorm weight and bias, the padding rows, the
  position table included, so that any mistake shows) and saves it with
  ``save_pretrained`` (safetensors);
- :func:`batches` gives right- and left-padded batches with the config's pad id,
  with and without token types;
- :func:`reference` calls ``model.embeddings(...)`` the way the family's own
  ``Model.forward`` calls it (transformers 5.24), see :data:`CALLS`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from bertembed._checkpoints.families import EmbeddingSpec, embedding_spec

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers.utils.logging.disable_progress_bar()

#: Tolerances against transformers' modules, per torch dtype of the model.
ATOL = {torch.float32: 1e-5, torch.float64: 1e-12}

#: DebertaLayerNorm (deberta v1) normalises in float32 even in a float64 model
#: (``hidden_states.float()``), so transformers' own float64 result carries
#: float32 rounding; the twin and bertembed normalise in float64.
FLOAT32_LAYERNORM = {"deberta", "deberta-no-types"}


def atol_for(variant: str, dtype: torch.dtype) -> float:
    """The tolerance for `variant` built with `dtype` (float32's for float32 LayerNorms)."""
    return ATOL[torch.float32] if variant in FLOAT32_LAYERNORM else ATOL[dtype]


def print_measured(measured: Mapping[str, float], title: str) -> None:
    """The largest differences a test module measured (shown with ``pytest -s``)."""
    if measured:
        print(f"\n{title}:")
        for key in sorted(measured):
            print(f"  {key:44s} {measured[key]:.3g}")


def report_measured(measured: Mapping[str, float], title: str) -> Any:
    """A module-scoped autouse fixture that prints `measured` when the module's tests are done.

    Assign it in a test module: ``_report = report_measured(MEASURED, "max abs difference, ...")``.
    """

    @pytest.fixture(scope="module", autouse=True)
    def _report() -> Iterator[None]:
        yield
        print_measured(measured, title)

    return _report


_BERT = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 37,
    "max_position_embeddings": 40,
    "type_vocab_size": 3,
    # Not transformers' defaults, so that a key read wrongly (or a default
    # used in its place) shows as a difference.
    "layer_norm_eps": 1e-3,
    "pad_token_id": 5,
}
_ROBERTA = {**_BERT, "pad_token_id": 3, "bos_token_id": 0, "eos_token_id": 2}
_ROTARY = {k: v for k, v in _BERT.items() if k != "max_position_embeddings"}
_LLAMA_LIKE = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 37,
    "pad_token_id": 5,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

#: A small configuration per model type (transformers' config keyword arguments).
SMALL: dict[str, dict[str, Any]] = {
    "bert": _BERT,
    "dpr": _BERT,
    "distilbert": {
        "vocab_size": 99,
        "dim": 32,
        "n_layers": 1,
        "n_heads": 2,
        "hidden_dim": 37,
        "max_position_embeddings": 40,
        "pad_token_id": 5,
    },
    "electra": {**_BERT, "embedding_size": 16},
    "albert": {**_BERT, "embedding_size": 16},
    "convbert": {**_BERT, "embedding_size": 16},
    "rembert": {**_BERT, "input_embedding_size": 16, "output_embedding_size": 24, "bos_token_id": 1, "eos_token_id": 2},
    "splinter": {**_BERT, "question_token_id": 98},
    "big_bird": {**_BERT, "attention_type": "original_full"},
    "megatron-bert": _BERT,
    "bert-generation": {
        **{k: v for k, v in _BERT.items() if k != "type_vocab_size"},
        "bos_token_id": 2,
        "eos_token_id": 1,
    },
    "ernie": {**_BERT, "use_task_id": True, "task_type_vocab_size": 4},
    "nystromformer": {**_BERT, "num_landmarks": 9, "segment_means_seq_len": 9, "conv_kernel_size": 3},
    "yoso": _BERT,
    "mra": _BERT,
    "squeezebert": {
        **_BERT,
        "embedding_size": 32,
        "intermediate_size": 38,
        "q_groups": 2,
        "k_groups": 2,
        "v_groups": 2,
        "post_attention_groups": 2,
        "intermediate_groups": 2,
        "output_groups": 2,
    },
    "roc_bert": {
        **_BERT,
        "concat_input": False,
        "enable_shape": False,
        "enable_pronunciation": False,
        "pronunciation_vocab_size": 11,
        "shape_vocab_size": 13,
        "pronunciation_embed_dim": 8,
        "shape_embed_dim": 8,
    },
    "roberta": _ROBERTA,
    "xlm-roberta": _ROBERTA,
    "camembert": _ROBERTA,
    "data2vec-text": _ROBERTA,
    "roberta-prelayernorm": _ROBERTA,
    "xmod": {**_ROBERTA, "languages": ["en_XX", "de_DE"], "default_language": "en_XX"},
    "luke": {**_ROBERTA, "entity_vocab_size": 10, "entity_emb_size": 16},
    "longformer": {**_ROBERTA, "attention_window": 4, "sep_token_id": 2},
    "ibert": _ROBERTA,
    "xlm-roberta-xl": _ROBERTA,
    "mpnet": {**_ROBERTA, "pad_token_id": 1},
    "deberta": {**_BERT, "relative_attention": True, "pos_att_type": ["p2c", "c2p"], "max_relative_positions": -1},
    "deberta-v2": {**_BERT, "relative_attention": True, "pos_att_type": ["p2c", "c2p"], "max_relative_positions": -1},
    "modernbert": {
        **{k: v for k, v in _ROTARY.items() if k not in ("layer_norm_eps", "type_vocab_size")},
        "norm_eps": 1e-3,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "cls_token_id": 1,
        "sep_token_id": 2,
        "max_position_embeddings": 64,
        "local_attention": 4,
    },
    "nomic_bert": _ROTARY,
    "jina_embeddings_v3": {**_ROTARY, "pad_token_id": 3, "bos_token_id": 0, "eos_token_id": 2},
    "gte": _ROTARY,
    "roformer": {**_ROTARY, "embedding_size": 16, "max_position_embeddings": 40},
    "funnel": {
        "vocab_size": 99,
        "d_model": 32,
        "n_head": 2,
        "d_head": 16,
        "d_inner": 37,
        "block_sizes": [1, 1],
        "num_decoder_layers": 1,
        "layer_norm_eps": 1e-3,
        "pad_token_id": 5,
        "architectures": ["FunnelModel"],
    },  # AutoModel has two funnel classes
    "esm": {
        "vocab_size": 33,
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 37,
        "max_position_embeddings": 40,
        "layer_norm_eps": 1e-3,
        "pad_token_id": 1,
        "mask_token_id": 32,
        "emb_layer_norm_before": True,
        "position_embedding_type": "absolute",
    },
    "eurobert": {**_LLAMA_LIKE, "mask_token_id": 3},
    "ultrabert": {**_LLAMA_LIKE, "layer_types": ["full_attention"], "prediction_head_size": 16},
}

#: Families tested more than once, with the config overrides that change their embedding module.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    **{model_type: (model_type, {}) for model_type in SMALL},
    "ernie-no-task": ("ernie", {"use_task_id": False}),
    "mpnet-pad3": ("mpnet", {"pad_token_id": 3}),  # MPNet's position padding id stays 1
    "deberta-v2-v3style": ("deberta-v2", {"position_biased_input": False, "type_vocab_size": 0}),
    "deberta-no-types": ("deberta", {"type_vocab_size": 0}),
    "modernbert-bias": ("modernbert", {"norm_bias": True}),
    "gte-no-types": ("gte", {"type_vocab_size": 0}),
    "esm-rotary": ("esm", {"position_embedding_type": "rotary", "emb_layer_norm_before": False}),
    "roformer-no-embedding-size": ("roformer", {"embedding_size": None}),
}


@dataclass(frozen=True)
class Call:
    """How a family's ``Model.forward`` calls its embedding module.

    path : attribute path from ``model.base_model`` to the module.
    types : "pass" (token_type_ids passed as given; the module fills zeros),
        "zeros" (forward replaces None by zeros first), or None (not passed).
    positions : whether forward passes ``position_ids`` on to the module.
    mask : the module's keyword for the attention mask, or None.
    mask_ones : forward replaces a None mask by ones first (DeBERTa).
    task : forward passes ``task_type_ids`` (ERNIE).
    tuple_out : the module returns (embeddings, scaling) (I-BERT).
    project : attribute path from ``model.base_model`` of the Linear that the
        model applies to the module's output before the encoder, when
        ``embedding_size != hidden_size`` (not part of the embedding module).
    """

    path: str = "embeddings"
    types: str | None = "pass"
    positions: bool = True
    mask: str | None = None
    mask_ones: bool = False
    task: bool = False
    tuple_out: bool = False
    project: str | None = None


_ZEROS = Call(types="zeros")
_PROJECTED = "embeddings_project"
_MAPPED_IN = "encoder.embedding_hidden_mapping_in"

#: transformers 5.24, read from each ``modeling_<family>.py``'s ``Model.forward``.
CALLS: dict[str, Call] = {
    # token_type_ids, position_ids passed as given (None: the module's own defaults)
    "bert": Call(),
    "roberta": Call(),
    "xlm-roberta": Call(),
    "camembert": Call(),
    "data2vec-text": Call(),
    "roberta-prelayernorm": Call(),
    "xmod": Call(),
    "xlm-roberta-xl": Call(),
    "big_bird": Call(),
    "roc_bert": Call(),
    "nomic_bert": Call(),
    "jina_embeddings_v3": Call(),
    "gte": Call(),
    "electra": Call(project=_PROJECTED),
    "albert": Call(project=_MAPPED_IN),
    "dpr": Call(path="bert_model.embeddings"),
    "ernie": Call(task=True),
    # forward replaces token_type_ids=None by zeros before the call
    "megatron-bert": _ZEROS,
    "splinter": _ZEROS,
    "squeezebert": _ZEROS,
    "luke": _ZEROS,
    "longformer": _ZEROS,
    "nystromformer": _ZEROS,
    "yoso": _ZEROS,
    "mra": _ZEROS,
    "rembert": Call(types="zeros", project=_MAPPED_IN),
    "convbert": Call(types="zeros", project=_PROJECTED),
    "ibert": Call(types="zeros", tuple_out=True),
    "roformer": Call(types="zeros", positions=False, project=_PROJECTED),
    "deberta": Call(types="zeros", mask="mask", mask_ones=True),
    "deberta-v2": Call(types="zeros", mask="mask", mask_ones=True),
    # no token types
    "distilbert": Call(types=None),
    "mpnet": Call(types=None),
    "bert-generation": Call(types=None),
    "modernbert": Call(types=None, positions=False),
    "funnel": Call(types=None, positions=False),
    "esm": Call(types=None, mask="attention_mask"),
    "eurobert": Call(path="embed_tokens", types=None, positions=False),
    "ultrabert": Call(path="embed_tokens", types=None, positions=False),
}


def small_config(model_type: str, **overrides: Any) -> transformers.PreTrainedConfig:
    """A small transformers config of `model_type` (see :data:`SMALL`) with `overrides`."""
    return transformers.AutoConfig.for_model(model_type, **{**SMALL[model_type], **overrides})


@torch.no_grad()
def _randomise(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for param in model.parameters():
        if param.is_floating_point():
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float64).to(param.dtype))


def make_checkpoint(
    model_type: str,
    directory: str | os.PathLike[str],
    *,
    torch_dtype: torch.dtype = torch.float32,
    seed: int = 0,
    model_class: type | None = None,
    **config_overrides: Any,
) -> torch.nn.Module:
    """A small random model of `model_type`, saved in `directory` by ``save_pretrained``.

    Every floating parameter is drawn from N(0, 1) (so LayerNorm weights and
    biases, padding rows and position tables are all random). The model is
    returned in eval mode, in `torch_dtype`. `model_class` defaults to
    ``AutoModel`` (the base model: tensors without a prefix); a task class
    (e.g. ``AutoModelForMaskedLM``) saves them under ``base_model_prefix``.
    """
    config = small_config(model_type, **config_overrides)
    model_class = transformers.AutoModel if model_class is None else model_class
    if isinstance(model_class, type) and issubclass(model_class, transformers.PreTrainedModel):
        model = model_class(config)
    else:
        model = model_class.from_config(config)
    _randomise(model, seed)
    model = model.to(torch_dtype).eval()
    if model_type == "xmod":
        model.base_model.set_default_language("en_XX")
    model.save_pretrained(directory)
    return model


def load_tensors(directory: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The saved tensors, via ``safetensors.numpy`` (bfloat16 needs ml_dtypes, imported here)."""
    try:
        import ml_dtypes  # noqa: F401  (registers the bfloat16 NumPy dtype)
    except ImportError:
        pass
    from safetensors.numpy import load_file

    return load_file(str(Path(directory) / "model.safetensors"))


def load_config(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The config.json that ``save_pretrained`` wrote."""
    return json.loads((Path(directory) / "config.json").read_text(encoding="utf-8"))


def _config_dict(config: Any) -> Mapping[str, Any]:
    return config if isinstance(config, Mapping) else config.to_dict()


def batches(config: Any, *, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
    """Batches of (input_ids, token_type_ids or None, attention_mask), int64, shape (3, 9).

    Right-padded and left-padded (rows of 9, 5 and 1 real tokens), each with
    and without token types (token types only for a family with a segment
    table), plus one batch without padding. Pads use the config's
    ``pad_token_id`` (0 when it has none); real tokens never equal it.
    """
    cfg = _config_dict(config)
    spec: EmbeddingSpec = embedding_spec(cfg)
    rng = np.random.default_rng(seed)
    vocab = int(cfg["vocab_size"])
    pad = cfg.get("pad_token_id")
    pad = 0 if pad is None else int(pad)
    n_types = int(cfg.get("type_vocab_size", 2)) if spec.segment is not None else 0
    shape = (3, 9)
    ids = rng.integers(0, vocab - 1, size=shape)
    ids = ids + (ids >= pad)  # every id but the pad id
    ids[0, 0], ids[0, -1] = 0 if pad != 0 else 1, vocab - 1 if pad != vocab - 1 else vocab - 2
    lengths = np.array([9, 5, 1])
    right = np.arange(shape[1])[None, :] < lengths[:, None]
    out = []
    for mask in (right, right[:, ::-1]):
        padded = np.where(mask, ids, pad).astype(np.int64)
        m = mask.astype(np.int64)
        if n_types:
            types = np.where(mask, rng.integers(0, n_types, size=shape), 0).astype(np.int64)
            out.append((padded, types, m))
        out.append((padded, None, m))
    full_types = rng.integers(0, n_types, size=shape).astype(np.int64) if n_types else None
    out.append((ids.astype(np.int64), full_types, np.ones(shape, np.int64)))
    return out


def _submodule(model: torch.nn.Module, path: str) -> torch.nn.Module:
    module = model.base_model
    for part in path.split("."):
        module = getattr(module, part)
    return module


def embedding_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module ``reference`` calls."""
    return _submodule(model, CALLS[model.config.model_type].path)


@torch.no_grad()
def project(model: torch.nn.Module, embeddings: np.ndarray) -> np.ndarray:
    """`embeddings` through the Linear the model applies after its embedding module, if it has one."""
    call = CALLS[model.config.model_type]
    if call.project is None or not _has(model, call.project):
        return embeddings
    return _submodule(model, call.project)(torch.from_numpy(embeddings)).numpy()


def _has(model: torch.nn.Module, path: str) -> bool:
    try:
        _submodule(model, path)
    except AttributeError:
        return False
    return True


def _t(array: Any) -> torch.Tensor | None:
    return None if array is None else torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))


@torch.no_grad()
def reference(
    model: torch.nn.Module,
    input_ids: np.ndarray,
    token_type_ids: np.ndarray | None,
    attention_mask: np.ndarray | None,
    *,
    position_ids: np.ndarray | None = None,
    task_type_ids: np.ndarray | None = None,
) -> np.ndarray:
    """transformers' embeddings of the batch, as the family's ``Model.forward`` computes them.

    Returns the module's output as a NumPy array in the model's dtype.
    """
    call = CALLS[model.config.model_type]
    module = embedding_module(model)
    ids = _t(input_ids)
    if call.path == "embed_tokens":
        return module(ids).numpy()
    kwargs: dict[str, Any] = {"input_ids": ids}
    if call.types is None:
        if token_type_ids is not None:
            raise ValueError(f"{model.config.model_type} takes no token_type_ids")
    elif token_type_ids is None and call.types == "zeros":
        kwargs["token_type_ids"] = torch.zeros_like(ids)
    else:
        kwargs["token_type_ids"] = _t(token_type_ids)
    if call.positions:
        kwargs["position_ids"] = _t(position_ids)
    if call.task:
        kwargs["task_type_ids"] = _t(task_type_ids)
    if call.mask is not None:
        mask = _t(attention_mask)
        if mask is None and call.mask_ones:
            mask = torch.ones_like(ids)
        kwargs[call.mask] = mask
    out = module(**kwargs)
    if call.tuple_out:
        out = out[0]
    return out.numpy()


@torch.no_grad()
def first_hidden_state(
    model: torch.nn.Module, input_ids: np.ndarray, token_type_ids: np.ndarray | None, attention_mask: np.ndarray
) -> np.ndarray:
    """``hidden_states[0]`` of the whole model's forward (the encoder's input), for cross-checking
    that :func:`reference` calls the module as ``Model.forward`` does."""
    kwargs: dict[str, Any] = {"input_ids": _t(input_ids), "attention_mask": _t(attention_mask)}
    if token_type_ids is not None:
        kwargs["token_type_ids"] = _t(token_type_ids)
    out = model(**kwargs, output_hidden_states=True)
    return out.hidden_states[0].numpy()
