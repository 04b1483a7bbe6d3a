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

Imported as ``helpers.<module>`` and by no other name: ``tests/`` is on
``sys.path``. pytest puts it there (the directory of ``conftest.py``); a script
under ``tests/`` (the fuzz targets, ``replay.py``, ``campaign.py``) or a child
process that imports the helpers gets it from ``PYTHONPATH``, set by whoever
starts it (``helpers.paths.env_with_helpers`` for the tests' children). No
module here or in the fuzz scripts edits ``sys.path``; ``hostile_checkpoints``,
a helper that is also a program, runs as ``python -m helpers.hostile_checkpoints``.
"""
