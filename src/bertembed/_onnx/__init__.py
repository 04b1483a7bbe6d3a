"""Splitting a whole-model ONNX graph into a bertembed layer and an encoder (see :mod:`bertembed.onnx`).

- :mod:`.graph`: an index of a graph (producers, consumers, constants) and pruning;
- :mod:`.layernorm`: the four LayerNorm forms that end the embedding subgraph;
- :mod:`.lookups`: the table lookups summed before it, and what indexes them;
- :mod:`.rules`: the position rule, recovered by evaluating the index subgraph;
- :mod:`.contrib`: ONNX Runtime's fused ops for onnx's reference evaluator;
- :mod:`.cut`: the encoder graph that takes ``inputs_embeds``;
- :mod:`.layer`: the layer's files (config.json, model.safetensors) and the check.

Everything here imports ``onnx``; :mod:`bertembed.onnx` imports this package
only inside its functions. Of the package it imports only the safetensors
writer (:mod:`bertembed._checkpoints.safetensors_writer`), so that the layer's
files are written as ``save_pretrained`` writes its own.
"""
