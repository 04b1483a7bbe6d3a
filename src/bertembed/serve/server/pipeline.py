"""Texts to sentence embeddings: tokenizer -> embedding layer -> ONNX Runtime encoder.

No torch here (the torch embedding step used for the comparison lives in
``benchmarks/service/torch_embedding.py`` and is imported only when asked for). What runs:

1. the model's own ``tokenizer.json`` (the ``tokenizers`` package): each text
   to its token ids, truncated to sentence-transformers' ``max_seq_length``
   (from the right, or the left on request), with the model's special tokens;
2. the texts sorted by token length and cut into encoder calls that pad
   little (:func:`batching.plan_batches`; at most ``batch_size`` texts and
   ``max_batch_tokens`` padded tokens per call), results put back in the
   caller's order;
3. the embedding layer of each call: ``bertembed.BertEmbeddings`` loaded from
   the artifact's ``embeddings/`` (as stored, converted, or trimmed to the
   token rows a corpus or scripts need), memory-mapped
   read-only (token + position + segment rows, LayerNorm fused), float32
   (B, S, H); with a trimmed layer whose unknown rule is ``"error"``, texts
   with a trimmed-away token are refused (:class:`TrimmedToken`, naming every
   such text and its first such token) before they reach a batch; the rule
   ``"unk"`` (the layer's, or asked for per call) reads the unknown token's
   row for such tokens instead;
4. ``encoder.onnx`` in ONNX Runtime: the transformer layers with ONNX
   Runtime's fused kernels and the pooling (exported by ``bertembed
   export``), float32 (B, D); then L2 normalisation in NumPy when
   the model has a Normalize module (or a request asks for it).

:class:`SentenceEmbedder` is built in two steps because of pre-fork servers:
the constructor (in the gunicorn master with ``--preload``) maps the
layer and reads the tokenizer; :meth:`SentenceEmbedder.start` (in each
worker, after the fork) creates the ONNX Runtime session, whose thread pool
would not survive a fork, and touches every table page once.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Batches are tokenised serially: the parallelism comes from the workers, and
# the tokenizer's own thread pool must not be started before a fork.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import onnxruntime as ort

from bertembed import BertEmbeddings
from bertembed._vocab.tokenizer import _unk_id

from ..artifact import UNKNOWN_RULES
from ..artifact.manifest import read_service_config
from ..artifact.tokens import bounded_text, load_tokenizer, special_tokens
from ..settings import BY_NAME
from .batching import plan_batches

#: Texts per encoder call, and padded tokens per encoder call (bounds the encoder's working memory):
#: the server's settings' defaults (bertembed.serve.settings).
DEFAULT_BATCH_SIZE = int(BY_NAME["batch_size"].default)  # type: ignore[arg-type]
DEFAULT_MAX_BATCH_TOKENS = int(BY_NAME["max_batch_tokens"].default)  # type: ignore[arg-type]
#: ONNX Runtime's CPU memory arena: "shrink" (kept between calls, its unused chunks given back after
#: each call), "on" (kept at its largest size), "off" (every buffer from malloc).
ARENA_MODES = ("shrink", "on", "off")
DEFAULT_ARENA = str(BY_NAME["arena"].default)
#: graph_optimization_level names accepted by ``SentenceEmbedder(graph_optimization=...)``.
GRAPH_LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
DEFAULT_GRAPH_LEVEL = str(BY_NAME["graph_optimization"].default)
#: Whether ONNX Runtime's intra-op threads spin while they wait for work: "off" (the default: they
#: sleep), "on", "auto" (when the threads of every process that runs an encoder fit the usable cores).
SPINNING_MODES = ("auto", "on", "off")
DEFAULT_SPINNING = str(BY_NAME["spinning"].default)

#: The embedding steps the service can run (``torch`` is the comparison).
EMBEDDINGS = ("bertembed", "torch")

EmbeddingStep = Callable[[np.ndarray], np.ndarray]


#: Uncovered inputs a :class:`TrimmedToken` message lists one by one (the others are counted).
LISTED_UNCOVERED = 10


@dataclass(frozen=True)
class Uncovered:
    """An input with a token that a trimmed embedding layer does not keep: its first such token.

    Attributes
    ----------
    index : int
        The input (its place in the call's inputs).
    position : int
        The token's position in the input's ids (special tokens counted).
    token_id : int
    token : str
        The tokenizer's string for the id.
    """

    index: int
    position: int
    token_id: int
    token: str

    def __str__(self) -> str:
        return f"input {self.index}: token {self.token!r} (id {self.token_id}) at position {self.position}"


class TrimmedToken(ValueError):
    """Inputs have tokens that the trimmed embedding layer does not keep (the unknown rule is "error").

    Every such input is in :attr:`inputs` with its first such token; the
    message lists the first :data:`LISTED_UNCOVERED` and counts the others.

    Attributes
    ----------
    inputs : tuple of Uncovered
        Every uncovered input, in order (at least one).
    count : int
        Inputs checked (uncovered or not).
    index, position, token_id, token
        The first uncovered input's (:class:`Uncovered`).
    """

    def __init__(self, inputs: Sequence[Uncovered], count: int) -> None:
        if not inputs:
            raise ValueError("TrimmedToken needs at least one uncovered input")
        self.inputs = tuple(inputs)
        self.count = count
        first = self.inputs[0]
        self.index, self.position, self.token_id, self.token = first.index, first.position, first.token_id, first.token
        listed = "; ".join(str(u) for u in self.inputs[:LISTED_UNCOVERED])
        more = len(self.inputs) - LISTED_UNCOVERED
        super().__init__(
            f"{len(self.inputs)} of {count} inputs have a token that the trimmed embedding layer does not keep "
            f"(its unknown rule is 'error'; pass unknown='unk' to read the unknown token's row instead): "
            f"{listed}{f'; and {more} more' if more > 0 else ''}"
        )


class InputTooLong(ValueError):
    """An input has more tokens than the model takes, and truncation was not asked for."""

    def __init__(self, index: int, tokens: int | None, limit: int) -> None:
        # tokens None: a long text, known to be too long without tokenizing it whole.
        if tokens is None:
            super().__init__(f"input {index} has more tokens than the model's {limit}")
        else:
            super().__init__(f"input {index} has {tokens} tokens, more than the model's {limit}")
        self.index, self.tokens, self.limit = index, tokens, limit


class BertembedStep:
    """The embedding layer with bertembed: a memory map of the checkpoint's tables.

    Parameters
    ----------
    model_dir : str or os.PathLike
        Directory with config.json and model.safetensors: the model's, or an
        embedding layer saved by an export's ``--table-dtype``, ``--trim-*``
        or ``--layer`` (its tables as converted or trimmed, mapped the same
        way; a trimmed layer's kept ids are in :attr:`kept`).
    threads : int
        OpenMP threads per call (``num_threads``).
    """

    name = "bertembed"

    def __init__(self, model_dir: str | os.PathLike[str], threads: int = 1) -> None:
        self.layer = BertEmbeddings.from_pretrained(model_dir)
        self.threads = threads
        self.vocab_size = self.layer.vocab_size
        #: Which ids have a row (a trimmed layer's kept ids); None when every id does.
        self.kept: np.ndarray | None = None
        if self.layer.is_trimmed:
            self.kept = np.zeros(self.vocab_size, dtype=bool)
            self.kept[self.layer.kept_ids] = True

    def start(self, width: int) -> None:
        """Fault every table page in once (in each worker, after the fork).

        Faulting the pages in (a read of each row, no copy) means the first
        requests do not pay for page faults. The pages are the page cache's:
        every worker maps the same ones, so this costs no private memory.
        The rows go through in calls of ``width`` tokens, the longest input
        the pipeline makes (a RoBERTa-style layer's position table has two
        rows more than a text may have tokens).
        """
        threads = self.threads
        kept = self.layer.kept_ids  # a trimmed layer's rows: the ids it keeps
        rows = kept.size
        flat = np.full(-(-rows // width) * width, kept[0], dtype=np.int64)
        flat[:rows] = kept
        ids = flat.reshape(-1, width)
        out = np.empty((8, width, self.layer.hidden_size), dtype=np.float32)
        for begin in range(0, ids.shape[0], 8):
            chunk = ids[begin : begin + 8]
            self.layer(chunk, out=out[: chunk.shape[0]], num_threads=threads)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        """float32 (B, S, H) embeddings of int64 (B, S) ids (segment 0, the layer's position rule)."""
        return self.layer(ids, num_threads=self.threads)


def make_embedding_step(kind: str, model_dir: str | os.PathLike[str], threads: int = 1) -> Any:
    """``BertembedStep`` or, for the comparison, the torch/transformers step."""
    if kind == "bertembed":
        return BertembedStep(model_dir, threads)
    if kind == "torch":
        # The comparison only (benchmarks/service/torch_embedding.py, on the benchmark's sys.path).
        import importlib

        return importlib.import_module("torch_embedding").TorchStep(model_dir, threads)
    raise ValueError(f"embedding step {kind!r} unknown; choose one of {EMBEDDINGS}")


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask where there is one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def spinning_on(mode: str, threads: int, processes: int = 1) -> bool:
    """Whether ONNX Runtime's intra-op threads may spin: ``mode`` "on", or "auto" and the
    ``processes`` x ``threads`` encoder threads fit the usable cores (each owns its core, so a
    spinning thread takes no other thread's core).

    Examples
    --------
    >>> spinning_on("on", 64), spinning_on("off", 1), spinning_on("auto", 10_000)
    (True, False, False)
    """
    if mode not in SPINNING_MODES:
        raise ValueError(f"spinning must be one of {SPINNING_MODES}, got {mode!r}")
    if mode != "auto":
        return mode == "on"
    return threads > 1 and processes * threads <= usable_cores()


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalised rows (``torch.nn.functional.normalize``'s rule: divided by max(norm, 1e-12)).

    Examples
    --------
    >>> normalize_rows(np.array([[3.0, 4.0], [0.0, 0.0]], np.float32)).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(vectors.dtype, copy=False)


class SentenceEmbedder:
    """Sentence embeddings of texts, as the model's sentence-transformers pipeline computes them.

    Parameters
    ----------
    service_dir : str or os.PathLike
        The artifact directory (``bertembed export``'s OUT_DIR).
    embedding : {"bertembed", "torch"}
        Which embedding step to run (``torch`` is the comparison).
    threads : int
        ONNX Runtime's intra-op threads. One encoder call runs at a time per
        process, so a process never keeps more than ``threads`` cores busy.
    embed_threads : int
        bertembed's threads for the embedding step (default 1: the step takes
        well under 1% of a call, and one thread starts no OpenMP pool that
        could spin while the encoder runs).
    batch_size : int
        Most texts per encoder call.
    max_batch_tokens : int
        Most padded tokens per encoder call (bounds the encoder's memory).
    arena : {"shrink", "on", "off"}
        ONNX Runtime's CPU memory arena (see :data:`ARENA_MODES`).
    graph_optimization : {"basic", "extended", "all"}
        ONNX Runtime's graph optimisation level for the session.
    spinning : {"off", "on", "auto"}
        Whether ONNX Runtime's idle intra-op threads spin (busy-wait) for the
        next parallel step instead of sleeping: "auto" spins when ``threads``
        fit the usable cores (:func:`spinning_on`; the server passes "on" or
        "off" for all of its workers). Spinning saves a thread wake-up per
        parallel step on a host that runs nothing else, and costs much more
        when other processes want the cores (docs/serve.md, "Latency");
        spinning threads sleep again soon after a call ends.

    Raises
    ------
    ValueError
        The tokenizer has more tokens than the token table has rows, or the
        embedding step's result has the wrong shape.

    Examples
    --------
    >>> embedder = SentenceEmbedder("out/", threads=2)  # doctest: +SKIP
    >>> embedder.start()  # doctest: +SKIP
    >>> embedder.encode_texts(["A sentence.", "Another one."]).shape  # doctest: +SKIP
    (2, 384)
    """

    def __init__(
        self,
        service_dir: str | os.PathLike[str],
        *,
        embedding: str = "bertembed",
        threads: int = 1,
        embed_threads: int = 1,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        arena: str = DEFAULT_ARENA,
        graph_optimization: str = DEFAULT_GRAPH_LEVEL,
        spinning: str = DEFAULT_SPINNING,
    ) -> None:
        self.spinning = spinning_on(spinning, threads)
        if arena not in ARENA_MODES:
            raise ValueError(f"arena must be one of {ARENA_MODES}, got {arena!r}")
        if graph_optimization not in GRAPH_LEVELS:
            raise ValueError(f"graph_optimization must be one of {sorted(GRAPH_LEVELS)}, got {graph_optimization!r}")
        self.config = read_service_config(service_dir)
        sentence = self.config["sentence"]
        self.name = str(self.config.get("name") or Path(service_dir).resolve().name)
        self.max_seq_length = int(sentence["max_seq_length"])
        if max_batch_tokens < self.max_seq_length:
            raise ValueError(f"max_batch_tokens {max_batch_tokens} < max_seq_length {self.max_seq_length}")
        self.dimension = int(sentence["dimension"])
        self.normalize = bool(sentence["normalize"])
        self.prompts: dict[str, str] = dict(sentence.get("prompts") or {})
        self.default_prompt_name: str | None = sentence.get("default_prompt_name")
        self.matryoshka_dims: list[int] = [int(d) for d in self.config.get("matryoshka_dimensions") or []]
        self.tokenizer = load_tokenizer(
            Path(sentence["tokenizer_dir"]) / "tokenizer.json", do_lower_case=bool(sentence["do_lower_case"])
        )
        self.prefix, self.suffix = special_tokens(self.tokenizer)
        self.pad_id = int(self.config["pad_token_id"])
        self.threads = threads
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.arena = arena
        self.graph_optimization = graph_optimization
        # bertembed maps the artifact's layer; the torch comparison loads the model it was built from.
        layer_dir = self.config["embeddings"]["path"] if embedding == "bertembed" else self.config["source"]
        self.step = make_embedding_step(embedding, layer_dir, embed_threads)
        self.embed_threads = embed_threads
        self.session: ort.InferenceSession | None = None
        #: The encoder file :meth:`start` loads: the artifact's, or a shared copy (:meth:`share_encoder`).
        self.encoder_path = str(self.config["encoder"]["path"])
        self._run_options: ort.RunOptions | None = None
        self.unk_id = self._unknown_row()
        #: Whether the artifact's tokenizer is reduced to the pieces a layer refusing unknown tokens can use.
        self.tokenizer_reduced = bool((self.config.get("tokenizer") or {}).get("reduced"))
        # The width of the encoder's input: the layer's (ELECTRA's embedding_size can be below hidden_size).
        self._check(int(self.config["encoder"].get("input_width", sentence["hidden_size"])))

    def _check(self, hidden_size: int) -> None:
        """The tokenizer's ids fit the token table; one text goes through the embedding step.

        This runs where the embedder is built: in the gunicorn master with
        ``--preload``, so with ``embed_threads`` > 1 the master has run an
        OpenMP parallel region before it forks the workers (bertembed
        releases its pool before each fork).
        """
        tokens = self.tokenizer.get_vocab_size(with_added_tokens=True)
        if tokens > self.step.vocab_size:
            raise ValueError(f"tokenizer.json has {tokens} tokens but the token table has {self.step.vocab_size} rows")
        ids, _ = self.pad(self._kept_only(self.tokenize(["Checking the embedding layer."])))
        shape = self.step(ids).shape
        if shape != (*ids.shape, hidden_size):
            raise ValueError(f"the embedding step gave shape {shape}, expected {(*ids.shape, hidden_size)}")

    @property
    def vocab_size(self) -> int:
        """Ids the token table takes (a trimmed layer's original vocabulary): token ids must be below this."""
        return int(self.step.vocab_size)

    @property
    def kept_mask(self) -> np.ndarray | None:
        """Which ids a trimmed layer keeps (bool, one per id), whatever its unknown rule; None when untrimmed."""
        return getattr(self.step, "kept", None)

    @property
    def kept(self) -> np.ndarray | None:
        """Which ids a trimmed layer keeps (bool, one per id) when it refuses the others; else None."""
        layer = getattr(self.step, "layer", None)
        if layer is None or not layer.is_trimmed or layer.unknown != "error":
            return None
        return self.step.kept  # type: ignore[no-any-return]

    @property
    def unknown(self) -> str:
        """The layer's own rule for a token it does not keep: "error" (refused) or "unk" (the unknown row)."""
        layer = getattr(self.step, "layer", None)
        return "error" if layer is None or layer.unknown == "error" else "unk"

    def _unknown_row(self) -> int | None:
        """The id whose row a token the layer does not keep reads under the rule "unk": the layer's
        unknown id, else the tokenizer's unknown token if the layer keeps its row; None if there is none."""
        layer = getattr(self.step, "layer", None)
        if layer is not None and layer.unknown != "error":
            return int(layer.unknown)
        unk = _unk_id(self.tokenizer, json.loads(self.tokenizer.to_str()))
        trimmed = self.kept_mask
        if unk is None or not 0 <= unk < self.vocab_size or (trimmed is not None and not trimmed[unk]):
            return None
        return unk

    def layer_info(self) -> dict[str, Any]:
        """What the service says of its embedding layer (``/info``): trimmed or not, rows kept, unknown rule.

        ``unknown`` is the layer's rule: "error" or the id whose row a token it does not keep reads
        (``unknown_token`` its string); a trimmed layer also says which rules a call may ask for
        (``unknown_rules``: "unk" only when the unknown token's row is kept).
        """
        layer = getattr(self.step, "layer", None)
        if layer is None:  # the torch comparison: the checkpoint's whole table
            return {"trimmed": False, "vocab_size": self.vocab_size, "kept_rows": self.vocab_size, "unknown": "error"}
        unknown = layer.unknown
        info = {
            "table_dtype": layer.table_dtype,
            "trimmed": layer.is_trimmed,
            "vocab_size": layer.vocab_size,
            "kept_rows": layer.kept_rows,
            "unknown": unknown,
        }
        if layer.is_trimmed and unknown != "error":
            info["unknown_token"] = self.tokenizer.id_to_token(int(unknown))
        if layer.is_trimmed:
            info["unknown_rules"] = ["error"] if self.unk_refusal() else list(UNKNOWN_RULES)
            info["tokenizer"] = "reduced" if self.tokenizer_reduced else "full"
        return info

    def unk_refusal(self) -> str | None:
        """Why a call may not ask for the rule "unk" on this trimmed layer (None: it may)."""
        if self.unknown == "unk":
            return None
        if self.tokenizer_reduced:
            return (
                "this artifact's tokenizer is reduced to the pieces its trimmed layer keeps "
                "(bertembed export --tokenizer full keeps every piece)"
            )
        if self.unk_id is None:
            return "this trimmed embedding layer keeps no unknown token's row"
        return None

    def uncovered(self, seqs: Sequence[np.ndarray]) -> list[Uncovered]:
        """Every sequence with a token a trimmed layer does not keep, with its first such token
        (whatever the layer's unknown rule); [] for a layer that is not trimmed.

        Ids outside the vocabulary are not counted here (the layer refuses them itself).
        """
        trimmed = self.kept_mask
        if trimmed is None or not seqs:
            return []
        flat, ends, bad = self._not_kept(seqs, trimmed)
        if bad is None:
            return []
        which = np.searchsorted(ends, bad, side="right")  # the sequence of each refused token
        inputs, first = np.unique(which, return_index=True)
        found = []
        for index, at in zip(inputs.tolist(), bad[first].tolist(), strict=True):
            token_id = int(flat[at])
            start = int(ends[index - 1]) if index else 0
            found.append(Uncovered(index, at - start, token_id, self.tokenizer.id_to_token(token_id) or ""))
        return found

    def _not_kept(
        self, seqs: Sequence[np.ndarray], trimmed: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The sequences end to end, where each ends, and the flat positions of the ids not kept (None: none)."""
        flat = np.concatenate([np.asarray(s, dtype=np.int64).reshape(-1) for s in seqs])
        ends = np.cumsum([len(s) for s in seqs])
        inside = (flat >= 0) & (flat < trimmed.size)
        refused = inside & ~trimmed[np.where(inside, flat, 0)]
        bad = np.flatnonzero(refused)
        return flat, ends, bad if bad.size else None

    def check_kept(self, seqs: Sequence[np.ndarray], unknown: str | None = None) -> None:
        """Raise :class:`TrimmedToken` naming every sequence with a token the trimmed layer does not keep,
        when the rule (``unknown``, default the layer's) is "error"."""
        if (unknown or self.unknown) == "error":
            found = self.uncovered(seqs)
            if found:
                raise TrimmedToken(found, len(seqs))

    def resolve_unknown(self, seqs: Sequence[np.ndarray], unknown: str | None = None) -> list[np.ndarray]:
        """The sequences ready for the layer under the rule ``unknown`` for tokens a trimmed layer does not keep.

        Parameters
        ----------
        unknown : {"error", "unk"}, optional
            "error": :class:`TrimmedToken` naming every sequence with such a
            token (its first one); "unk": each such token replaced by the
            unknown token's id (what a layer trimmed with ``unknown="unk"``
            computes); None: the layer's own rule.

        Raises
        ------
        TrimmedToken
            The rule is "error" and a sequence has a token the layer does not keep.
        ValueError
            ``unknown`` is not a rule, or "unk" and the layer keeps no unknown token's row.
        """
        if unknown is not None and unknown not in UNKNOWN_RULES:
            raise ValueError(f"unknown must be one of {UNKNOWN_RULES} or None, got {unknown!r}")
        rule = self.unknown if unknown is None else unknown
        trimmed = self.kept_mask
        if trimmed is None or not seqs:
            return list(seqs)
        if rule == "error":
            self.check_kept(seqs, rule)
            return list(seqs)
        if self.unknown == "unk":
            return list(seqs)  # the layer reads the unknown row itself
        refusal = self.unk_refusal()
        if refusal:
            raise ValueError(f"{refusal}: the rule 'unk' cannot be used")
        flat, ends, bad = self._not_kept(seqs, trimmed)
        if bad is None:
            return list(seqs)
        flat[bad] = self.unk_id
        return np.split(flat, ends[:-1])

    def _kept_only(self, seqs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The sequences without the tokens a trimmed layer refuses (the start-up checks' texts)."""
        kept = self.kept
        return list(seqs) if kept is None else [s[kept[s]] for s in seqs]

    @property
    def ready(self) -> bool:
        """Whether :meth:`start` has run (the encoder is loaded)."""
        return self.session is not None

    def session_options(self) -> ort.SessionOptions:
        """ONNX Runtime settings for one pre-forked worker (created after the fork)."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = GRAPH_LEVELS[self.graph_optimization]
        # Idle intra-op threads spin only when they own their cores (see `spinning`): a waking thread
        # costs each of the encoder's parallel steps a futex wake-up, but with more threads than
        # cores a spinning pool steals the other workers' cores. The inter-op pool is not used.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.spinning else "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        # Shapes change from call to call: a memory pattern planned for one shape is never reused.
        options.enable_mem_pattern = False
        options.enable_cpu_mem_arena = self.arena != "off"
        options.log_severity_level = 3
        return options

    def share_encoder(self, cache_dir: str | os.PathLike[str] | None = None) -> str:
        """Load the encoder from a copy whose (prepacked) weights every worker maps: its path.

        Call before :meth:`start` (in the gunicorn master, before the fork).
        The copy is written once per machine and ONNX Runtime version into
        ``cache_dir`` (:func:`.memory.shared_encoder`) and gives the same
        results, bit for bit.

        Raises
        ------
        OSError, RuntimeError
            The copy cannot be written; the artifact's own encoder is still used.
        """
        from .memory import shared_encoder

        if self.unsigned_int8:
            raise RuntimeError("the int8 encoder's weights are made unsigned for this CPU in each worker")
        self.encoder_path = str(
            shared_encoder(self.config["encoder"]["path"], cache_dir, graph_optimization=self.graph_optimization)
        )
        return self.encoder_path

    @property
    def unsigned_int8(self) -> bool:
        """Whether the int8 encoder's weights are stored as uint8 on this CPU (:mod:`.int8_host`)."""
        from ..._core._kernel import int8_products_saturate

        return self.config["encoder"].get("dtype") == "int8" and int8_products_saturate()

    def start(self) -> None:
        """Create the encoder session and prepare the embedding step (after any fork)."""
        from .int8_host import for_this_cpu

        source = for_this_cpu(self.encoder_path) if self.unsigned_int8 else self.encoder_path
        session = ort.InferenceSession(source, self.session_options(), providers=["CPUExecutionProvider"])
        if self.arena == "shrink":
            self._run_options = ort.RunOptions()
            self._run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        self.step.start(self.max_seq_length)
        self.session = session
        self.encode(self._kept_only(self.tokenize(["warm-up"])))

    # --- tokens -------------------------------------------------------------------------------

    def _fit(self, index: int, ids: Sequence[int], truncate: bool, direction: str) -> np.ndarray:
        room = self.max_seq_length - len(self.prefix) - len(self.suffix)
        if len(ids) > room:
            if not truncate:
                raise InputTooLong(index, len(ids) + len(self.prefix) + len(self.suffix), self.max_seq_length)
            ids = ids[:room] if direction == "right" else ids[len(ids) - room :]
        return np.array([*self.prefix, *ids, *self.suffix], dtype=np.int64)

    def prompt_text(self, prompt_name: str | None) -> str:
        """The prompt put before each text: the named one, else the model's default ("" if none).

        Raises
        ------
        KeyError
            ``prompt_name`` is not one of the model's prompts.
        """
        name = prompt_name if prompt_name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            raise KeyError(name)
        return self.prompts[name]

    def tokenize(
        self,
        texts: Sequence[str],
        *,
        prompt_name: str | None = None,
        truncate: bool = True,
        direction: str = "right",
    ) -> list[np.ndarray]:
        """Each text's int64 token ids with the special tokens, at most ``max_seq_length`` of them.

        Parameters
        ----------
        prompt_name : str, optional
            One of the model's prompts, put before every text (default: the
            model's default prompt, if it has one).
        truncate : bool
            Cut texts that are too long (sentence-transformers does); False
            raises :class:`InputTooLong` instead.
        direction : {"right", "left"}
            Which end of a text is cut.

        A long text is cut before it is tokenized, at a whitespace boundary
        past the tokens it can keep (:func:`~bertembed.serve.artifact.tokens.bounded_text`),
        so its cost is bounded by the model's length, not the text's, and
        the ids are exactly those of the whole text, truncated.
        """
        prompt = self.prompt_text(prompt_name)
        if prompt:
            texts = [prompt + text for text in texts]
        room = self.max_seq_length - len(self.prefix) - len(self.suffix)
        pieces = [bounded_text(self.tokenizer, text, room, direction) for text in texts]
        if not truncate:
            for k, (_, cut) in enumerate(pieces):
                if cut:  # more tokens than the model takes, known without tokenizing it whole
                    raise InputTooLong(k, None, self.max_seq_length)
        encodings = self.tokenizer.encode_batch([piece for piece, _ in pieces], add_special_tokens=False)
        return [self._fit(k, e.ids, truncate, direction) for k, e in enumerate(encodings)]

    def from_ids(
        self, id_lists: Sequence[Sequence[int]], *, truncate: bool = True, direction: str = "right"
    ) -> list[np.ndarray]:
        """Token-id inputs (the model's own ids, without special tokens) made ready like :meth:`tokenize`'s."""
        return [self._fit(k, list(ids), truncate, direction) for k, ids in enumerate(id_lists)]

    def pad(self, seqs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """int64 (B, S) ids padded on the right with the pad id, and the attention mask."""
        width = max(len(s) for s in seqs)
        ids = np.full((len(seqs), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(seqs), width), dtype=np.int64)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        return ids, mask

    # --- the model ----------------------------------------------------------------------------

    def encode_call(self, seqs: Sequence[np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        """One encoder call: float32 (len(seqs), D) pooled vectors (not normalised), and seconds per stage.

        The sequences go to the layer as they are (the server resolves its
        requests' unknown rule before batching them: :meth:`resolve_unknown`).

        Raises
        ------
        RuntimeError
            :meth:`start` has not run.
        TrimmedToken
            The layer's unknown rule is "error" and sequences have tokens it
            does not keep (every one named, by its place in ``seqs``).
        """
        if self.session is None:
            raise RuntimeError("SentenceEmbedder.start() has not run (no encoder session)")
        t0 = time.perf_counter()
        ids, mask = self.pad(seqs)
        try:
            hidden = self.step(ids)
        except IndexError:
            # The layer refuses an id it does not keep: name every such sequence (looked for only now,
            # so that the server's calls, whose requests are checked already, pay nothing for it).
            found = self.uncovered(seqs) if self.unknown == "error" else []
            if not found:
                raise  # not a trimmed-away token: an id outside the vocabulary
            raise TrimmedToken(found, len(seqs)) from None
        t1 = time.perf_counter()
        (vectors,) = self.session.run(None, {"embeddings": hidden, "attention_mask": mask}, self._run_options)
        t2 = time.perf_counter()
        return vectors, {"embed": t1 - t0, "encoder": t2 - t1}

    def encode(
        self, seqs: Sequence[np.ndarray], timings: dict[str, float] | None = None, *, unknown: str | None = None
    ) -> np.ndarray:
        """Pooled vectors of many sequences, in their order: sorted by length and cut into calls.

        The calls are planned by :func:`batching.plan_batches` (at most
        ``batch_size`` texts and ``max_batch_tokens`` padded tokens each). The
        seconds of each stage are added into ``timings`` when given.
        ``unknown`` is the rule for tokens a trimmed layer does not keep
        (:meth:`resolve_unknown`; default the layer's own).

        Raises
        ------
        TrimmedToken
            The rule is "error" and sequences have tokens the layer does not
            keep: all of them named, before any call.
        """
        seqs = self.resolve_unknown(seqs, unknown)
        out = np.empty((len(seqs), self.dimension), dtype=np.float32)
        lengths = [len(s) for s in seqs]
        for group in plan_batches(lengths, max_texts=self.batch_size, max_tokens=self.max_batch_tokens):
            vectors, stages = self.encode_call([seqs[k] for k in group])
            out[group] = vectors
            if timings is not None:
                for name, seconds in stages.items():
                    timings[name] = timings.get(name, 0.0) + seconds
        return out

    def finish(
        self, vectors: np.ndarray, *, normalize: bool | None = None, dimensions: int | None = None
    ) -> np.ndarray:
        """The vectors a client gets: cut to ``dimensions`` (Matryoshka models), then normalised
        (``normalize`` None: as the model's sentence-transformers pipeline does)."""
        if dimensions is not None and dimensions != self.dimension:
            vectors = vectors[:, :dimensions]
        if self.normalize if normalize is None else normalize:
            vectors = normalize_rows(vectors)
        return np.ascontiguousarray(vectors)

    def encode_texts(self, texts: Sequence[str], *, unknown: str | None = None, **finish: Any) -> np.ndarray:
        """float32 (len(texts), D) sentence embeddings, as sentence-transformers' ``encode`` gives them.

        ``unknown`` ("error", "unk"; default the layer's rule) says what a
        trimmed layer does with tokens it does not keep; ``finish`` takes
        :meth:`finish`'s options.

        Raises
        ------
        TrimmedToken
            The rule is "error" and texts have tokens the layer does not keep
            (every such text named, with its first such token).
        """
        return self.finish(self.encode(self.tokenize(texts), unknown=unknown), **finish)

    def embed(self, texts: Sequence[str], *, unknown: str | None = None) -> tuple[np.ndarray, dict[str, float]]:
        """float32 (len(texts), D) sentence embeddings, and seconds spent in each stage
        (``unknown`` and the errors: :meth:`encode_texts`)."""
        t0 = time.perf_counter()
        seqs = self.tokenize(texts)
        timings = {"tokenize": time.perf_counter() - t0}
        vectors = self.finish(self.encode(seqs, timings, unknown=unknown))
        return vectors, timings
