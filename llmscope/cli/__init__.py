"""The `llmscope` command line: the parser, `main`, and the list of command groups (one module each)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from llmscope.cli.common import DEFAULT_DB, CLIError, ParserContext
from llmscope.engine.textsafety import for_terminal

# The command groups, in the order `llmscope --help` lists them: each is a module of this
# package with `add_parsers(sub, ctx)` and its `cmd_*` functions. A new group is one more name.
COMMAND_GROUPS = (
    "run",
    "prepare",
    "database",
    "report",
    "view",
    "study",
    "irt",
    "surprisal",
    "rerun",
    "probeval",
)


def build_parser(settings: Any = None) -> argparse.ArgumentParser:
    """The argument parser; `settings` (from llmscope.toml files) supplies defaults beneath flags."""
    from llmscope import __version__
    from llmscope.runs.settings import Settings

    cfg: Settings = settings if settings is not None else Settings()
    env_db = os.environ.get("LLMSCOPE_DB")
    default_db = env_db or cfg.get("db") or DEFAULT_DB
    # $OPENAI_BASE_URL wins over a config file; the backend reads it when --base-url is absent.
    default_base_url = None if os.environ.get("OPENAI_BASE_URL") else cfg.get("base_url")

    p = argparse.ArgumentParser(
        prog="llmscope",
        description="A terminal microscope for LLM behaviour. With no command, opens the TUI.",
        epilog="Defaults can be set in ./llmscope.toml or ~/.config/llmscope/llmscope.toml "
        "(keys: db, model, base_url, concurrency, timeout, device, dtype, batch_size, threads); "
        "flags and environment variables win.",
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"llmscope {__version__}",
        help="print the version and exit",
    )
    p.add_argument("--db", default=default_db, help=f"DuckDB file (default {default_db})")
    p.add_argument(
        "--study",
        dest="open_study",
        metavar="NAME",
        help="with no command: open the TUI on this study's matrix",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    ctx = ParserContext(settings=cfg, default_db=default_db, default_base_url=default_base_url)
    for name in COMMAND_GROUPS:
        importlib.import_module(f"{__name__}.{name}").add_parsers(sub, ctx)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv` names (the TUI with none); the exit status."""
    from llmscope.runs.settings import SettingsError, load_settings

    try:
        settings = load_settings()
    except SettingsError as e:
        print(f"llmscope: error: {for_terminal(str(e))}", file=sys.stderr)
        return 2
    parser = build_parser(settings)
    args = parser.parse_args(argv)
    args._settings = settings  # which config values were refused (a project file's base_url)
    if not args.command:
        from llmscope.cli.view import cmd_tui

        args.func = cmd_tui
    from llmscope.engine.backend import BackendConfigError
    from llmscope.engine.config import ConfigError
    from llmscope.engine.errors import SuiteError
    from llmscope.engine.models import ModelSpecError
    from llmscope.engine.runner import RunBusy
    from llmscope.store.errors import StoreError

    try:
        return int(args.func(args) or 0)
    except (
        CLIError,
        SuiteError,
        StoreError,
        ModelSpecError,
        BackendConfigError,
        ConfigError,
        RunBusy,
    ) as e:
        print(f"llmscope: error: {for_terminal(str(e))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as e:  # a file the command was given that the system refuses (a name too long)
        name = str(e.filename or "")
        shown = name if len(name) <= 80 else f"{name[:60]}... ({len(name):,} characters)"
        print(
            for_terminal(f"llmscope: error: {shown + ': ' if shown else ''}{e.strerror or e}"),
            file=sys.stderr,
        )
        return 2
