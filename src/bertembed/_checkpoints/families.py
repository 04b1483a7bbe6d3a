"""What the embedding module of each BERT-family ``model_type`` computes, as data.

transformers' ``models/<family>/modeling_<family>.py`` embedding modules (in
eval mode, dropout a no-op) are the specification. Each supported
``model_type`` is one :class:`Family` record below; :func:`embedding_spec`
reads a checkpoint's ``config.json`` through that record (one code path, no
per-family branch) and returns an :class:`EmbeddingSpec`, or raises a
``ValueError`` that names the model type and what is not supported. It never
falls back to another family.

Every supported module computes, for token ``s`` of row ``b``::

    E = token[input_ids] + segment[token_type_ids] + position[position_ids]
        + task[task_type_ids]                      (each term only if present)
    E = LayerNorm(E) * ln_weight + ln_bias          (if present; bias optional)
    E = E * attention_mask[..., None]               (only if zero_masked_rows)

with ``token_type_ids`` and ``task_type_ids`` zero when not given, and
``position_ids`` from the position rule when not given:

- ``"absolute"``: ``s + position_offset``;
- ``"padding"`` (RoBERTa and fairseq descendants): ``padding_idx`` for a pad
  token, ``padding_idx + 1 + (number of non-pad tokens before s in the row)``
  otherwise, whatever side the padding is on;
- ``"none"``: no position term (rotary or relative positions act inside
  attention, which is not part of the input embeddings).

Supported model types
---------------------
============================ ==========================================================================
model_type                   embedding module (transformers 5.24)
============================ ==========================================================================
bert, dpr                    token + segment + absolute position, LayerNorm
distilbert                   token + absolute position, LayerNorm (eps fixed at 1e-12)
electra, albert, convbert    bert's, tables of width ``embedding_size`` (the model projects to
                             hidden_size *after* the embedding module)
rembert                      bert's, tables of width ``input_embedding_size`` (projected after it)
splinter, big_bird           bert's (big_bird: ``rescale_embeddings`` refused)
megatron-bert                token + segment + absolute position, no LayerNorm
bert-generation              token + absolute position, LayerNorm
ernie                        bert's + task-type table (row 0 unless task_type_ids) when ``use_task_id``
nystromformer, yoso, mra     bert's, positions ``s + 2``
squeezebert                  bert's (``embedding_size`` must equal ``hidden_size``)
roberta, xlm-roberta,        token + segment + position by the padding rule, LayerNorm
camembert, data2vec-text,
roberta-prelayernorm, xmod,
luke, longformer, ibert
xlm-roberta-xl               token + segment + padding-rule position, no LayerNorm
mpnet                        token + padding-rule position (padding_idx fixed at 1), LayerNorm
deberta, deberta-v2          token + absolute position (if ``position_biased_input``) + segment (if
                             ``type_vocab_size`` > 0), LayerNorm, rows times the attention mask
modernbert                   token, LayerNorm (bias only if ``norm_bias``)
nomic_bert,                  token + segment, LayerNorm
jina_embeddings_v3
gte                          token + segment (if ``type_vocab_size`` > 0), LayerNorm
roformer                     token + segment, LayerNorm (width ``embedding_size``, else hidden_size)
funnel                       token, LayerNorm
esm                          token + padding-rule position (``position_embedding_type`` absolute) or
                             none (rotary), LayerNorm if ``emb_layer_norm_before``, rows times the mask
eurobert, ultrabert          token only (no embedding module: the model's input is ``embed_tokens``)
roc_bert                     bert's, only with ``concat_input``, ``enable_shape`` and
                             ``enable_pronunciation`` all false
============================ ==========================================================================

Refused (a ValueError naming it): a ``position_embedding_type`` other than
``"absolute"`` for a family with a position table (transformers 5 no longer
reads the key for most of them, but a checkpoint that carries
``relative_key`` was trained with relative attention: its absolute table is
not what it was trained with); DeBERTa's ``embed_proj`` (``embedding_size !=
hidden_size``); squeezebert with ``embedding_size != hidden_size``; BigBird's
``rescale_embeddings``; I-BERT's ``quant_mode``; ESM's ``token_dropout`` (a
per-row rescaling by the share of mask tokens); RoCBert's shape and
pronunciation inputs and its ``map_inputs_layer``; a padding rule without a
``pad_token_id``.

Model types checked and left out (transformers 5.24)
----------------------------------------------------
=================================== ===========================================================
model_type                          why not
=================================== ===========================================================
layoutlm, layoutlmv2, layoutlmv3,   2-D position embeddings of ``bbox`` (an extra input), or
lilt, bros, markuplm, udop          XPath / layout embeddings
mobilebert                          trigram concatenation, a Linear projection and NoNorm
canine                              hash embeddings of code points, then a strided convolution
fnet                                a Linear projection inside the embedding module
tapas                               seven token-type tables, positions reset per table cell
xlm, flaubert                       no embedding module; language embeddings of ``langs``
reformer                            axial position embeddings
visual_bert, lxmert, vilt, flava,   visual features are part of the embeddings
bridgetower, ...
perceiver                           not a sum of lookups (cross-attention to latents)
modernbert-decoder, decoder LMs     not encoders
=================================== ===========================================================

Notes: xmod's embedding module is RoBERTa's (its language adapters are in the
encoder layers); luke's word embeddings are this module, its entity
embeddings are a separate module fed by entity ids; longformer and big_bird
pad the batch on the right to a block or window multiple before the module,
which changes no earlier token's embedding; electra, albert, convbert,
roformer and rembert project the module's output to ``hidden_size`` in the
model, outside the embedding module. Real nomic_bert and jina_embeddings_v3
checkpoints (and transformers 5 when it saves them) name the LayerNorm
``emb_ln``: both names are accepted.

Model types that are only tokenizers in transformers (bertweet, herbert,
phobert, bert-japanese, barthez, mluke, ...) save ``model_type`` "bert",
"roberta" or "luke" and are covered by those records. ``nomic_bert`` is in
transformers 5.24 (``NomicBertModel``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import CheckpointError, short

#: Position rules (see the module docstring).
ABSOLUTE = "absolute"
PADDING = "padding"
NONE = "none"

#: Largest integer config value read (sizes, widths, ids).
MAX_CONFIG_INT = 2**31 - 1

#: The family assumed for a bare weights file without config.json.
BARE_FILE_MODEL_TYPE = "bert"


@dataclass(frozen=True)
class EmbeddingSpec:
    """What one checkpoint's embedding module computes (see the module docstring).

    Tensor names are relative to a model prefix: the first of `prefixes` under
    which `token` exists is the checkpoint's prefix.
    """

    model_type: str
    prefixes: tuple[str, ...]
    token: str
    position: str | None
    segment: str | None
    task: str | None
    ln_weight: tuple[str, ...] | None
    ln_bias: tuple[str, ...] | None
    ln_eps: float
    position_rule: str
    position_offset: int
    padding_idx: int | None
    zero_masked_rows: bool
    width: int | None
    #: The config key `padding_idx` was read from (None: the family fixes it, or no padding rule).
    padding_key: str | None = None


# --------------------------------------------------------------------------
# The records and their parts.


@dataclass(frozen=True)
class Key:
    """A config.json key, read with transformers' default when it is absent.

    `aliases` are other names transformers maps onto it (a config class's
    ``attribute_map``). With `fallback`, an absent or null value means the
    value of that other key (RoFormer's ``embedding_size``).
    """

    name: str
    default: Any
    aliases: tuple[str, ...] = ()
    fallback: Key | None = None


@dataclass(frozen=True)
class Choice:
    """A config value that selects an outcome; any other value is refused with `why`."""

    key: Key
    options: tuple[tuple[Any, Any], ...]
    why: str


@dataclass(frozen=True)
class Refusal:
    """A config value that must be one of `allowed`; otherwise refused, saying `what` it does."""

    key: Key
    allowed: tuple[Any, ...]
    what: str


_POSITION_TYPE = Key("position_embedding_type", "absolute")
_NOT_ABSOLUTE = (
    "only 'absolute' position embeddings are added to the input embeddings; a checkpoint "
    "trained with relative or rotary positions needs them inside attention"
)


def _only_absolute(rule: str) -> Choice:
    return Choice(_POSITION_TYPE, (("absolute", rule),), _NOT_ABSOLUTE)


@dataclass(frozen=True)
class Family:
    """One model type's embedding module, as data (interpreted by :func:`embedding_spec`).

    Parameters
    ----------
    model_type : str
        ``config.json``'s ``model_type``.
    base : str
        transformers' ``base_model_prefix`` (the prefix of task-head checkpoints).
    width : Key
        The config key giving the tables' width.
    position : str or None
        The position table; None when the module has none (then `positions` is unused).
    positions : Choice
        Selects the position rule from the config (by default: ``position_embedding_type``
        must be "absolute", and the rule is ``"absolute"``).
    padding_idx : Key, int or None
        The padding id of the ``"padding"`` rule (a config key or a constant).
    segment_if, task_if, ln_if, ln_bias_if : Key or None
        The term exists only when this config value is true (or > 0).
    same_width : (Key, str) or None
        A key that must equal the width, and what a difference would mean.
    """

    model_type: str
    base: str
    token: str = "embeddings.word_embeddings.weight"
    width: Key = field(default_factory=lambda: Key("hidden_size", 768))
    position: str | None = "embeddings.position_embeddings.weight"
    positions: Choice = field(default_factory=lambda: _only_absolute(ABSOLUTE))
    position_offset: int = 0
    padding_idx: Key | int | None = None
    segment: str | None = "embeddings.token_type_embeddings.weight"
    segment_if: Key | None = None
    task: str | None = None
    task_if: Key | None = None
    ln_weight: tuple[str, ...] | None = ("embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma")
    ln_bias: tuple[str, ...] | None = ("embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta")
    ln_if: Key | None = None
    ln_bias_if: Key | None = None
    ln_eps: Key | float = field(default_factory=lambda: Key("layer_norm_eps", 1e-12))
    same_width: tuple[Key, str] | None = None
    refusals: tuple[Refusal, ...] = ()
    zero_masked_rows: bool = False
    extra_prefixes: tuple[str, ...] = ()


def _eps(default: float) -> Key:
    return Key("layer_norm_eps", default)


def _hidden(default: int) -> Key:
    return Key("hidden_size", default)


def _bert_like(model_type: str, base: str, **kw: Any) -> Family:
    """Token + segment + absolute position, LayerNorm (BertEmbeddings and its copies)."""
    return Family(model_type, base, **kw)


def _roberta_like(model_type: str, base: str, pad_default: int | None = 1, **kw: Any) -> Family:
    """BERT's sum with positions by the padding rule (RobertaEmbeddings and its copies)."""
    kw.setdefault("padding_idx", Key("pad_token_id", pad_default))
    return Family(model_type, base, positions=_only_absolute(PADDING), **kw)


def _rotary(model_type: str, base: str, **kw: Any) -> Family:
    """No position table: positions are rotary, inside attention."""
    return Family(model_type, base, position=None, **kw)


_NO_LN: dict[str, Any] = {"ln_weight": None, "ln_bias": None}
_EMB_LN = {
    "ln_weight": ("embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma", "emb_ln.weight"),
    "ln_bias": ("embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta", "emb_ln.bias"),
}


def _deberta(model_type: str, hidden: int) -> Family:
    return Family(
        model_type,
        "deberta",
        width=Key("embedding_size", None, fallback=_hidden(hidden)),
        positions=Choice(
            Key("position_biased_input", True),
            ((True, ABSOLUTE), (False, NONE)),
            "position_biased_input must be true or false",
        ),
        segment_if=Key("type_vocab_size", 0),
        ln_eps=_eps(1e-7),
        same_width=(
            _hidden(hidden),
            "embed_proj (a Linear from embedding_size to hidden_size, inside the embedding module) is not computed",
        ),
        zero_masked_rows=True,
    )


_RECORDS: tuple[Family, ...] = (
    _bert_like("bert", "bert"),
    _bert_like(
        "dpr",
        "bert_model",
        extra_prefixes=(
            "ctx_encoder.bert_model.",
            "question_encoder.bert_model.",
            "span_predictor.encoder.bert_model.",
        ),
    ),
    _bert_like("distilbert", "distilbert", width=Key("dim", 768, aliases=("hidden_size",)), segment=None, ln_eps=1e-12),
    _bert_like("electra", "electra", width=Key("embedding_size", 128)),
    _bert_like("albert", "albert", width=Key("embedding_size", 128)),
    _bert_like("convbert", "convbert", width=Key("embedding_size", 768)),
    _bert_like("rembert", "rembert", width=Key("input_embedding_size", 256)),
    _bert_like("splinter", "splinter"),
    _bert_like(
        "big_bird",
        "bert",
        refusals=(
            Refusal(
                Key("rescale_embeddings", False),
                (False,),
                "rescale_embeddings=true multiplies the token embeddings by sqrt(hidden_size)",
            ),
        ),
    ),
    _bert_like("megatron-bert", "bert", width=_hidden(1024), **_NO_LN),
    _bert_like("bert-generation", "bert", width=_hidden(1024), segment=None),
    _bert_like("ernie", "ernie", task="embeddings.task_type_embeddings.weight", task_if=Key("use_task_id", False)),
    _bert_like("nystromformer", "nystromformer", position_offset=2, ln_eps=_eps(1e-5)),
    _bert_like("yoso", "yoso", position_offset=2),
    _bert_like("mra", "mra", position_offset=2, ln_eps=_eps(1e-5)),
    _bert_like(
        "squeezebert",
        "transformer",
        width=Key("embedding_size", 768),
        same_width=(
            _hidden(768),
            "its LayerNorm has hidden_size features and its tables embedding_size "
            "(transformers cannot run such a model either)",
        ),
    ),
    _bert_like(
        "roc_bert",
        "roc_bert",
        refusals=(
            Refusal(
                Key("concat_input", True),
                (False,),
                "concat_input=true concatenates word, shape and pronunciation embeddings into "
                "map_inputs_layer, a Linear",
            ),
            Refusal(
                Key("enable_shape", True),
                (False,),
                "enable_shape=true averages in shape embeddings of input_shape_ids, an extra input",
            ),
            Refusal(
                Key("enable_pronunciation", True),
                (False,),
                "enable_pronunciation=true averages in pronunciation embeddings of "
                "input_pronunciation_ids, an extra input",
            ),
        ),
    ),
    _roberta_like("roberta", "roberta"),
    _roberta_like("xlm-roberta", "roberta"),
    _roberta_like("camembert", "roberta"),
    _roberta_like("data2vec-text", "data2vec_text"),
    _roberta_like("roberta-prelayernorm", "roberta_prelayernorm"),
    _roberta_like("xmod", "roberta"),
    _roberta_like("luke", "luke"),
    _roberta_like("longformer", "longformer"),
    _roberta_like(
        "ibert",
        "ibert",
        refusals=(
            Refusal(
                Key("quant_mode", False),
                (False,),
                "quant_mode=true runs integer-only quantised embeddings and LayerNorm",
            ),
        ),
    ),
    _roberta_like("xlm-roberta-xl", "roberta", width=_hidden(2560), **_NO_LN),
    _roberta_like("mpnet", "mpnet", padding_idx=1, segment=None),
    _deberta("deberta", 768),
    _deberta("deberta-v2", 1536),
    _rotary(
        "modernbert",
        "model",
        token="embeddings.tok_embeddings.weight",
        segment=None,
        ln_weight=("embeddings.norm.weight",),
        ln_bias=("embeddings.norm.bias",),
        ln_bias_if=Key("norm_bias", False),
        ln_eps=Key("norm_eps", 1e-5),
    ),
    _rotary("nomic_bert", "nomic_bert", **_EMB_LN),
    _rotary("jina_embeddings_v3", "roberta", width=_hidden(1024), ln_eps=_eps(1e-5), **_EMB_LN),
    _rotary("gte", "gte", segment_if=Key("type_vocab_size", 1), extra_prefixes=("new.",)),
    _rotary("roformer", "roformer", width=Key("embedding_size", None, fallback=_hidden(768))),
    _rotary(
        "funnel",
        "funnel",
        width=Key("d_model", 768, aliases=("hidden_size",)),
        segment=None,
        ln_weight=("embeddings.layer_norm.weight",),
        ln_bias=("embeddings.layer_norm.bias",),
        ln_eps=_eps(1e-9),
    ),
    Family(
        "esm",
        "esm",
        positions=Choice(
            _POSITION_TYPE,
            (("absolute", PADDING), ("rotary", NONE)),
            "ESM adds 'absolute' position embeddings or none ('rotary')",
        ),
        padding_idx=Key("pad_token_id", None),
        segment=None,
        ln_weight=("embeddings.layer_norm.weight",),
        ln_bias=("embeddings.layer_norm.bias",),
        ln_if=Key("emb_layer_norm_before", None),
        refusals=(
            Refusal(
                Key("token_dropout", False),
                (False,),
                "token_dropout=true zeroes mask tokens and rescales every row by the share of mask tokens in it",
            ),
        ),
        zero_masked_rows=True,
    ),
    _rotary("eurobert", "model", token="embed_tokens.weight", segment=None, **_NO_LN),
    _rotary(
        "ultrabert",
        "model",
        token="embed_tokens.weight",
        width=_hidden(4096),
        segment=None,
        extra_prefixes=("ultrabert.",),
        **_NO_LN,
    ),
)

FAMILIES: Mapping[str, Family] = {f.model_type: f for f in _RECORDS}

#: Every supported ``model_type``, sorted.
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(FAMILIES))


