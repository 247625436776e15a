"""The `llmscope` command line."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from llmscope.cli_common import CONFIG_FLAGS as CONFIG_FLAGS
from llmscope.cli_common import LOCK_WAIT_S as LOCK_WAIT_S
from llmscope.cli_common import CLIError as CLIError
from llmscope.cli_common import check_endpoints
from llmscope.cli_common import config_from_args as config_from_args
from llmscope.cli_common import open_store as _open_store
from llmscope.cli_common import parse_opts as _parse_opts

DEFAULT_DB = "llmscope.duckdb"


def _check_positive(flag: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise CLIError(f"{flag} must be a positive number of items (1 or more), got {value}")


# -- commands ---------------------------------------------------------------------------------
class StopSignals:
    """SIGTERM and SIGHUP (a closed terminal, `timeout`, a service stop) act like Ctrl-C:
    the run flushes, is marked `interrupted`, ends its live channel and prints the resume
    command. A second signal exits at once."""

    NAMES = ("SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        self.received: int | None = None
        # A signal this process inherited as ignored stays ignored: `nohup llmscope run ... &`
        # ignores SIGHUP so that the run outlives its terminal (a non-interactive shell's `&`
        # does the same to SIGINT, which Python then leaves alone too).
        self.signals = [getattr(signal, n) for n in self.NAMES
                        if hasattr(signal, n) and signal.getsignal(getattr(signal, n)) is not signal.SIG_IGN]
        self._old: dict[int, Any] = {}

    @staticmethod
    def _main_thread() -> bool:
        # Python delivers signals to the main thread only; `main()` called from another thread
        # (a library user, a test) leaves the handlers alone.
        import threading

        return threading.current_thread() is threading.main_thread()

    def install(self) -> None:
        """Outside the event loop (loading, reporting): raise KeyboardInterrupt like Ctrl-C."""
        if not self._main_thread():
            return
        for sig in self.signals:
            old = signal.signal(sig, self._sync)
            self._old.setdefault(sig, old)

    def attach(self, loop: Any, task: Any) -> None:
        """Inside the event loop: cancel the run's task, which stops the runner cleanly."""
        if not self._main_thread():
            return
        for sig in self.signals:
            loop.add_signal_handler(sig, self._cancel, sig, task)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def exit_code(self) -> int:
        return 128 + (self.received or signal.SIGINT)

    def _note(self, signum: int) -> None:
        if self.received is not None:
            os._exit(128 + signum)  # the second signal: no flush, no cleanup
        self.received = signum

    def _sync(self, signum: int, frame: Any) -> None:
        self._note(signum)
        raise KeyboardInterrupt

    def _cancel(self, signum: int, task: Any) -> None:
        self._note(signum)
        task.cancel()


def cmd_run(args: argparse.Namespace) -> int:
    stop = StopSignals()
    args._stop_signals = stop
    try:
        stop.install()
        return _cmd_run(args)
    except KeyboardInterrupt:
        # Ctrl-C before scoring started (loading the model, reading the suite): nothing to keep.
        print("\ninterrupted before any item was scored; run the same command again to start.", file=sys.stderr)
        return stop.exit_code()
    finally:
        stop.restore()


