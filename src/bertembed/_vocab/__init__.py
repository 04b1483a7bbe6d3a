"""Choosing the token rows a trimmed layer keeps: by corpus, by id list, by Unicode script.

Owns reading a model's ``tokenizer.json`` for this (``tokenizer``), counting
the ids a corpus gives and measuring how well a kept set covers texts
(``corpus``), and the script rule (``scripts``). The public face is
:mod:`bertembed.trim`.

May import: ``bertembed._checkpoints.specials``, NumPy, the standard library
and, when a function needs them, the optional ``tokenizers`` and ``regex``
packages; never the layer or anything above it.
"""