# --------------------------------------------------------------------------
# The interpreter.

_MISSING = object()


class _Reader:
    """Reads config values for one family, raising ValueErrors that name the source and model type."""

    def __init__(self, config: Mapping[str, Any], source: str, model_type: str) -> None:
        self.config = config
        self.where = f"{source}: model_type {model_type!r}"

    def error(self, message: str) -> CheckpointError:
        return CheckpointError(f"{self.where}: {message}")

    def raw(self, key: Key) -> Any:
        for name in (key.name, *key.aliases):
            value = self.config.get(name, _MISSING)
            if value is not _MISSING:
                if value is None and key.fallback is not None:
                    break
                return value
        if key.fallback is not None:
            return self.raw(key.fallback)
        return key.default

    def name_of(self, key: Key) -> str:
        for name in (key.name, *key.aliases):
            if name in self.config:
                return name
        return key.name if key.fallback is None else self.name_of(key.fallback)

    def integer(self, key: Key, *, minimum: int = 0) -> int:
        value = self.raw(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"{self.name_of(key)} must be an integer >= {minimum}, got {short(value)}")
        if value > MAX_CONFIG_INT:
            raise self.error(f"{self.name_of(key)} is {short(value)}, more than the largest supported (2**31 - 1)")
        return value

    def present(self, key: Key | None) -> bool:
        """Whether a term guarded by `key` exists (no key: always)."""
        if key is None:
            return True
        value = self.raw(key)
        if value is None:
            return False
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value > MAX_CONFIG_INT:
            raise self.error(f"{self.name_of(key)} is {short(value)}, more than the largest supported (2**31 - 1)")
        if isinstance(value, int) and value >= 0:
            return value > 0
        raise self.error(f"{self.name_of(key)} must be true/false or a count >= 0, got {short(value)}")

    def eps(self, key: Key | float) -> float:
        value = self.raw(key) if isinstance(key, Key) else key
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an int beyond float's range
                number = None
        if number is None or not math.isfinite(number) or number <= 0:
            name = self.name_of(key) if isinstance(key, Key) else "layer norm epsilon"
            raise self.error(f"{name} must be a finite number > 0, got {short(value)}")
        return number

    def choose(self, choice: Choice) -> Any:
        value = self.raw(choice.key)
        for option, outcome in choice.options:
            if type(option) is type(value) and option == value:
                return outcome
        allowed = ", ".join(repr(option) for option, _ in choice.options)
        raise self.error(
            f"{self.name_of(choice.key)}={short(value)} is not supported (supported: {allowed}): {choice.why}"
        )

    def check(self, refusal: Refusal) -> None:
        value = self.raw(refusal.key)
        if not any(type(a) is type(value) and a == value for a in refusal.allowed):
            raise self.error(f"{refusal.what}, which is not supported")


