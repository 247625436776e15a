"""What the CLI's command groups share.

The user-facing error, opening the database, the backend config from flags, the endpoint
check, and the parsers' common defaults.

Kept out of the package's `__init__` (which builds the parser from every command group) so
that a command module never imports the module that imports it.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmscope.runs.settings import Settings

DEFAULT_DB = "llmscope.duckdb"


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


@dataclass(frozen=True)
class ParserContext:
    """What every command group's parsers share: the defaults from llmscope.toml and the environment."""

    settings: Settings
    default_db: str
    default_base_url: str | None  # None when $OPENAI_BASE_URL is set: the backend reads it

    def db_arg(self, sp: argparse.ArgumentParser) -> None:
        """`--db` on a subcommand (suppressed when absent, so the top-level `--db` holds)."""
        sp.add_argument(
            "--db", default=argparse.SUPPRESS, help=f"DuckDB file (default {self.default_db})"
        )

    def json_arg(self, sp: argparse.ArgumentParser, what: str) -> None:
        """`--json` printing `what` as JSON."""
        sp.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def add_request_flags(r: argparse.ArgumentParser) -> None:
    """An API model's request flags, shared by `run` and `rerun` (unset: the stored or default
    value)."""
    r.add_argument(
        "--max-retries",
        type=int,
        default=None,
        help="retries per API request on 429/5xx/timeouts (default 6)",
    )
    r.add_argument("--timeout", type=float, default=None, help="API request timeout in seconds")
    r.add_argument(
        "--samples", type=int, default=None, help="samples per item when an API gives no logprobs"
    )
    unset_flag(r, "--reasoning", "treat the API model as a reasoning model")


def add_report_flags(r: argparse.ArgumentParser) -> None:
    """What a run prints as it goes and when it ends (`run`, `rerun`)."""
    r.add_argument(
        "--quiet", action="store_true", help="no progress line, only warnings and the report"
    )
    r.add_argument(
        "--no-report", action="store_true", help="do not print the report when the run ends"
    )


def unset_flag(sp: argparse.ArgumentParser, flag: str, help: str, dest: str | None = None) -> None:
    """A store_true flag that stays None when absent, so the default (the task's, the old run's) holds."""
    kw: dict[str, Any] = {"dest": dest} if dest else {}
    sp.add_argument(flag, action="store_true", default=None, help=help, **kw)


def parse_opts(pairs: list[str] | None) -> dict[str, Any]:
    """`--opt key=value` pairs, parsed by the one parser the TUI form uses too."""
    from llmscope.engine.config import ConfigError, parse_options

    try:
        return parse_options(list(pairs or []))
    except ConfigError as e:
        raise CLIError(f"--opt: {e}") from None


LOCK_WAIT_S = float(os.environ.get("LLMSCOPE_LOCK_WAIT", "5"))


def open_store(path: str, read_only: bool = False) -> Any:
    """Open the database. A reader of a file another process writes reads a copy as of the
    writer's last flush (store/snapshot.py) and says so in one line on stderr; a writer that
    finds the file held waits up to LOCK_WAIT_S, then says who holds it."""
    import sys
    import time

    from llmscope.store.db import Store, StoreLocked

    if read_only and not Path(path).exists():
        raise CLIError(f"no database at {path} (run `llmscope run` first, or pass --db)")
    deadline = time.monotonic() + LOCK_WAIT_S
    delay = 0.1
    while True:
        try:
            store = Store(path, read_only=read_only, snapshot=read_only)
        except StoreLocked as e:
            if time.monotonic() + delay > deadline:
                raise CLIError(f"{e}{_holder(path, e.pid)} (waited {LOCK_WAIT_S:g}s)") from e
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
            continue
        note = store.writing_note()
        if note is not None:
            from llmscope.engine.textsafety import for_terminal

            print(f"llmscope: note: {for_terminal(note)}", file=sys.stderr)
        return store


# Tables a refused command may have filled before it refused (an import stores its suite first).
_DEFINITIONS = ("schema_version", "suites", "items")


def discard_if_unused(store: Any, created: bool) -> None:
    """After a refusal: remove the database file this command created (`created`: no file was at
    its path before it opened the store) while it holds no run, result or analysis (only the
    schema and suite definitions, which any run stores again), so a refused suite, task or
    import file leaves no database behind. A file that existed before, or that holds a run
    (another process's too), is kept; so is one that cannot be checked."""
    if not created or store.path == ":memory:":
        return
    try:
        tables = [
            str(t)
            for (t,) in store.execute(
                "SELECT table_name FROM duckdb_tables() WHERE NOT internal AND NOT temporary"
            ).fetchall()
        ]
        if any(
            store.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone()
            for t in tables
            if t not in _DEFINITIONS
        ):
            return
        store.checkpoint()  # nothing left in a .wal that closing would write back
        # removed while this process still holds the writer's lock: another process waiting
        # for the file finds no file and creates its own, never writes into this one
        for suffix in ("", ".wal"):
            Path(store.path + suffix).unlink(missing_ok=True)
    except Exception:  # best effort: the refusal itself is what the user must see
        return


def _holder(path: str, pid: int | None) -> str:
    """What the process holding the file is doing, from the live channel (never the locked file)."""
    from llmscope.runs.live import read_live

    try:
        snaps = read_live(path)
    except OSError:
        return ""
    bad = f"; {len(snaps.skipped)} unreadable live-channel file(s) skipped" if snaps.skipped else ""
    for snap in snaps:
        run = snap.get("run") or {}
        if snap.get("ended") or (pid is not None and run.get("owner_pid") not in (pid, None)):
            continue
        prog = snap.get("progress") or {}
        return (
            f"; it is writing run {run.get('run_id') or prog.get('run_id')} "
            f"({run.get('suite_name')} x {run.get('model')}, {prog.get('done')}/{prog.get('total')}){bad}"
        )
    return bad


