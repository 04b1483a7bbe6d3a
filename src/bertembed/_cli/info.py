"""``bertembed info``: what this build is and can do (``bertembed.show_config`` as a command)."""

from __future__ import annotations

import argparse
import json

from .._core.runtime import config


def cmd_info(args: argparse.Namespace) -> int:
    """Print the facts of this build, as ``key: value`` lines or JSON."""
    facts = config()
    if args.json:
        print(json.dumps(facts, indent=2, default=str))
        return 0
    width = max(len(key) for key in facts)
    for key, value in facts.items():
        print(f"{key + ':':<{width + 1}} {value}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``info`` on the subcommand parsers ``sub``."""
    info = sub.add_parser(
        "info",
        help="version, OpenMP, threads, compiler and dtypes of this build",
        description="Print what this build of bertembed is and can do.",
    )
    info.add_argument("--json", action="store_true", help="print the facts as JSON")
    info.set_defaults(func=cmd_info)