def _prefixes(family: Family) -> tuple[str, ...]:
    ordered = ("", f"{family.base}.", *family.extra_prefixes, "model.")
    return tuple(dict.fromkeys(ordered))


def embedding_spec(config: Mapping[str, Any], source: str = "config.json") -> EmbeddingSpec:
    """The embedding computation of the checkpoint described by `config`.

    Parameters
    ----------
    config : mapping
        The checkpoint's ``config.json``, parsed. Keys that are absent take
        transformers' defaults for that model type.
    source : str
        Where `config` came from, for error messages.

    Returns
    -------
    EmbeddingSpec

    Raises
    ------
    ValueError
        `config` has no ``model_type``, or one that is not supported, or asks
        for something this model type's embedding module does that is not a
        sum of lookups followed by a LayerNorm (the message names it).

    Examples
    --------
    >>> spec = embedding_spec({"model_type": "xlm-roberta", "hidden_size": 1024, "layer_norm_eps": 1e-5})
    >>> spec.position_rule, spec.padding_idx, spec.ln_eps, spec.width
    ('padding', 1, 1e-05, 1024)
    >>> embedding_spec({"model_type": "deberta-v2", "position_biased_input": False}).position
    >>> embedding_spec({"model_type": "big_bird", "rescale_embeddings": True})
    Traceback (most recent call last):
    ...
    bertembed.CheckpointError: config.json: model_type 'big_bird': rescale_embeddings=true multiplies ...
    """
    if not isinstance(config, Mapping):
        raise CheckpointError(f"{source}: expected a JSON object, got {type(config).__name__}")
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    model_type = config.get("model_type")
    if model_type is None:
        raise CheckpointError(
            f"{source}: no model_type, so the embedding module is unknown (supported model types: {supported})"
        )
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise CheckpointError(f"{source}: model_type {short(model_type)} is not supported (supported: {supported})")

    read = _Reader(config, source, model_type)
    for refusal in family.refusals:
        read.check(refusal)
    width = read.integer(family.width, minimum=1)
    if family.same_width is not None:
        other_key, meaning = family.same_width
        other = read.integer(other_key, minimum=1)
        if other != width:
            raise read.error(
                f"{read.name_of(family.width)}={width} differs from {read.name_of(other_key)}={other}: {meaning}"
            )

    rule = NONE if family.position is None else read.choose(family.positions)
    padding_idx = padding_key = None
    if rule == PADDING:
        pad = family.padding_idx
        if isinstance(pad, Key):
            if read.raw(pad) is None:
                raise read.error(f"{read.name_of(pad)} is null, and the padding position rule needs the padding id")
            padding_idx = read.integer(pad)
            padding_key = read.name_of(pad)
        else:
            padding_idx = pad

    has_ln = family.ln_weight is not None and read.present(family.ln_if)
    has_bias = has_ln and family.ln_bias is not None and read.present(family.ln_bias_if)
    has_segment = family.segment is not None and read.present(family.segment_if)
    has_task = family.task is not None and read.present(family.task_if)
    return EmbeddingSpec(
        model_type=model_type,
        prefixes=_prefixes(family),
        token=family.token,
        position=family.position if rule != NONE else None,
        segment=family.segment if has_segment else None,
        task=family.task if has_task else None,
        ln_weight=family.ln_weight if has_ln else None,
        ln_bias=family.ln_bias if has_bias else None,
        ln_eps=read.eps(family.ln_eps) if has_ln else 0.0,
        position_rule=rule,
        position_offset=family.position_offset if rule == ABSOLUTE else 0,
        padding_idx=padding_idx,
        zero_masked_rows=family.zero_masked_rows,
        width=width,
        padding_key=padding_key,
    )


