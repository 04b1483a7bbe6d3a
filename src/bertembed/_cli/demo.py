"""``bertembed demo``: the classic sentence-pair example, step by step."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from .. import bert_embeddings

# The classic sentence pair "The cat sat" / "It slept", WordPiece ids of
# bert-base-uncased, with hand-picked H = 4 rows for "cat" and "slept".
DEMO_TOKENS = ["[CLS]", "the", "cat", "sat", "[SEP]", "it", "slept", "[SEP]"]
DEMO_IDS = [101, 1996, 4937, 2938, 102, 2009, 14195, 102]
DEMO_SEGMENTS = [0, 0, 0, 0, 0, 1, 1, 1]


def demo_tables(vocab: int = 30522, hidden: int = 4) -> tuple[np.ndarray, ...]:
    """The demo's token, position and segment tables (hand-picked rows for the example, random elsewhere)."""
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


def _vec(values: Sequence[float], fmt: str = "+.2f") -> str:
    return "[" + ", ".join(f"{v:{fmt}}" for v in values) + "]"


def cmd_demo(args: argparse.Namespace) -> int:
    """Print the classic sentence-pair example, row by row."""
    tok, pos, seg = demo_tables()
    ids = np.array([DEMO_IDS])
    sids = np.array([DEMO_SEGMENTS])
    E = bert_embeddings(ids, sids, tok, pos, seg)
    positions = list(range(len(DEMO_IDS)))
    print('Sentence pair: "The cat sat" / "It slept"  (H = 4)')
    print(f"  token_ids    = {DEMO_IDS}")
    print(f"  position_ids = {positions}")
    print(f"  segment_ids  = {DEMO_SEGMENTS}")
    print()
    print(f"{'token':>8} {'token_id':>8} {'position':>8} {'segment':>7}  embedding")
    for s, name in enumerate(DEMO_TOKENS):
        print(f"{name:>8} {DEMO_IDS[s]:>8} {s:>8} {DEMO_SEGMENTS[s]:>7}  {_vec(E[0, s])}")
    print()
    print("[CLS] is in segment 0; positions run 0..7 across both sentences (no reset).")
    print("Each row is token + position + segment (a sum, not a concatenation):")
    print("  cat   = [0.12,-0.45,0.78,0.33] + [0.05,0.11,-0.03,0.22] + [0.08,-0.14,0.06,0.19]")
    print(f"        = {_vec(E[0, 2], '.2f')}")
    print("  slept = [-0.31,0.56,0.14,-0.27] + [0.18,-0.07,0.29,0.03] + [-0.11,0.22,-0.09,0.15]")
    print(f"        = {_vec(E[0, 6], '.2f')}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``demo`` on the subcommand parsers ``sub``."""
    demo = sub.add_parser(
        "demo",
        help='the classic sentence-pair example ("The cat sat" / "It slept"), step by step',
        description='Embed the pair "The cat sat" / "It slept" with tiny H = 4 tables and '
        "print the token, position and segment ids and each summed row.",
    )
    demo.set_defaults(func=cmd_demo)
