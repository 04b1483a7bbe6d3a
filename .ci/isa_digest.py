"""Digests of the kernel's results for every row-kernel instruction set.

Two builds of bertembed (say GCC and clang) must give the same bits for the
same instruction set. This script computes a fixed set of embeddings (every
table and result dtype, int8 token tables, LayerNorm with and without bias,
widths with and without scalar tails, values that overflow float16 or are
subnormal in it, NaN and infinities) once per instruction set the CPU runs,
and writes one SHA-256 per case:

    python .ci/isa_digest.py write OUT.json      # with the installed build
    python .ci/isa_digest.py compare A.json B.json
    python .ci/isa_digest.py compare --common A.json B.json

``compare`` fails (exit 1) on any case whose digest differs, and when the
two files did not run the same instruction sets (with ``--common``: when
they have none in common; a build without some row kernel, such as the
MSVC-shaped one without AVX-512, is compared on the ones it has).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys

ISAS = ("baseline", "avx2", "avx512")


def _cases() -> dict[str, str]:
    import ml_dtypes
    import numpy as np

    import bertembed
    from bertembed import BertEmbeddings

    bf16 = np.dtype(ml_dtypes.bfloat16)
    tables = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": bf16}
    results = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": bf16}
    out: dict[str, str] = {}
    for h in (5, 37, 384, 768):
        rng = np.random.default_rng(h)
        tok, pos, seg = (rng.standard_normal((n, h)) for n in (50, 16, 2))
        # Values at the edges of the 16-bit formats: float16 overflow and
        # subnormals, and non-finite values (which LayerNorm spreads over the row).
        tok[1, : h // 2 + 1] *= 7e4
        tok[2, :] *= 3e-6
        tok[3, 0], tok[4, h - 1], tok[5, h // 2] = np.nan, np.inf, -np.inf
        ids = rng.integers(0, 50, (3, 16))
        ids[0, :6] = [1, 2, 3, 4, 5, 1]
        sids = rng.integers(0, 2, (3, 16))
        w, b = rng.uniform(0.5, 2, h), rng.standard_normal(h)
        lns = {"none": {}, "ln": {"ln_weight": w, "ln_bias": b}, "ln-nobias": {"ln_weight": w}}
        for (tn, tdt), (sn, sdt), (rn, rdt), (ln, kw) in itertools.product(
            tables.items(), tables.items(), results.items(), lns.items()
        ):
            got = bertembed.bert_embeddings(
                ids,
                sids,
                tok.astype(tdt),
                pos.astype(sdt),
                seg.astype(sdt),
                dtype=rdt,
                num_threads=1,
                **kw,
            )
            out[f"h{h}-tok_{tn}-small_{sn}-out_{rn}-{ln}"] = hashlib.sha256(got.tobytes()).hexdigest()
        for rn, rdt in (("f32", np.float32), ("f64", np.float64)):
            layer = BertEmbeddings(tok[6:], pos, seg, ln_weight=w, ln_bias=b, table_dtype="int8", dtype=rdt)
            got = layer(np.minimum(ids, 43), sids)
            out[f"h{h}-tok_int8-out_{rn}-ln"] = hashlib.sha256(got.tobytes()).hexdigest()
    return out


def _one_isa() -> None:
    from bertembed._core import _kernel

    json.dump({"isa": _kernel.build_info()["isa"], "cases": _cases()}, sys.stdout)


def write(path: str) -> None:
    from bertembed._core import _kernel

    info = _kernel.build_info()
    data: dict[str, object] = {"compiler": info["compiler"], "isas": {}}
    for isa in ISAS:
        env = dict(os.environ, BERTEMBED_ISA=isa)
        res = subprocess.run([sys.executable, __file__, "_one"], env=env, capture_output=True, text=True, check=True)
        got = json.loads(res.stdout)
        if got["isa"] != isa:  # the CPU does not run it
            print(f"{info['compiler']}: {isa} not available (this CPU or this build)")
            continue
        data["isas"][isa] = got["cases"]  # type: ignore[index]
        print(f"{info['compiler']}: {isa}: {len(got['cases'])} cases")
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)


def compare(a_path: str, b_path: str, common: bool = False) -> int:
    with open(a_path) as f:
        a = json.load(f)
    with open(b_path) as f:
        b = json.load(f)
    bad = 0
    if sorted(a["isas"]) != sorted(b["isas"]):
        print(f"different instruction sets: {sorted(a['isas'])} vs {sorted(b['isas'])}")
        bad += 0 if common else 1
    if not set(a["isas"]) & set(b["isas"]):
        print("no instruction set in common")
        bad += 1
    for isa in sorted(set(a["isas"]) & set(b["isas"])):
        ca, cb = a["isas"][isa], b["isas"][isa]
        differ = sorted(k for k in set(ca) | set(cb) if ca.get(k) != cb.get(k))
        for k in differ[:20]:
            print(f"{isa}: {k} differs")
        bad += len(differ)
        print(f"{isa}: {len(ca) - len(differ)} of {len(ca)} cases identical ({a['compiler']} vs {b['compiler']})")
    return 1 if bad else 0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "_one":
        _one_isa()
    elif cmd == "write" and len(sys.argv) == 3:
        write(sys.argv[2])
    elif cmd == "compare" and len(sys.argv) == 4:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    elif cmd == "compare" and len(sys.argv) == 5 and sys.argv[2] == "--common":
        sys.exit(compare(sys.argv[3], sys.argv[4], common=True))
    else:
        sys.exit(__doc__)
