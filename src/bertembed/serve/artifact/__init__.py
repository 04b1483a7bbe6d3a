"""An artifact: the directory ``bertembed export`` writes and ``bertembed serve`` reads.

Its files: ``service.json`` (:mod:`.manifest`), ``encoder.onnx`` (the
transformer layers and the pooling, fused: :mod:`.fusion`), the embedding
layer the workers map (:mod:`.layer`), the tokenizer (:mod:`.tokens`) and
the model's sentence-transformers settings (:mod:`.model_config`). Built by
:mod:`.from_torch` (torch, transformers) or :mod:`.from_onnx` (onnx only).
"""

#: Table dtypes an artifact's embedding layer can be stored in (``bertembed export --table-dtype``).
TABLE_DTYPES = ("float32", "bfloat16", "int8")
