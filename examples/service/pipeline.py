"""Texts to sentence embeddings: tokenizer -> embedding layer -> ONNX Runtime encoder.

No torch here (the torch embedding step used for the comparison lives in
``torch_embedding.py`` and is imported only when asked for). What runs:

1. the model's own ``tokenizer.json`` (the ``tokenizers`` package), truncated
   to sentence-transformers' ``max_seq_length`` and padded to the longest
   text of the request;
2. the embedding layer: ``bertembed.BertEmbeddings`` loaded from
   ``model.safetensors``, memory-mapped read-only (token + position + segment
   rows, LayerNorm fused), float32 (B, S, H);
3. ``encoder.onnx`` in ONNX Runtime: the transformer layers, the pooling and
   the normalisation (exported by ``export_encoder.py``), float32 (B, D).

:class:`SentenceEmbedder` is built in two steps because of pre-fork servers:
the constructor (in the gunicorn master with ``--preload``) maps the
checkpoint and reads the tokenizer; :meth:`SentenceEmbedder.start` (in each
worker, after the fork) creates the ONNX Runtime session, whose thread pool
would not survive a fork, and touches every table page once.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Batches are tokenised serially: the parallelism comes from the workers, and
# the tokenizer's own thread pool must not be started before a fork.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer, normalizers

from bertembed import BertEmbeddings

#: What export_encoder.py writes next to encoder.onnx.
SERVICE_FILE = "service.json"
SERVICE_FORMAT = 1

#: The embedding steps the service can run (``torch`` is the comparison).
EMBEDDINGS = ("bertembed", "torch")

EmbeddingStep = Callable[[np.ndarray], np.ndarray]


def read_service_config(service_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``service.json`` written by ``export_encoder.py``, checked.

    Parameters
    ----------
    service_dir : str or os.PathLike
        The export's output directory.

    Returns
    -------
    dict
        Its content, with ``transformer_dir`` and the encoder path made absolute.

    Examples
    --------
    >>> cfg = read_service_config("out/")  # doctest: +SKIP
    >>> cfg["sentence"]["max_seq_length"], cfg["sentence"]["pooling"]  # doctest: +SKIP
    (256, ['mean'])
    """
    root = Path(service_dir)
    path = root / SERVICE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; run export_encoder.py MODEL_DIR {root} first")
    with open(path, encoding="utf-8") as fh:
        config = json.load(fh)
    if config.get("format") != SERVICE_FORMAT:
        raise ValueError(f"{path}: format {config.get('format')!r}, expected {SERVICE_FORMAT}; export again")
    config["sentence"]["transformer_dir"] = str(root / config["sentence"]["transformer_dir"])
    config["encoder"]["path"] = str(root / config["encoder"]["file"])
    if "embeddings" in config:  # a converted embedding layer (export_encoder.py --table-dtype)
        config["embeddings"]["path"] = str(root / config["embeddings"]["dir"])
    return config


def load_tokenizer(path: str | os.PathLike[str], *, max_seq_length: int, do_lower_case: bool,
                   pad_id: int, pad_token: str) -> Tokenizer:
    """The model's ``tokenizer.json`` set up as sentence-transformers uses it.

    Truncation to ``max_seq_length`` tokens (special tokens included, longest
    first, from the right) and padding to the longest text of a batch; these
    replace whatever truncation and padding the file itself sets. With
    ``do_lower_case`` a Lowercase normaliser is put in front of the file's
    own, unless it already has one (sentence-transformers' rule).

    Examples
    --------
    >>> tok = load_tokenizer("out/tokenizer.json", max_seq_length=256,
    ...                      do_lower_case=False, pad_id=0, pad_token="[PAD]")  # doctest: +SKIP
    >>> tok.encode("Hello world").ids  # doctest: +SKIP
    [101, 7592, 2088, 102]
    """
    tokenizer = Tokenizer.from_file(str(path))
    if do_lower_case:
        current = tokenizer.normalizer
        parts = list(current) if isinstance(current, normalizers.Sequence) else [current]
        if not any(isinstance(n, normalizers.Lowercase) for n in parts):
            tokenizer.normalizer = normalizers.Sequence(
                [normalizers.Lowercase(), *(n for n in parts if n is not None)]
            )
    tokenizer.enable_truncation(max_length=max_seq_length, strategy="longest_first", direction="right")
    tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token, direction="right")
    return tokenizer


def pad_token_of(tokenizer_path: str | os.PathLike[str], model_config: dict) -> tuple[int, str]:
    """The padding id and token: the tokenizer file's, else the model config's pad_token_id."""
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    if tokenizer.padding is not None:
        return int(tokenizer.padding["pad_id"]), str(tokenizer.padding["pad_token"])
    pad_id = int(model_config.get("pad_token_id") or 0)
    return pad_id, tokenizer.id_to_token(pad_id) or "[PAD]"


