"""Helpers shared by the CLI's command modules (llmscope/cli.py, llmscope/toolkit2.py).

Kept out of cli.py so that a command module can use them without importing the CLI
(which imports every command module to build its parser).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def parse_opts(pairs: list[str] | None) -> dict[str, Any]:
    """`--opt key=value` pairs, parsed by the one parser the TUI form uses too."""
    from llmscope.engine.config import ConfigError, parse_options

    try:
        return parse_options(list(pairs or []))
    except ConfigError as e:
        raise CLIError(f"--opt: {e}") from None


LOCK_WAIT_S = float(os.environ.get("LLMSCOPE_LOCK_WAIT", "5"))


def open_store(path: str, read_only: bool = False) -> Any:
    """Open the database; if another process holds it, wait up to LOCK_WAIT_S, then say who."""
    import time

    from llmscope.store.db import Store, StoreLocked

    if read_only and not Path(path).exists():
        raise CLIError(f"no database at {path} (run `llmscope run` first, or pass --db)")
    deadline = time.monotonic() + LOCK_WAIT_S
    delay = 0.1
    while True:
        try:
            return Store(path, read_only=read_only)
        except StoreLocked as e:
            if time.monotonic() + delay > deadline:
                raise CLIError(f"{e}{_holder(path, e.pid)} (waited {LOCK_WAIT_S:g}s)") from e
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def _holder(path: str, pid: int | None) -> str:
    """What the process holding the file is doing, from the live channel (never the locked file)."""
    from llmscope.live import read_live

    try:
        snaps = read_live(path)
    except OSError:
        return ""
    for snap in snaps:
        run = snap.get("run") or {}
        if snap.get("ended") or (pid is not None and run.get("owner_pid") not in (pid, None)):
            continue
        prog = snap.get("progress") or {}
        return (f"; it is writing run {run.get('run_id') or prog.get('run_id')} "
                f"({run.get('suite_name')} x {run.get('model')}, {prog.get('done')}/{prog.get('total')})")
    return ""


# Fields of engine.config.BackendConfig that the `run` command's flags fill (flag dest = field).
CONFIG_FLAGS = (
    "base_url", "concurrency", "timeout", "max_retries", "top_logprobs", "samples", "reasoning",
    "reasoning_effort", "device", "dtype", "batch_size", "threads", "sp_prefix", "revision", "trust_remote_code", "adapter",
    "load_in_8bit", "load_in_4bit", "system_prompt", "chat", "seed",
)


def config_from_args(args: argparse.Namespace, base: Any = None) -> Any:
    """A BackendConfig from `run`'s flags: the flags given override `base` (a stored config on resume)."""
    import dataclasses

    from llmscope.engine.config import BackendConfig

    if base is not None:
        cfg = base
    else:  # a new run: llmscope.toml values beneath the flags
        defaults = dict(getattr(args, "config_defaults", None) or {})
        if isinstance(defaults.get("base_url"), str):
            defaults["base_url"] = [defaults["base_url"]]
        cfg = dataclasses.replace(BackendConfig(), **defaults)
    given = {k: getattr(args, k) for k in CONFIG_FLAGS if getattr(args, k, None) is not None}
    if getattr(args, "model", None) is not None:
        given["model"] = args.model
    return dataclasses.replace(cfg, **given)


def invocation(argv0: str | None = None) -> str:
    """The command that runs this llmscope again, as a user can paste it into the same shell:
    `llmscope` when that name on PATH is this program; otherwise the path it was started by
    (`.venv/bin/llmscope`, as the README installs it); `python -m llmscope` (this Python) when
    it was started as a module or from elsewhere (printed hints once said `llmscope ...` where no
    `llmscope` was on PATH)."""
    import shlex
    import shutil
    import sys

    a0 = sys.argv[0] if argv0 is None else argv0
    if Path(a0).name == "llmscope" and Path(a0).exists():
        found = shutil.which("llmscope")
        if found and Path(found).resolve() == Path(a0).resolve():
            return "llmscope"
        return shlex.quote(a0)
    return f"{shlex.quote(sys.executable)} -m llmscope"
