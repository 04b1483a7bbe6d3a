"""The ``bertembed`` command line (stdlib argparse)."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ._api import bert_embeddings

# The seed's sentence pair "The cat sat" / "It slept", WordPiece ids of
# bert-base-uncased, with the seed's H = 4 rows for "cat" and "slept".
DEMO_TOKENS = ["[CLS]", "the", "cat", "sat", "[SEP]", "it", "slept", "[SEP]"]
DEMO_IDS = [101, 1996, 4937, 2938, 102, 2009, 14195, 102]
DEMO_SEGMENTS = [0, 0, 0, 0, 0, 1, 1, 1]


def _demo_tables(vocab: int = 30522, hidden: int = 4) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    tok = np.round(rng.uniform(-0.5, 0.5, (vocab, hidden)), 2)
    pos = np.round(rng.uniform(-0.3, 0.3, (512, hidden)), 2)
    seg = np.round(rng.uniform(-0.2, 0.2, (2, hidden)), 2)
    tok[4937] = [0.12, -0.45, 0.78, 0.33]
    tok[14195] = [-0.31, 0.56, 0.14, -0.27]
    pos[2] = [0.05, 0.11, -0.03, 0.22]
    pos[6] = [0.18, -0.07, 0.29, 0.03]
    seg[0] = [0.08, -0.14, 0.06, 0.19]
    seg[1] = [-0.11, 0.22, -0.09, 0.15]
    return tok, pos, seg


def cmd_demo(args: argparse.Namespace) -> int:
    tok, pos, seg = _demo_tables()
    ids = np.array([DEMO_IDS])
    sids = np.array([DEMO_SEGMENTS])
    E = bert_embeddings(ids, sids, tok, pos, seg)
    print('Sentence pair: "The cat sat" / "It slept"  (H = 4)')
    print(f"{'token':>8} {'token_id':>8} {'position':>8} {'segment':>7}  embedding")
    for s, name in enumerate(DEMO_TOKENS):
        row = ", ".join(f"{v:+.2f}" for v in E[0, s])
        print(f"{name:>8} {DEMO_IDS[s]:>8} {s:>8} {DEMO_SEGMENTS[s]:>7}  [{row}]")
    print()
    print("[CLS] is in segment 0; positions run 0..7 across both sentences (no reset).")
    print("Each row is token + position + segment (a sum, not a concatenation):")
    print("  cat   = [0.12,-0.45,0.78,0.33] + [0.05,0.11,-0.03,0.22] + [0.08,-0.14,0.06,0.19]")
    print("  slept = [-0.31,0.56,0.14,-0.27] + [0.18,-0.07,0.29,0.03] + [-0.11,0.22,-0.09,0.15]")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertembed", description="Fast, safe BERT input embeddings."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the seed's sentence-pair example, step by step")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
