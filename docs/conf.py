"""Sphinx configuration of the bertembed documentation.

Build (warnings are errors, broken cross-references included)::

    pip install ".[docs]"
    python -m sphinx -W --keep-going -b html docs docs/_build/html

The build needs no network: no intersphinx inventories are fetched. The
performance figures are drawn from ``docs/_data/bench.json`` (written by
``bertembed bench --json``) by the local extension ``_ext/bench_figure.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import bertembed

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

# -- Project ------------------------------------------------------------------

project = "bertembed"
author = "bertembed developers"
copyright = "bertembed developers"
release = bertembed.__version__
version = ".".join(release.split(".")[:2])

# -- Extensions ---------------------------------------------------------------

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.extlinks",
    "sphinx.ext.intersphinx",
    "numpydoc",
    "myst_parser",
    "bench_figure",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_data", "_ext", "_templates"]
templates_path = ["_templates"]

# A broken cross-reference is an error (with -W). The build must not need the
# network, so no intersphinx inventory is fetched (an entry here would have to
# name a local inventory file). Signatures carry no type hints (numpydoc's
# sections give the types, as plain text), so no object of another project is
# referenced today; one that a docstring comes to reference must be listed in
# nitpick_ignore, explicitly, as ("py:class", "numpy.ndarray").
nitpicky = True
nitpick_ignore: list[tuple[str, str]] = []
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}
intersphinx_disabled_reftypes = ["*"]

# -- API reference (autodoc, autosummary, numpydoc) ----------------------------

autosummary_generate = True  # stub pages go to reference/generated/ (not in git)
autodoc_typehints = "none"  # numpydoc's "Parameters" sections carry the types
autodoc_default_options = {"members": False}
numpydoc_show_class_members = False  # the class template lists them
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

# -- Links ---------------------------------------------------------------------

repository = "https://github.com/bertembed/bertembed"
extlinks = {
    "source": (f"{repository}/tree/main/%s", "%s"),
    "issue": (f"{repository}/issues/%s", "issue %s"),
}

# -- Markdown (CHANGELOG.md) ----------------------------------------------------

myst_heading_anchors = 3

# -- HTML ----------------------------------------------------------------------

html_theme = "pydata_sphinx_theme"
html_title = f"bertembed {release}"
html_theme_options = {
    "github_url": repository,
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_sidebars = {"index": [], "changelog": []}
html_static_path: list[str] = []
html_show_sourcelink = False

# -- Performance figures -------------------------------------------------------

bench_json = "_data/bench.json"