# Fields of engine.config.BackendConfig that the `run` command's flags fill (flag dest = field).
CONFIG_FLAGS = (
    "base_url",
    "concurrency",
    "timeout",
    "max_retries",
    "top_logprobs",
    "samples",
    "reasoning",
    "reasoning_effort",
    "device",
    "dtype",
    "batch_size",
    "threads",
    "sp_prefix",
    "revision",
    "trust_remote_code",
    "adapter",
    "load_in_8bit",
    "load_in_4bit",
    "system_prompt",
    "chat",
    "seed",
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


def check_stored_code(args: argparse.Namespace, cfg: Any, stored_in: str | None) -> None:
    """A resumed or re-run run whose stored config allows the model's own Python code
    (`trust_remote_code`) runs that code only when the user says so now: `--trust-remote-code`
    or `--trust-db`. Someone else's database must not choose to run a hub model's code."""
    if stored_in is None or not getattr(cfg, "trust_remote_code", False):
        return
    if getattr(args, "trust_remote_code", None) or getattr(args, "trust_db", False):
        return
    yours = (
        "--trust-remote-code yourself, or --trust-db"
        if hasattr(args, "trust_remote_code")
        else "--trust-db"
    )
    raise CLIError(
        f"{stored_in} was made with --trust-remote-code (it runs {cfg.model}'s own Python "
        f"code); pass {yours} to allow it"
    )


def check_endpoints(
    args: argparse.Namespace, cfg: Any, say: Any, stored_in: str | None = None
) -> None:
    """Before any request to an API model: refuse a base URL that only a project file or someone
    else's database names, and print every endpoint with where it came from.

    `cfg` is the resolved BackendConfig; `stored_in` names the run and file its config was read
    from (`--resume`, `rerun`), in which case a stored base URL that no flag, environment
    variable or user config names needs `--trust-db` or a yes on a terminal.
    """
    import sys

    from llmscope.engine.openai import OPENAI_URL, expand_base_urls, public_url
    from llmscope.engine.openai.endpoints import check_base_url, shown_url
    from llmscope.runs.settings import Settings, trusted_endpoints, untrusted_endpoints

    if getattr(cfg, "kind", None) != "openai":
        return
    settings: Settings = getattr(args, "_settings", None) or Settings()
    flag = getattr(args, "base_url", None)
    env = os.environ.get("OPENAI_BASE_URL")
    user_src = settings.sources.get("base_url")
    urls = expand_base_urls(cfg.base_url)
    # A URL with a key in it (user:KEY@) is refused before it is printed, remembered or stored.
    for u in urls or expand_base_urls(env):
        check_base_url(u)
    if flag:
        source = "--base-url"
    elif urls and stored_in is not None:
        source = stored_in
        untrusted = untrusted_endpoints(urls, trusted_endpoints(settings))
        if untrusted and not getattr(args, "trust_db", False):
            shown = ", ".join(public_url(u) for u in urls)
            question = (
                f"{stored_in} sends requests (and $OPENAI_API_KEY) to {shown}, which none of "
                "your flags, environment or config names"
            )
            if sys.stdin.isatty() and sys.stderr.isatty():
                print(f"{question}. Continue? [y/N] ", end="", file=sys.stderr, flush=True)
                if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                    raise CLIError("stopped: the stored endpoint was not confirmed")
            else:
                raise CLIError(
                    f"{question}; pass --base-url yourself (the same URL to continue a run), "
                    "or --trust-db to use the stored one"
                )
        elif not untrusted:
            source += ", also named by your environment, config or an earlier run of yours"
        else:
            source += ", trusted with --trust-db"
    elif urls:
        source = str(user_src or "config")
    elif env:
        urls, source = [env.rstrip("/")], "$OPENAI_BASE_URL"
    else:
        urls, source = [OPENAI_URL], "default"
    project = settings.untrusted.get("base_url")
    if project is not None and not flag and stored_in is None:
        value, path = project
        why = (
            f"{path} sets base_url = {shown_url(str(value))!r}; a project file cannot choose where "
            "$OPENAI_API_KEY is sent"
        )
        if source == "default":
            raise CLIError(
                f"{why}. Pass --base-url, set OPENAI_BASE_URL, put base_url in your own "
                f"~/.config/llmscope/llmscope.toml, or name the file with LLMSCOPE_CONFIG={path}"
            )
        say("warning", f"{why}; ignored, using {source}")
    for u in urls:
        say("info", f"endpoint {public_url(u)} (from {source})")
    if stored_in is None or flag:
        _remember_endpoints(urls)


def _endpoints_file() -> Path:
    from llmscope.runs.settings import endpoints_file

    return endpoints_file()


def _used_endpoints() -> set[str]:
    from llmscope.runs.settings import used_endpoints

    return used_endpoints()


def used_endpoints() -> set[str]:
    """Endpoints the user chose before (flags, environment, config): trusted in a study file too."""
    return _used_endpoints()


def remember_endpoints(urls: list[str]) -> None:
    """Add endpoints the user chose (or trusted with --trust-study) to their own list."""
    _remember_endpoints(urls)


def _remember_endpoints(urls: list[str]) -> None:
    from llmscope.runs.settings import remember_endpoints as remember

    remember(urls)


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
