"""bertembed: fast, safe BERT input embeddings for CPU inference.

Public names: :func:`bert_embeddings`, :class:`BertEmbeddings`, :class:`PositionRule`,
:func:`openmp_enabled`, :func:`max_threads`, :func:`set_num_threads`,
:func:`get_num_threads`, :func:`set_result_cache`, :func:`show_config`, and the errors
:class:`CheckpointError` and :class:`UnsafeCheckpointError`.
"""

from ._core import openmp_env as _openmp_env

try:  # the compiled extension, which every module below needs: say so when it was never built
    with _openmp_env.kernel_import():  # knobs checked; idle OpenMP workers sleep (_core/openmp_env.py)
        from ._core import _kernel  # noqa: F401
except ImportError as _exc:
    import importlib.util as _util

    if _util.find_spec(f"{__name__}._core._kernel") is not None:
        raise  # built, but it does not load: that error says why
    raise ImportError(
        f"bertembed's compiled extension (bertembed._core._kernel) is not built in {__path__[0]}/_core: "
        "this is an unbuilt source tree. Install the package (from the repository root: "
        "`pip install .`, or `pip install -e .` to develop), or build it in place with "
        "`python setup.py build_ext --inplace`; see the building page of the documentation.",
        name=f"{__name__}._core._kernel",
    ) from None

from ._checkpoints.errors import CheckpointError, UnsafeCheckpointError
from ._core.pool import set_result_cache
from ._core.positions import PositionRule
from ._core.runtime import get_num_threads, max_threads, openmp_enabled, set_num_threads, show_config
from ._function import bert_embeddings
from ._layer import BertEmbeddings
from ._version import __version__

__all__ = [
    "BertEmbeddings",
    "CheckpointError",
    "PositionRule",
    "UnsafeCheckpointError",
    "__version__",
    "bert_embeddings",
    "get_num_threads",
    "max_threads",
    "openmp_enabled",
    "set_num_threads",
    "set_result_cache",
    "show_config",
]
