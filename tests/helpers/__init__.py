"""Helpers shared by the test suite (not tests themselves).

- ``reference``: the plain-NumPy reference every kernel result is compared with;
- ``table_conversion``: the NumPy twin of table conversion (int8, float16, bfloat16);
- ``family_twin``, ``hf_families``: model families' embedding rules in NumPy, and
  tiny checkpoints of each family made with transformers;
- ``weights``: writers of safetensors and ``torch.save`` files for reader tests;
- ``hostile_checkpoints``: the corpus of hostile checkpoint files;
- ``onnx_exports``: small whole-model ONNX exports;
- ``sanitizer``: what to skip under AddressSanitizer;
- ``cpu``: the row kernel this machine should get, told without bertembed;
- ``gil``: whether a function lets other Python threads run (releases the GIL);
- ``windows``: Windows' file rules, simulated.

Imported as ``helpers.<module>``: ``tests/`` is on ``sys.path`` (pytest puts
the directory of ``conftest.py`` there; the fuzz scripts add it themselves).
"""