def _cmd_run(args: argparse.Namespace) -> int:
    from llmscope.console import ConsoleReporter
    from llmscope.engine.runner import RunInterrupted
    from llmscope.report import build_report, format_rows
    from llmscope.runstart import RunComplete, RunRequest, execute, prepare_run, start_run
    from llmscope.store.db import StoreError

    _check_positive("--limit", args.limit)
    if not args.resume:
        config_from_args(args).validate()  # bad numbers stop before the database is touched
    store = _open_store(args.db)
    try:
        task_opts = _parse_opts(args.opt)
        suite_name, suite_path = args.suite, args.suite_path
        plan_info = None
        if getattr(args, "plan", None):  # pre-registration (llmscope/plan.py)
            from llmscope.plan import PlanError, plan_hash, read_plan

            try:
                plan_body = read_plan(args.plan)
            except PlanError as e:
                raise CLIError(str(e)) from e
            suite_name = suite_name or plan_body["suite"]
            suite_path = suite_path or plan_body.get("suite_path")
            plan_model = next(iter(plan_body.get("models") or []), None)
            if args.model is None and plan_model not in (None, "default"):
                args.model = plan_model
            task_opts = {**(plan_body.get("task_options") or {}), **task_opts}
            if args.seed is None:
                args.seed = int(plan_body.get("seed", 0))
            plan_info = (plan_body, plan_hash(args.plan), str(args.plan))
        given = {k: getattr(args, k) for k in CONFIG_FLAGS if getattr(args, k, None) is not None}
        if args.model is not None:
            given["model"] = args.model
        req = RunRequest(suite_name=suite_name, suite_path=suite_path, config=config_from_args(args),
                         task_options=task_opts, limit=args.limit, resume=args.resume, overrides=given,
                         retry_errors=not args.no_retry_errors, cache=not args.no_cache, plan=plan_info)
        reporter = ConsoleReporter(quiet=args.quiet)
        try:
            prep = prepare_run(store, req)  # the suite, options and stored run, checked with no model loaded
        except RunComplete as e:
            print(f"llmscope: {e}", file=sys.stderr)
            return 1 if e.n_errors else 0  # as a run that ends with errors stored
        check_endpoints(args, prep.config, reporter.on_message,
                        stored_in=(f"run {prep.existing['run_id']} in {args.db}"
                                   if args.resume and prep.existing is not None else None))
        reporter.on_message("info", f"loading model {prep.config.model or 'SmolLM2-135M-Instruct (embedded default)'} ...")
        started = start_run(store, prep, [reporter], db=args.db, warn=lambda m: reporter.on_message("warning", m))
        runner = started.runner
        import asyncio

        stop: StopSignals = getattr(args, "_stop_signals", None) or StopSignals()

        async def main() -> Any:
            stop.attach(asyncio.get_running_loop(), asyncio.current_task())
            # BackendConfigError from the probe ends the command with one line; the backend's
            # notices reach stderr once, through its logger.
            return await execute(started, lambda m: reporter.on_message("info", m))

        try:
            prog = asyncio.run(main())
        except (RunInterrupted, KeyboardInterrupt, asyncio.CancelledError):
            stop.install()  # closing the loop reset the handlers
            rid = runner.run_id
            if not rid:
                print("\ninterrupted before any item was scored; run the same command again to start.",
                      file=sys.stderr)
                return stop.exit_code()
            where = f"stored in {args.db}"
            try:
                store.checkpoint()
            except StoreError as e:
                where = f"kept, but not yet in the file alone: {e}"
            print(
                f"\ninterrupted: everything scored so far is {where}. "
                f"Resume with the same command, or: {resume_hint(rid, args.db)}",
                file=sys.stderr,
            )
            return stop.exit_code()
        except StoreError as e:
            if not runner.run_id:
                raise
            # The run is recorded `failed` with this error; everything stored is kept.
            raise CLIError(f"{e}. The run is marked failed; once fixed, continue it with: "
                           f"{resume_hint(runner.run_id, args.db)}") from e
        stop.install()
        run_row = store.get_run(prog.run_id)
        if not args.no_report and run_row:
            print(format_rows(build_report(store, run_row)))
        # The checked close: a run is reported done only once the file alone holds it (a full
        # disk during the final checkpoint leaves every row in the .wal; say so, exit 2).
        try:
            store.checkpoint()
        except StoreError as e:
            raise CLIError(f"run {prog.run_id} {prog.status}, but {e}") from e
        return 0 if prog.errors == 0 else 1
    finally:
        store.close()


def resume_hint(run_id: str, db: str) -> str:
    """The command that continues a run (its backend config is stored, so nothing else is
    needed), as it can be pasted: how this llmscope was started, and --db unless the default."""
    import shlex

    from llmscope.cli_common import invocation

    at = "" if str(db) == DEFAULT_DB else f" --db {shlex.quote(str(db))}"
    return f"{invocation()} run --resume {shlex.quote(run_id)}{at}"


