"""The comparison: the embedding step done by transformers' ``BertEmbeddings`` in torch.

This is the usual stack's embedding layer: the ``embeddings`` module of
``transformers.BertModel`` (word + position + token-type lookups, LayerNorm),
its weights read from ``model.safetensors`` into torch tensors. Everything
else in the service (tokenizer, ONNX Runtime encoder, HTTP) is the same, so
the difference in the load test is what bertembed changes end to end.

Selected with ``SERVICE_EMBEDDING=torch``; needs torch and transformers at
run time, which the bertembed service does not.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from safetensors import safe_open
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertEmbeddings


class TorchStep:
    """``transformers.models.bert.modeling_bert.BertEmbeddings`` in eval mode.

    Parameters
    ----------
    model_dir : str or os.PathLike
        Directory with config.json and model.safetensors.
    threads : int
        torch threads per call.

    Examples
    --------
    >>> step = TorchStep("out/")  # doctest: +SKIP
    >>> step(np.array([[101, 7592, 102]])).shape  # doctest: +SKIP
    (1, 3, 384)
    """

    name = "torch"

    def __init__(self, model_dir: str | os.PathLike[str], threads: int = 1) -> None:
        config = BertConfig.from_pretrained(model_dir)
        module = BertEmbeddings(config)
        state = {}
        with safe_open(os.path.join(model_dir, "model.safetensors"), framework="pt") as fh:
            for key in fh.keys():
                name = key.removeprefix("bert.")
                if name.startswith("embeddings."):
                    state[name.removeprefix("embeddings.")] = fh.get_tensor(key)
        module.load_state_dict(state, strict=False)
        missing = {n for n, _ in module.named_parameters()} - set(state)
        if missing:
            raise KeyError(f"{model_dir}/model.safetensors: no tensor(s) for {sorted(missing)}")
        self.module = module.eval()
        self.vocab_size = config.vocab_size
        self.threads = threads
        torch.set_num_threads(threads)

    def start(self, width: int) -> None:
        """Use ``threads`` torch threads per call in this process (after the fork)."""
        torch.set_num_threads(self.threads)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        """float32 (B, S, H) embeddings of int64 (B, S) ids (segment 0, positions 0..S-1)."""
        with torch.inference_mode():
            tensor = torch.from_numpy(ids)
            return self.module(input_ids=tensor, token_type_ids=torch.zeros_like(tensor)).numpy()
