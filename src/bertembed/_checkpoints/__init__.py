"""Checkpoints: reading Hugging Face weights files into tables, and the saved-layer format.

Owns the model families' embedding rules as data (``families``), loading a
checkpoint directory or file (``load``), the layer format that
``save_pretrained`` writes and maps back (``save``), the package's one
safetensors writer (``safetensors_writer``: aligned, atomic; also used by the
ONNX splitter), which files this process maps and the refusal to replace
one where Windows forbids it (``mapped``), the errors every refusal raises
(``errors``) and the file
readers (``readers/``: safetensors, sharded indexes, ``torch.save`` archives,
read without torch or pickle code).

May import: ``bertembed._core`` and the standard library; never the layer
(``bertembed._layer``) or anything above it.
"""