class BertembedStep:
    """The embedding layer with bertembed: a memory map of the checkpoint's tables.

    Parameters
    ----------
    model_dir : str or os.PathLike
        Directory with config.json and model.safetensors: the model's, or an
        embedding layer saved by ``export_encoder.py --table-dtype`` (its
        tables as converted, mapped the same way).
    threads : int
        OpenMP threads per call (``num_threads``).
    """

    name = "bertembed"

    def __init__(self, model_dir: str | os.PathLike[str], threads: int = 1) -> None:
        self.layer = BertEmbeddings.from_pretrained(model_dir)
        self.threads = threads
        self.vocab_size = self.layer.vocab_size

    def start(self) -> None:
        """Fault every table page in once (in each worker, after the fork).

        Faulting the pages in (a read of each row, no copy) means the first
        requests do not pay for page faults. The pages are the page cache's:
        every worker maps the same ones, so this costs no private memory.
        """
        threads = self.threads
        rows = self.layer.vocab_size
        width = self.layer.max_positions
        ids = np.zeros(-(-rows // width) * width, dtype=np.int64)
        ids[:rows] = np.arange(rows)
        ids = ids.reshape(-1, width)
        out = np.empty((8, width, self.layer.hidden_size), dtype=np.float32)
        for begin in range(0, ids.shape[0], 8):
            chunk = ids[begin:begin + 8]
            self.layer(chunk, out=out[:chunk.shape[0]], num_threads=threads)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        """float32 (B, S, H) embeddings of int64 (B, S) ids (segment 0, positions 0..S-1)."""
        return self.layer(ids, num_threads=self.threads)


def make_embedding_step(kind: str, model_dir: str | os.PathLike[str], threads: int = 1) -> Any:
    """``BertembedStep`` or, for the comparison, the torch/transformers step."""
    if kind == "bertembed":
        return BertembedStep(model_dir, threads)
    if kind == "torch":
        from torch_embedding import TorchStep  # the comparison only; imports torch

        return TorchStep(model_dir, threads)
    raise ValueError(f"embedding step {kind!r} unknown; choose one of {EMBEDDINGS}")


class SentenceEmbedder:
    """Sentence embeddings of texts, as the model's sentence-transformers pipeline computes them.

    Parameters
    ----------
    service_dir : str or os.PathLike
        The output directory of ``export_encoder.py``.
    embedding : {"bertembed", "torch"}
        Which embedding step to run (``torch`` is the comparison).
    threads : int
        Threads for one request, used by ONNX Runtime (intra-op) and by the
        embedding step. One request runs at a time per process, so a process
        never uses more than ``threads`` cores.

    Raises
    ------
    ValueError
        The tokenizer has more tokens than the token table has rows, or the
        embedding step's result has the wrong shape.

    Examples
    --------
    >>> embedder = SentenceEmbedder("out/", threads=1)  # doctest: +SKIP
    >>> embedder.start()  # doctest: +SKIP
    >>> vectors, timings = embedder.embed(["A sentence.", "Another one."])  # doctest: +SKIP
    >>> vectors.shape, vectors.dtype  # doctest: +SKIP
    ((2, 384), dtype('float32'))
    """

    def __init__(self, service_dir: str | os.PathLike[str], *, embedding: str = "bertembed",
                 threads: int = 1) -> None:
        self.config = read_service_config(service_dir)
        sentence = self.config["sentence"]
        model_dir = sentence["transformer_dir"]
        self.max_seq_length = int(sentence["max_seq_length"])
        self.dimension = int(sentence["dimension"])
        self.tokenizer = load_tokenizer(
            Path(model_dir) / "tokenizer.json",
            max_seq_length=self.max_seq_length,
            do_lower_case=bool(sentence["do_lower_case"]),
            pad_id=int(self.config["pad_token_id"]),
            pad_token=str(self.config["pad_token"]),
        )
        self.threads = threads
        # bertembed maps the converted layer when the export saved one (--table-dtype).
        layer_dir = self.config.get("embeddings", {}).get("path", model_dir) if embedding == "bertembed" else model_dir
        self.step = make_embedding_step(embedding, layer_dir, threads)
        self.session: ort.InferenceSession | None = None
        self._check(int(sentence["hidden_size"]))

    def _check(self, hidden_size: int) -> None:
        """The tokenizer's ids fit the token table; one text goes through the embedding step.

        This runs where the embedder is built: in the gunicorn master with
        ``--preload``, so with ``threads`` > 1 the master has run an OpenMP
        parallel region before it forks the workers (bertembed releases its
        pool before each fork).
        """
        tokens = self.tokenizer.get_vocab_size(with_added_tokens=True)
        if tokens > self.step.vocab_size:
            raise ValueError(
                f"tokenizer.json has {tokens} tokens but the token table has {self.step.vocab_size} rows"
            )
        ids, _ = self.token_ids(["Checking the embedding layer."])
        shape = self.step(ids).shape
        if shape != (*ids.shape, hidden_size):
            raise ValueError(f"the embedding step gave shape {shape}, expected {(*ids.shape, hidden_size)}")

    @property
    def ready(self) -> bool:
        """Whether :meth:`start` has run (the encoder is loaded)."""
        return self.session is not None

    def start(self) -> None:
        """Create the encoder session and prepare the embedding step (after any fork)."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle intra-op threads sleep instead of spinning: with several
        # workers per machine a spinning pool steals the other workers' cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(
            self.config["encoder"]["path"], options, providers=["CPUExecutionProvider"]
        )
        self.step.start()
        self.session = session
        self.embed(["warm-up"])

    def token_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """int64 (B, S) ids and attention mask of ``texts``, truncated and padded."""
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        return ids, mask

    def embed(self, texts: Sequence[str]) -> tuple[np.ndarray, dict[str, float]]:
        """float32 (len(texts), D) sentence embeddings, and seconds spent in each stage.

        Raises
        ------
        RuntimeError
            :meth:`start` has not run.
        """
        if self.session is None:
            raise RuntimeError("SentenceEmbedder.start() has not run (no encoder session)")
        t0 = time.perf_counter()
        ids, mask = self.token_ids(texts)
        t1 = time.perf_counter()
        hidden = self.step(ids)
        t2 = time.perf_counter()
        (vectors,) = self.session.run(None, {"embeddings": hidden, "attention_mask": mask})
        t3 = time.perf_counter()
        return vectors, {"tokenize": t1 - t0, "embed": t2 - t1, "encoder": t3 - t2}
