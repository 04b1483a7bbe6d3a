"""Load an artifact as a worker would, once, before any worker starts: ``bertembed serve``'s preflight.

Run as ``python -m bertembed.serve.server.check OUT_DIR`` in a child process
(:func:`check_artifact`), so that a file that makes a library abort, or eats
the memory, costs the child and not the server. It loads ``service.json``,
the tokenizer, the embedding layer and the encoder, and embeds one text
through the whole pipeline; before each step it prints the file it is about
to read, so the parent can name the file even when the child dies of a
signal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Seconds the check may take (a big encoder on a busy machine loads in well under this).
CHECK_TIMEOUT = 300.0
#: The line before each step: ``checking <file>``.
STEP = "checking "


class ArtifactError(RuntimeError):
    """The artifact cannot be served: the message names the file and what is wrong with it."""


def _steps(out_dir: Path) -> None:
    """The child's work: each file in the order a worker reads it, then one text end to end."""
    from ..artifact.manifest import SERVICE_FILE, read_service_config

    def step(path: Path | str) -> None:
        print(f"{STEP}{path}", flush=True)

    step(out_dir / SERVICE_FILE)
    config = read_service_config(out_dir)
    tokenizer = Path(config["sentence"]["tokenizer_dir"]) / "tokenizer.json"
    step(tokenizer)
    from tokenizers import Tokenizer

    Tokenizer.from_file(str(tokenizer))
    step(Path(config["embeddings"]["path"]) / "model.safetensors")
    from .pipeline import SentenceEmbedder

    embedder = SentenceEmbedder(out_dir, threads=1)
    step(config["encoder"]["path"])
    embedder.start()
    # The text's tokens that a trimmed layer keeps (a strict layer refuses the others, by design).
    vectors = embedder.encode(embedder._kept_only(embedder.tokenize(["Checking the artifact."])))
    if vectors.shape != (1, embedder.dimension):
        raise ArtifactError(f"{out_dir}: one text gave shape {vectors.shape}, expected (1, {embedder.dimension})")
    step("done")


def check_artifact(out_dir: str | os.PathLike[str], timeout: float = CHECK_TIMEOUT) -> None:
    """Load the artifact in a child process as a worker would; raise :class:`ArtifactError` if it fails.

    Parameters
    ----------
    out_dir : str or os.PathLike
        The artifact directory.
    timeout : float
        Seconds the child may take.

    Raises
    ------
    ArtifactError
        The child failed, died or took too long; the message names the file
        it was reading and the child's last error line.

    Examples
    --------
    >>> check_artifact("out/")  # doctest: +SKIP
    """
    argv = [sys.executable, "-m", "bertembed.serve.server.check", str(out_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        at = _last_step(exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace"))
        raise ArtifactError(f"{at}: loading it took more than {timeout:.0f} s") from None
    at = _last_step(done.stdout)
    if done.returncode == 0 and at == "done":
        return
    if done.returncode < 0:
        why = f"the process loading it died of signal {-done.returncode}"
    else:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else f"the process loading it exited with status {done.returncode}"
    raise ArtifactError(f"{at}: cannot be served: {why}")


def _last_step(stdout: str) -> str:
    steps = [line[len(STEP) :] for line in stdout.splitlines() if line.startswith(STEP)]
    return steps[-1] if steps else "(the artifact)"


def main(argv: list[str] | None = None) -> int:
    """``python -m bertembed.serve.server.check OUT_DIR``: exit 0 when the artifact loads and embeds."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bertembed.serve.server.check OUT_DIR", file=sys.stderr)
        return 2
    try:
        _steps(Path(args[0]))
    except Exception as exc:
        print(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