def cmd_suites(args: argparse.Namespace) -> int:
    from llmscope.data.registry import external_suite, suite_names
    from llmscope.data.suites import SuiteError, load_suite

    rows = []
    for name in suite_names():
        entry = external_suite(name)
        if entry is not None:
            # Loaders of full third-party corpora: listed, not parsed (WorldSense is 87k trials).
            rows.append({"name": name, "task": entry.task, "items": None, "variants": None,
                         "description": f"full {name} corpus, read from --suite-path (or ../shared when present)"})
            continue
        try:
            s = load_suite(name)
            n: int | None = len(s.items())
            rows.append({"name": name, "task": s.task, "items": n, "variants": len(s.variant_names()),
                         "description": " ".join((s.description or "").split())})
        except SuiteError as e:  # a broken built-in suite is listed with its error
            rows.append({"name": name, "task": "?", "items": None, "variants": None,
                         "description": f"error: {e}"})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            n_txt = "-" if r["items"] is None else str(r["items"])
            print(f"{r['name']:<22} {r['task']:<12} {n_txt:>7}  {r['description'][:70]}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Read-only commands never change a file; this one upgrades it (as `run` or the TUI would)."""
    from llmscope.store.db import SCHEMA_VERSION, file_schema_version

    if not Path(args.db).exists():
        raise CLIError(f"no database at {args.db} (pass --db)")
    before = file_schema_version(args.db)
    store = _open_store(args.db)  # a write open migrates (all or nothing) or says why not
    try:
        store.checkpoint()
    finally:
        store.close()
    if before == SCHEMA_VERSION:
        print(f"{args.db} is already at schema {SCHEMA_VERSION}; nothing changed")
    else:
        print(f"{args.db}: schema {before} -> {SCHEMA_VERSION} (older llmscope versions cannot open it now)")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    store = _open_store(args.db, read_only=True)
    try:
        df = store.runs()
    finally:
        store.close()
    if args.json:
        print(df.to_json(orient="records", date_format="iso"))
        return 0
    if df.empty:
        print("(no runs)")
        return 0
    for r in df.itertuples():
        # the headline metric (metrics cache; worldsense_accuracy for a WorldSense run), named
        acc = "" if r.accuracy is None or r.accuracy != r.accuracy else f"{r.metric} {r.accuracy:.3f}"
        # a run row written by hand or by an old version may lack any of these: shown as "-"
        suite, model, status = (("-" if v is None or v != v else str(v)) for v in (r.suite_name, r.model, r.status))
        print(f"{r.run_id}  {suite:<20} {model[:32]:<32} {status:<22} "
              f"{r.n_done}/{r.n_total}  {acc}  {r.started_at}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from llmscope.report import build_report, explain_text, format_rows, worldsense_reports

    if getattr(args, "explain", False):
        print(explain_text())
        return 0
    store = _open_store(args.db, read_only=True)
    try:
        if args.run:
            run = store.find_run(args.run)
            if run is None:
                raise CLIError(f"no run {args.run!r} in {args.db}")
            runs = [run]
        else:
            runs = [r for r in (store.get_run(x) for x in store.runs()["run_id"]) if r is not None]
        if args.by:
            _check_by(store, runs, args.by)
        rows = []
        for run in runs:
            rows += build_report(store, run, args.by)
        ws_rows, ws_text = worldsense_reports(store, runs)
        if args.html:
            from llmscope.html_report import write_page

            try:
                write_page(store, runs, rows, args.html, source=Path(args.db).name, extra_rows=ws_rows)
            except OSError as e:
                raise CLIError(f"--html {args.html}: cannot write: {e.strerror or e}") from e
    finally:
        store.close()  # read-only: the metrics cache went to the file beside it (store/metrics_cache.py)
    if args.html:
        print(f"wrote {len(runs)} run(s) to {args.html}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows + ws_rows, indent=1, default=str))
    else:
        # a terminal's width: lines that would not fit wrap cleanly; a pipe or file: one line a row
        print(format_rows(rows, shutil.get_terminal_size().columns if sys.stdout.isatty() else None))
        for line in ws_text:
            print(line)
    return 0


def cmd_figure(args: argparse.Namespace) -> int:
    from llmscope.figures import FigureError, load_runs, write_figure

    store = _open_store(args.db, read_only=True)
    try:
        runs = []
        for rid in args.run:
            run = store.find_run(rid)
            if run is None:
                raise CLIError(f"no run {rid!r} in {args.db}")
            runs.append(run)
        try:
            write_figure(args.kind, load_runs(store, runs), args.output, style=args.style, item=args.item)
        except FigureError as e:
            raise CLIError(str(e)) from e
    finally:
        store.close()  # read-only: the metrics cache went to the file beside it
    print(f"wrote the {args.kind} figure of {len(runs)} run(s) to {args.output}", file=sys.stderr)
    return 0


RESULT_GROUP_COLUMNS = ("variant", "gold", "prediction", "item_id")


def _check_by(store: Any, runs: list[dict[str, Any]], by: list[str]) -> None:
    """Every --by must name an item field of each reported run's suite (or a result column)."""
    for run in runs:
        rows = store.execute(
            "SELECT DISTINCT unnest(json_keys(fields)) FROM items WHERE suite_id = ? AND fields IS NOT NULL",
            [run["suite_id"]],
        ).fetchall()
        known = sorted({str(r[0]) for r in rows} | set(RESULT_GROUP_COLUMNS))
        for name in by:
            if name not in known:
                raise CLIError(
                    f"--by {name}: not a field of suite {run.get('suite_name')} (run {run['run_id']}); "
                    f"allowed: {', '.join(known)}"
                )


def cmd_export(args: argparse.Namespace) -> int:
    from llmscope.export import ExportError, export_run

    store = _open_store(args.db, read_only=True)
    try:
        run = store.find_run(args.run)
        if run is None:
            raise CLIError(f"no run {args.run!r} in {args.db}")
        if args.format == "parquet" and not args.output:
            raise CLIError("--format parquet writes a binary file: pass -o FILE")
        n = export_run(store, run, args.format, args.output, force=args.force, raw=args.raw)
    except ExportError as e:
        raise CLIError(str(e)) from e
    finally:
        store.close()
    if args.output:
        print(f"wrote {n} rows to {args.output}", file=sys.stderr)
    return 0


def cmd_tokens(args: argparse.Namespace) -> int:
    from llmscope.engine.answers import answer_ids

    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise CLIError("`llmscope tokens` needs transformers: pip install 'llmscope[hf]'") from e
    path = Path(args.tokenizer)
    if not path.exists():
        raise CLIError(f"tokenizer folder not found: {path}")
    try:
        tok = AutoTokenizer.from_pretrained(str(path))
    except Exception as e:
        raise CLIError(f"cannot load a tokenizer from {path}: {e}") from e
    answers = [a.strip() for a in args.answers.split(",") if a.strip()]
    special = set(tok.all_special_ids)
    texts = tok.batch_decode([[i] for i in range(len(tok))], skip_special_tokens=False)
    ids = answer_ids(((i, t) for i, t in enumerate(texts) if i not in special), answers)
    if args.json:
        print(json.dumps(ids))
    else:
        for a, v in ids.items():
            print(f"{a}: {len(v)} tokens")
            for i in v:
                print(f"  {i:>8}  {texts[i]!r}")
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from llmscope.tui.app import run_app

    return run_app(db=args.db, run=args.run, watch=True)


def cmd_tui(args: argparse.Namespace) -> int:
    from llmscope.tui.app import run_app

    return run_app(db=args.db)


def cmd_import(args: argparse.Namespace) -> int:
    from llmscope import importers

    store = _open_store(args.db)
    try:
        if args.kind == "worldsense":
            msgs = importers.import_worldsense(store, Path(args.paths[0]))
        elif args.kind == "lm-eval":
            from llmscope.import_lm_eval import import_lm_eval

            msgs = import_lm_eval(store, [Path(p) for p in args.paths], suite_spec=args.suite, model=args.model)
        elif args.kind == "answers":
            msgs = importers.import_answer_sets(store, [Path(p) for p in args.paths],
                                                suite_path=args.suite_path, model=args.model)
        else:
            msgs = importers.import_results(store, [Path(p) for p in args.paths], suite_path=args.suite_path)
        store.checkpoint()
    finally:
        store.close()
    for m in msgs:
        print(m)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    import datetime as dt

    from llmscope.data.suites import load_suite
    from llmscope.plan import PLAN_VERSION, PlanError, write_plan

    suite = load_suite(args.suite, args.suite_path)
    suite.task_options = {**suite.task_options, **_parse_opts(args.opt)}
    suite.work(1)  # the suite and its design options are valid
    plan = {
        "llmscope_plan": PLAN_VERSION,
        "suite": args.suite,
        "suite_id": suite.suite_id,
        **({"suite_path": args.suite_path} if args.suite_path else {}),
        "models": args.model or ["default"],
        "task_options": _parse_opts(args.opt),
        "metrics": args.metric or ["accuracy"],
        "hypotheses": [{"id": f"H{i}", "text": h, "test": "paired-t"} for i, h in enumerate(args.hypothesis or [], 1)],
        "seed": args.seed,
        "alpha": args.alpha,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    try:
        digest = write_plan(args.output, plan, force=args.force)
    except PlanError as e:
        raise CLIError(str(e)) from e
    print(f"wrote plan {args.output} (sha256 {digest[:12]}); run it with: llmscope run --plan {args.output}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from llmscope.compare import CompareError, compare_runs, format_compare

    paths = args.db if isinstance(args.db, list) else [args.db]
    stores = []
    try:
        for path in dict.fromkeys(paths):  # the same file twice is opened once
            stores.append(_open_store(path, read_only=True))
        out = compare_runs(stores, args.runs)
    except CompareError as e:
        raise CLIError(str(e)) from e
    finally:
        for st in stores:
            st.close()
    print(json.dumps(out, indent=1, default=str) if args.json else format_compare(out))
    return 0


# -- parser -----------------------------------------------------------------------------------
def build_parser(settings: Any = None) -> argparse.ArgumentParser:
    """The argument parser; `settings` (from llmscope.toml files) supplies defaults beneath flags."""
    from llmscope import __version__
    from llmscope.engine.config import REASONING_EFFORTS
    from llmscope.settings import Settings

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
    p.add_argument("--version", action="version", version=f"llmscope {__version__}",
                   help="print the version and exit")
    p.add_argument("--db", default=default_db, help=f"DuckDB file (default {default_db})")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def db_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--db", default=argparse.SUPPRESS, help=f"DuckDB file (default {default_db})")

    def json_arg(sp: argparse.ArgumentParser, what: str) -> None:
        sp.add_argument("--json", action="store_true", help=f"print {what} as JSON")

    r = sub.add_parser("run", help="score a suite with a model and store per-item results")
    db_arg(r)
    r.add_argument("--suite", help="built-in suite name (see `llmscope suites`) or path of a suite spec")
    r.add_argument("--suite-path", help="data file or folder for loaders (commonsense CSV, WorldSense dir)")
    r.add_argument("--model", help="hf:<hub id or folder> | gguf:<file> | openai:<name>; default: embedded "
                   "SmolLM2-135M-Instruct (or `model` in llmscope.toml)")
    r.add_argument("--limit", type=int, help="only the first N items (1 or more)")
    # Backend flags default to None so that a resume can tell "given" from "not given": the
    # run's stored config (engine/config.py BackendConfig) fills the rest, and for a new run
    # llmscope.toml and then BackendConfig's defaults do.
    r.add_argument("--batch-size", type=int, default=None, help="prompts per forward pass (default 16)")
    r.add_argument("--device", default=None, help="auto (cuda > mps > cpu), cpu, cuda, cuda:1, mps")
    r.add_argument("--dtype", default=None, help="auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16, float16")
    r.add_argument("--threads", type=int, default=None,
                   help="torch threads for a local model on CPU (default: $OMP_NUM_THREADS, else the physical cores; 1 is best on a busy machine)")
    r.add_argument("--sp-prefix", action="store_true", default=None,
                   help="append the bare SentencePiece word-boundary piece to chat prompts (LLaMA-2 style models)")
    r.add_argument("--chat", dest="chat", action="store_true", default=None,
                   help="apply the chat template (default: the task's choice)")
    r.add_argument("--no-chat", dest="chat", action="store_false", help="score raw text, no chat template")
    r.add_argument("--revision", default=None, help="hub revision (branch, tag or commit) of a local model")
    r.add_argument("--trust-remote-code", action="store_true", default=None,
                   help="allow a hub model's own Python code (transformers trust_remote_code)")
    r.add_argument("--adapter", default=None, help="PEFT adapter folder or hub id applied to the local model (needs peft)")
    r.add_argument("--system-prompt", default=None, help="system message put before every chat prompt")
    r.add_argument("--load-in-8bit", action="store_true", default=None, help="8-bit weights (bitsandbytes; CUDA only)")
    r.add_argument("--load-in-4bit", action="store_true", default=None, help="4-bit weights (bitsandbytes; CUDA only)")
    r.add_argument("--opt", action="append", metavar="KEY=VALUE",
                   help="task option (value parsed as JSON, else text), repeatable; e.g. --opt permutations=2")
    r.add_argument("--seed", type=int, default=None,
                   help="seed for sampling and permutations (part of the run id; default 0)")
    r.add_argument("--resume", metavar="RUN",
                   help="continue a stored run (id or prefix; 'last') with the options it was made with")
    r.add_argument("--trust-db", action="store_true",
                   help="on resume, send requests (and $OPENAI_API_KEY) to the base URL stored in the "
                        "database without asking, even when no flag, environment or config of yours names it")
    r.add_argument("--no-retry-errors", action="store_true",
                   help="on resume, keep items stored as errors instead of scoring them again")
    r.add_argument("--base-url", action="append", default=None,
                   help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL, then llmscope.toml); repeat it, or "
                        "give @FILE with one URL per line, to spread requests round-robin over replicas of one model")
    r.add_argument("--concurrency", type=int, default=None, help="API requests in flight, per endpoint (default 8)")
    r.add_argument("--top-logprobs", type=int, default=None,
                   help="top log-probabilities asked of an API per position (default 20; the server's maximum when lower)")
    r.add_argument("--max-retries", type=int, default=None,
                   help="retries per API request on 429/5xx/timeouts (default 6)")
    r.add_argument("--timeout", type=float, default=None, help="API request timeout in seconds")
    r.add_argument("--samples", type=int, default=None, help="samples per item when an API gives no logprobs")
    r.add_argument("--reasoning", action="store_true", default=None, help="treat the API model as a reasoning model")
    r.add_argument("--reasoning-effort", default=None, metavar="EFFORT",
                   help=f"reasoning_effort sent with every chat request to an API model ({', '.join(REASONING_EFFORTS)}); "
                        "default: not sent, except 'minimal' (then 'low', then none) for reasoning models")
    r.add_argument("--no-cache", action="store_true",
                   help="do not reuse or store responses in the shared response cache")
    r.add_argument("--plan", help="a pre-registration plan file (llmscope plan): suite, model, options and seed "
                   "come from it; its hash is stored before any result")
    r.add_argument("--quiet", action="store_true", help="no progress line, only warnings and the report")
    r.add_argument("--no-report", action="store_true", help="do not print the report when the run ends")
    # llmscope.toml values for a new run (beneath flags; a resume uses the run's stored config)
    r.set_defaults(config_defaults={k: v for k, v in {
        "model": cfg.get("model"), "base_url": default_base_url, "concurrency": cfg.get("concurrency"),
        "timeout": cfg.get("timeout"), "device": cfg.get("device"), "dtype": cfg.get("dtype"),
        "batch_size": cfg.get("batch_size"), "threads": cfg.get("threads"),
    }.items() if v is not None})
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("suites", help="list built-in suites")
    json_arg(s, "the list")
    s.set_defaults(func=cmd_suites)

    s = sub.add_parser("runs", help="list runs in the database")
    db_arg(s)
    json_arg(s, "the runs")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("migrate", help="upgrade a database written by an older llmscope to this version's schema")
    db_arg(s)
    s.set_defaults(func=cmd_migrate)

    s = sub.add_parser("report", help="accuracy with 95%% CIs and other metrics")
    db_arg(s)
    s.add_argument("--run", help="run id or prefix (default: every run)")
    s.add_argument("--by", action="append", help="group by this item field (repeatable)")
    json_arg(s, "metric rows")
    s.add_argument("--explain", action="store_true", help="print how every metric is computed and exit")
    s.add_argument("--html", metavar="FILE", help="also write one self-contained offline page (metrics, figures, "
                   "failing items, method record)")
    s.set_defaults(func=cmd_report)

    from llmscope.figures import KINDS

    s = sub.add_parser("figure", help="draw a publication figure of runs (pdf, svg or png)")
    db_arg(s)
    s.add_argument("kind", choices=list(KINDS), help="what to draw: " + "; ".join(
        f"{k}: {v.title}" for k, v in KINDS.items()))
    s.add_argument("--run", action="append", required=True, help="run id or prefix ('last'); repeat to overlay runs")
    s.add_argument("-o", "--output", required=True, help="file to write: .pdf, .svg or .png")
    s.add_argument("--style", help="matplotlib style name or .mplstyle file applied over the defaults "
                   "(a journal's settings)")
    s.add_argument("--item", help="surprisal: the item to draw (default: the first)")
    s.set_defaults(func=cmd_figure)

    s = sub.add_parser("export", help="write a run's per-item results")
    db_arg(s)
    s.add_argument("--run", required=True, help="run id or prefix ('last' for the newest)")
    s.add_argument("--format", choices=["jsonl", "csv", "parquet", "worldsense", "lm-eval"], default="jsonl",
                   help="output format (default %(default)s; worldsense: the authors' results-file shape; "
                        "lm-eval: a folder of samples_<task>_<run>.jsonl and results_<run>.json, -o DIR)")
    s.add_argument("-o", "--output", help="file (folder for lm-eval); default: stdout for text formats")
    s.add_argument("--force", action="store_true", help="replace an existing output file")
    s.add_argument("--raw", action="store_true",
                   help="CSV: write cells starting with = + - @ tab CR unchanged (default: prefix ' so "
                        "spreadsheets show them as text)")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("tokens", help="list a tokenizer's answer-token ids")
    s.add_argument("--tokenizer", required=True, help="tokenizer folder (tokenizer.json / vocab files)")
    s.add_argument("--answers", default="yes,no", help="comma-separated answers (default %(default)s)")
    json_arg(s, "the ids")
    s.set_defaults(func=cmd_tokens)

    s = sub.add_parser("view", aliases=["watch"], help="watch runs live (also from another terminal)")
    db_arg(s)
    s.add_argument("--run", help="open this run (id or prefix) directly")
    s.set_defaults(func=cmd_view)

    s = sub.add_parser("import", help="import published results (worldsense DIR | results FILE... | answers FILE... | lm-eval SAMPLES.jsonl...)")
    db_arg(s)
    s.add_argument("kind", choices=["worldsense", "results", "answers", "lm-eval"], help="what the files are")
    s.add_argument("paths", nargs="+", help="the folder (worldsense) or files to import")
    s.add_argument("--suite-path", help="commonsense statements CSV (results) or CFC targets file (answers)")
    s.add_argument("--model", help="name of the imported answer set (answers) or model (lm-eval)")
    s.add_argument("--suite", help="lm-eval: the task YAML or suite the samples were scored on (default: "
                   "rebuilt from the samples)")
    s.set_defaults(func=cmd_import)

    s = sub.add_parser("plan", help="write a pre-registration plan (suite, models, options, hypotheses, seed)")
    s.add_argument("--suite", required=True, help="built-in suite name or path of a suite spec")
    s.add_argument("--suite-path", help="data file or folder for loaders")
    s.add_argument("--model", action="append", help="planned model (repeatable; default: the embedded model)")
    s.add_argument("--opt", action="append", metavar="KEY=VALUE", help="task option (JSON value), repeatable")
    s.add_argument("--metric", action="append", help="planned analysis metric (repeatable; default accuracy)")
    s.add_argument("--hypothesis", action="append",
                   help="e.g. 'accuracy(q1) > accuracy(q2)' or 'p_yes(q1) < 0.5' (repeatable)")
    s.add_argument("--seed", type=int, default=0, help="seed the planned runs use (default 0)")
    s.add_argument("--alpha", type=float, default=0.05, help="one-sided test level (default 0.05)")
    s.add_argument("-o", "--output", required=True, help="plan file to write (YAML)")
    s.add_argument("--force", action="store_true", help="replace an existing plan file")
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("compare", help="compare runs on the same suite (paired tests)")
    s.add_argument("--db", action="append", default=argparse.SUPPRESS, metavar="FILE",
                   help="database holding the runs; repeat to compare runs from several files "
                   f"(runs are then looked up in every file; default {default_db})")
    s.add_argument("runs", nargs="+", help="run ids or prefixes (FILE:RUN picks the file explicitly)")
    json_arg(s, "the comparison")
    s.set_defaults(func=cmd_compare)

    from llmscope.toolkit2 import add_parsers as add_toolkit2_parsers

    add_toolkit2_parsers(sub, db_arg)  # surprisal, rerun
    from llmscope.irt_report import add_parser as add_irt_parser

    add_irt_parser(sub, db_arg)  # irt
    return p


def main(argv: list[str] | None = None) -> int:
    from llmscope.settings import SettingsError, load_settings

    try:
        settings = load_settings()
    except SettingsError as e:
        print(f"llmscope: error: {e}", file=sys.stderr)
        return 2
    parser = build_parser(settings)
    args = parser.parse_args(argv)
    args._settings = settings  # which config values were refused (a project file's base_url)
    if not args.command:
        args.func = cmd_tui
    from llmscope.data.suites import SuiteError
    from llmscope.engine.backend import BackendConfigError
    from llmscope.engine.config import ConfigError
    from llmscope.engine.models import ModelSpecError
    from llmscope.engine.runner import RunBusy
    from llmscope.store.db import StoreError

    try:
        return int(args.func(args) or 0)
    except (CLIError, SuiteError, StoreError, ModelSpecError, BackendConfigError, ConfigError, RunBusy) as e:
        print(f"llmscope: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