def bare_file_spec() -> EmbeddingSpec:
    """The spec used for a weights file without config.json: BERT with its defaults.

    Its `width` is None: without config.json the tables' width is whatever the file holds.

    Examples
    --------
    >>> spec = bare_file_spec()
    >>> spec.model_type, spec.position_rule, spec.ln_eps
    ('bert', 'absolute', 1e-12)
    """
    spec = embedding_spec({"model_type": BARE_FILE_MODEL_TYPE}, source="(no config.json)")
    return replace(spec, width=None)


# --------------------------------------------------------------------------
# The position table against the config.

#: Positions the shortest real sequence takes: one token between the two special
#: tokens every family with a position table writes around a sequence (BERT's
#: ``[CLS] ... [SEP]``, RoBERTa's and MPNet's ``<s> ... </s>``, ESM's ``<cls> ... <eos>``).
SHORTEST_SEQUENCE = 3


def check_position_table(
    spec: EmbeddingSpec, rows: int, table: str, config: Mapping[str, Any], source: str = "config.json"
) -> None:
    """Refuse a config whose position rule leaves the position table (`rows` rows) too few positions.

    The ``padding`` rule gives pads row ``padding_idx`` and numbers the other
    tokens from ``padding_idx + 1``, so a sequence holds at most
    ``rows - 1 - padding_idx`` tokens; the ``absolute`` rule with an offset
    (Nystromformer, YOSO, MRA: 2) at most ``rows - offset``. A padding id
    that is not a row of the table, or that leaves fewer than
    :data:`SHORTEST_SEQUENCE` positions, describes a model that cannot embed
    any sequence its tokenizer writes (transformers builds it, and fails with
    an ``IndexError`` at the first such sequence): a ``CheckpointError``
    naming `source`, the keys and the numbers. An ``absolute`` rule from row 0
    is not checked: its limit is the table's own length, which the call-time
    error names.

    Examples
    --------
    >>> spec = embedding_spec({"model_type": "roberta", "pad_token_id": 3})
    >>> check_position_table(spec, 514, "embeddings.position_embeddings.weight", {"pad_token_id": 3})
    >>> check_position_table(spec, 5, "embeddings.position_embeddings.weight", {"pad_token_id": 3})
    Traceback (most recent call last):
    ...
    bertembed.CheckpointError: config.json: model_type 'roberta': pad_token_id 3 leaves 1 position ...
    """
    where = f"{source}: model_type {spec.model_type!r}"
    declared = config.get("max_position_embeddings")
    size = f"{rows} rows" + (f"; max_position_embeddings {short(declared)}" if declared is not None else "")
    if spec.position_rule == PADDING and spec.padding_idx is not None:
        pad, key = spec.padding_idx, spec.padding_key
        what = f"{key} {pad}" if key else f"the padding id ({pad}, fixed for {spec.model_type})"
        if not 0 <= pad < rows:
            raise CheckpointError(
                f"{where}: the padding id {short(pad)} ({key or 'fixed for ' + spec.model_type}) is not a row "
                f"of the position table {table!r} ({size})"
            )
        free = rows - 1 - pad
        if free < SHORTEST_SEQUENCE:
            top = rows - 1 - SHORTEST_SEQUENCE
            fits = f" ({key} at most {top} for this table)" if key and top >= 0 else ""
            raise CheckpointError(
                f"{where}: {what} leaves {free} position{'s' * (free != 1)} of the position table {table!r} "
                f"({size}) for tokens: the padding rule numbers a sequence's tokens from {key or 'the padding id'} "
                f"+ 1 = {pad + 1}, so no sequence can hold more than {free} token{'s' * (free != 1)}, fewer than "
                f"the {SHORTEST_SEQUENCE} of the shortest sequence (one token between two special tokens); the "
                f"config and the table contradict each other{fits}"
            )
    elif spec.position_rule == ABSOLUTE and spec.position_offset:
        free = rows - spec.position_offset
        if free < SHORTEST_SEQUENCE:
            raise CheckpointError(
                f"{where}: positions start at row {spec.position_offset} of the position table {table!r} "
                f"({size}), which leaves {max(free, 0)} for tokens, fewer than the {SHORTEST_SEQUENCE} of the "
                "shortest sequence (one token between two special tokens)"
            )
