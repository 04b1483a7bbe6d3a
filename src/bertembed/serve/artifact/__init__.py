"""An artifact: the directory ``bertembed export`` writes and ``bertembed serve`` reads.

Its files: ``service.json`` (:mod:`.manifest`), ``encoder.onnx`` (the
transformer layers and the pooling, fused: :mod:`.fusion`), the embedding
layer the workers map (:mod:`.layer`), the tokenizer (:mod:`.tokens`) and
the model's sentence-transformers settings (:mod:`.model_config`). Built by
:mod:`.from_torch` (torch, transformers) or :mod:`.from_onnx` (onnx only).
"""

#: The table dtypes ``bertembed export --table-dtype`` offers (of those the layer stores: the float32 of
#: checkpoints and the two narrower ones a server saves memory with).
TABLE_DTYPES = ("float32", "bfloat16", "int8")
#: The encoder dtypes ``bertembed export --encoder-dtype`` offers (:mod:`.int8`). bfloat16 is not one:
#: ONNX Runtime's CPU provider has no bfloat16 matrix kernels on x86.
ENCODER_DTYPES = ("float32", "int8")
#: What a trimmed layer does with a token it does not keep (``bertembed export --unknown``).
UNKNOWN_RULES = ("error", "unk")
#: ``bertembed export --tokenizer``: reduced to what a layer trimmed with "error" can use, or whole.
TOKENIZER_CHOICES = ("reduced", "full")
#: Largest difference allowed between an artifact and the model it was built from on :data:`CHECK_TEXTS`
#: (bertembed's layer against the model's embedding module, ONNX Runtime against torch or the whole ONNX model).
CHECK_ATOL = 1e-4
#: The texts every build is checked on: short, empty, and long with accents, CJK and an emoji.
CHECK_TEXTS = ("A short sentence.", "", "Ünïcödé façade, 東京 and 🚀 " * 40)
