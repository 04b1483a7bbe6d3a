"""bertembed: fast, safe BERT input embeddings for CPU inference.

Public names: :func:`bert_embeddings`, :class:`BertEmbeddings`, :class:`PositionRule`,
:func:`openmp_enabled`, :func:`max_threads`, :func:`show_config`, and the errors
:class:`CheckpointError` and :class:`UnsafeCheckpointError`.
"""

try:  # the compiled extension, which every module below needs: say so when it was never built
    from . import _kernel  # noqa: F401
except ImportError as _exc:
    import importlib.util as _util

    if _util.find_spec(f"{__name__}._kernel") is not None:
        raise  # built, but it does not load: that error says why
    raise ImportError(
        f"bertembed's compiled extension (bertembed._kernel) is not built in {__path__[0]}: "
        "this is an unbuilt source tree. Install the package (from the repository root: "
        "`pip install .`, or `pip install -e .` to develop), or build it in place with "
        "`python setup.py build_ext --inplace`; see the building page of the documentation.",
        name=f"{__name__}._kernel",
    ) from None

from ._api import bert_embeddings, max_threads, openmp_enabled
from ._config import show_config
from ._model import BertEmbeddings
from ._positions import PositionRule
from ._version import __version__
from ._weights.errors import CheckpointError, UnsafeCheckpointError

__all__ = [
    "BertEmbeddings",
    "CheckpointError",
    "PositionRule",
    "UnsafeCheckpointError",
    "__version__",
    "bert_embeddings",
    "max_threads",
    "openmp_enabled",
    "show_config",
]
