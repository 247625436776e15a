"""`llmscope view`: the TUI, read-only; with no command, `llmscope` opens the TUI."""

from __future__ import annotations

import argparse
from typing import Any

from llmscope.cli.common import ParserContext


def cmd_view(args: argparse.Namespace) -> int:
    from llmscope.tui.app import run_app

    return run_app(db=args.db, run=args.run, watch=True, study=args.open_study)


def cmd_tui(args: argparse.Namespace) -> int:
    from llmscope.tui.app import run_app

    return run_app(db=args.db, study=getattr(args, "open_study", None))


def add_parsers(sub: Any, ctx: ParserContext) -> None:
    """Register `view` (alias `watch`)."""
    s = sub.add_parser(
        "view", aliases=["watch"], help="watch runs live (also from another terminal)"
    )
    ctx.db_arg(s)
    s.add_argument("--run", help="open this run (id or prefix) directly")
    s.add_argument(
        "--study",
        dest="open_study",
        metavar="NAME",
        help="open this study's matrix (its name, as `study status NAME`)",
    )
    s.set_defaults(func=cmd_view)
