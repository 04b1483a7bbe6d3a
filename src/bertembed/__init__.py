"""bertembed: fast, safe BERT input embeddings for CPU inference.

Public names: :func:`bert_embeddings`, :class:`BertEmbeddings`, :class:`PositionRule`,
:func:`openmp_enabled`, :func:`max_threads`, :func:`show_config`, and the errors
:class:`CheckpointError` and :class:`UnsafeCheckpointError`.
"""

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
