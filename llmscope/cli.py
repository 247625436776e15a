"""The `llmscope` command line."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

DEFAULT_DB = "llmscope.duckdb"


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def _parse_opts(pairs: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in pairs or []:
        if "=" not in p:
            raise CLIError(f"--opt expects key=value, got {p!r}")
        k, v = p.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


LOCK_WAIT_S = float(os.environ.get("LLMSCOPE_LOCK_WAIT", "5"))


def _open_store(path: str, read_only: bool = False) -> Any:
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
    "device", "dtype", "batch_size", "threads", "sp_prefix", "revision", "trust_remote_code", "adapter",
    "load_in_8bit", "load_in_4bit", "system_prompt", "chat", "seed",
)


def config_from_args(args: argparse.Namespace, base: Any = None) -> Any:
    """A BackendConfig from `run`'s flags: the flags given override `base` (a stored config on resume)."""
    import dataclasses

    from llmscope.engine.config import BackendConfig

    cfg = base if base is not None else BackendConfig()
    given = {k: getattr(args, k) for k in CONFIG_FLAGS if getattr(args, k, None) is not None}
    if getattr(args, "model", None) is not None:
        given["model"] = args.model
    return dataclasses.replace(cfg, **given)


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
        self.signals = [getattr(signal, n) for n in self.NAMES if hasattr(signal, n)]
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        """Outside the event loop (loading, reporting): raise KeyboardInterrupt like Ctrl-C."""
        for sig in self.signals:
            old = signal.signal(sig, self._sync)
            self._old.setdefault(sig, old)

    def attach(self, loop: Any, task: Any) -> None:
        """Inside the event loop: cancel the run's task, which stops the runner cleanly."""
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
    from llmscope.data.suites import load_suite
    from llmscope.engine.config import build_backend, resume_inputs
    from llmscope.engine.progress import MultiReporter
    from llmscope.engine.runner import RunInterrupted, Runner, RunPlan
    from llmscope.live import LiveWriter
    from llmscope.report import build_report, format_rows
    from llmscope.store.db import StoreError

    _check_positive("--limit", args.limit)
    if not args.resume:
        config_from_args(args).validate()  # bad numbers stop before the database is touched
    store = _open_store(args.db)
    try:
        task_opts = _parse_opts(args.opt)
        suite_name, suite_path, limit = args.suite, args.suite_path, args.limit
        run: dict[str, Any] | None = None
        base_cfg = None
        if args.resume:
            run = store.find_run(args.resume)
            if run is None:
                raise CLIError(f"no run {args.resume!r} in {args.db}")
            rin = resume_inputs(run)
            suite_name, suite_path = rin.suite_name, rin.suite_path
            task_opts = {**rin.task_options, **task_opts}
            limit = args.limit if args.limit is not None else rin.limit
            base_cfg = rin.config
        if not suite_name:
            raise CLIError("--suite is required (a built-in name, see `llmscope suites`, or a spec path)")
        cfg = config_from_args(args, base_cfg)
        cfg, _spec = cfg.resolve()  # flags checked before anything is loaded or written
        suite = load_suite(suite_name, suite_path)
        suite.items()  # validate before any model is loaded or anything is written
        if cfg.chat is not None:
            task_opts["chat"] = cfg.chat
        if run is not None and base_cfg is not None:
            _refuse_identity_change(run, base_cfg, cfg, suite, task_opts)
        reporter = ConsoleReporter(quiet=args.quiet)
        model_arg = cfg.model
        reporter.on_message("info", f"loading model {model_arg or 'SmolLM2-135M-Instruct (embedded default)'} ...")
        built = build_backend(cfg)
        backend, spec, ident = built.backend, built.spec, built.identity
        plan = RunPlan(
            suite=suite, model_label=spec.display(), model_arg=model_arg, task_options=task_opts,
            backend_identity=ident, seed=cfg.seed, limit=limit,
            run_id=run["run_id"] if run is not None else None,
            window=max(cfg.batch_size * 4, cfg.concurrency * 2, 8),
            backend_config=built.config.to_dict(), retry_errors=not args.no_retry_errors,
        )
        live = LiveWriter(args.db)
        runner = Runner(plan, backend, store, MultiReporter(reporter, live))
        import asyncio

        stop: StopSignals = getattr(args, "_stop_signals", None) or StopSignals()

        async def main() -> Any:
            stop.attach(asyncio.get_running_loop(), asyncio.current_task())
            try:
                if hasattr(backend, "probe"):
                    # Learn up front whether the API returns log-probs, so the run records it.
                    from llmscope.engine.backend import BackendError

                    try:
                        await backend.probe()
                    except BackendError as e:
                        reporter.on_message("warning", f"probe request failed: {e}")
                    for note in backend.stats().get("notices", []):
                        reporter.on_message("warning", str(note))
                return await runner.run()
            finally:
                await backend.aclose()

        try:
            prog = asyncio.run(main())
        except (RunInterrupted, KeyboardInterrupt, asyncio.CancelledError):
            stop.install()  # closing the loop reset the handlers
            rid = runner.run_id
            if not rid:
                print("\ninterrupted before any item was scored; run the same command again to start.",
                      file=sys.stderr)
                return stop.exit_code()
            print(
                f"\ninterrupted: everything scored so far is stored in {args.db}. "
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
        return 0 if prog.errors == 0 else 1
    finally:
        store.close()


def resume_hint(run_id: str, db: str) -> str:
    """The command that continues a run (its backend config is stored, so nothing else is needed)."""
    import shlex

    return f"llmscope run --resume {shlex.quote(run_id)} --db {shlex.quote(str(db))}"


def _task_identity(suite: Any, task_opts: dict[str, Any]) -> dict[str, Any]:
    from llmscope.engine.runner import RunPlan

    desc = RunPlan(suite=suite, model_label="", model_arg=None, task_options=task_opts).task().describe()
    desc.pop("templates", None)
    return dict(json.loads(json.dumps(desc, default=str)))


def _refuse_identity_change(run: dict[str, Any], stored: Any, cfg: Any, suite: Any, task_opts: dict[str, Any]) -> None:
    """A resume may change speed (concurrency, batch size...) but not what the model answers."""
    import dataclasses

    norm = [dataclasses.replace(c, base_url=(c.base_url or "").rstrip("/") or None) for c in (stored, cfg)]
    diffs = norm[0].differences(norm[1])
    stored_task = (run.get("options") or {}).get("task")
    if isinstance(stored_task, dict):
        new_task = _task_identity(suite, task_opts)
        for k in sorted(set(stored_task) | set(new_task)):
            if stored_task.get(k) != new_task.get(k):
                diffs.append(f"task.{k}: {stored_task.get(k)!r} -> {new_task.get(k)!r}")
    if diffs:
        raise CLIError(
            f"resuming run {run['run_id']} with these options would change what it measures: "
            + "; ".join(diffs) + ". Drop those flags to continue it, or start a new run without --resume."
        )


def cmd_suites(args: argparse.Namespace) -> int:
    from llmscope.data.suites import EXTERNAL_SUITES, SuiteError, builtin_names, load_suite

    rows = []
    for name in builtin_names():
        if name in EXTERNAL_SUITES:
            # Loaders of full third-party corpora: listed, not parsed (WorldSense is 87k trials).
            rows.append({"name": name, "task": EXTERNAL_SUITES[name], "items": None, "variants": None,
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
        acc = "" if r.accuracy is None or r.accuracy != r.accuracy else f"acc {r.accuracy:.3f}"
        print(f"{r.run_id}  {r.suite_name:<20} {str(r.model)[:32]:<32} {r.status:<22} "
              f"{r.n_done}/{r.n_total}  {acc}  {r.started_at}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from llmscope.report import build_report, format_rows, worldsense_reports

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
    finally:
        store.close()
    if args.json:
        print(json.dumps(rows + ws_rows, indent=1, default=str))
    else:
        print(format_rows(rows))
        for line in ws_text:
            print(line)
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
    from llmscope.export import export_run

    store = _open_store(args.db, read_only=True)
    try:
        run = store.find_run(args.run)
        if run is None:
            raise CLIError(f"no run {args.run!r} in {args.db}")
        if args.format == "parquet" and not args.output:
            raise CLIError("--format parquet writes a binary file: pass -o FILE")
        n = export_run(store, run, args.format, args.output)
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
        elif args.kind == "answers":
            msgs = importers.import_answer_sets(store, [Path(p) for p in args.paths],
                                                suite_path=args.suite_path, model=args.model)
        else:
            msgs = importers.import_results(store, [Path(p) for p in args.paths], suite_path=args.suite_path)
    finally:
        store.close()
    for m in msgs:
        print(m)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from llmscope.compare import CompareError, compare_runs, format_compare

    store = _open_store(args.db, read_only=True)
    try:
        out = compare_runs(store, args.runs)
    except CompareError as e:
        raise CLIError(str(e)) from e
    finally:
        store.close()
    print(json.dumps(out, indent=1, default=str) if args.json else format_compare(out))
    return 0


# -- parser -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmscope", description="A terminal microscope for LLM behaviour.")
    p.add_argument("--db", default=os.environ.get("LLMSCOPE_DB", DEFAULT_DB), help="DuckDB file (default ./llmscope.duckdb)")
    sub = p.add_subparsers(dest="command")

    def db_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--db", default=argparse.SUPPRESS, help="DuckDB file (default ./llmscope.duckdb)")

    r = sub.add_parser("run", help="score a suite with a model and store per-item results")
    db_arg(r)
    r.add_argument("--suite", help="built-in suite name or path of a suite spec")
    r.add_argument("--suite-path", help="data file or folder for loaders (commonsense CSV, WorldSense dir)")
    r.add_argument("--model", help="hf:<hub id or folder> | gguf:<file> | openai:<name>; default: embedded SmolLM2-135M-Instruct")
    r.add_argument("--limit", type=int, help="only the first N items (1 or more)")
    # Backend flags default to None so that a resume can tell "given" from "not given": the
    # run's stored config (engine/config.py BackendConfig) fills the rest; defaults live there.
    r.add_argument("--batch-size", type=int, default=None, help="prompts per forward pass (default 16)")
    r.add_argument("--device", default=None, help="auto (cuda > mps > cpu), cpu, cuda, cuda:1, mps")
    r.add_argument("--dtype", default=None, help="auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16, float16")
    r.add_argument("--threads", type=int, default=None,
                   help="torch threads for a local model on CPU (default: torch's choice; 1 is best on a busy machine)")
    r.add_argument("--sp-prefix", action="store_true", default=None,
                   help="append the bare SentencePiece word-boundary piece to chat prompts (LLaMA-2 style models)")
    r.add_argument("--chat", dest="chat", action="store_true", default=None, help="apply the chat template")
    r.add_argument("--no-chat", dest="chat", action="store_false", help="score raw text, no chat template")
    r.add_argument("--revision", default=None, help="hub revision (branch, tag or commit) of a local model")
    r.add_argument("--trust-remote-code", action="store_true", default=None,
                   help="allow a hub model's own Python code (transformers trust_remote_code)")
    r.add_argument("--adapter", default=None, help="PEFT adapter folder or hub id applied to the local model (needs peft)")
    r.add_argument("--system-prompt", default=None, help="system message put before every chat prompt")
    r.add_argument("--load-in-8bit", action="store_true", default=None, help="8-bit weights (bitsandbytes; CUDA only)")
    r.add_argument("--load-in-4bit", action="store_true", default=None, help="4-bit weights (bitsandbytes; CUDA only)")
    r.add_argument("--opt", action="append", metavar="KEY=VALUE", help="task option (JSON value), repeatable")
    r.add_argument("--seed", type=int, default=None, help="sampling seed (default 0)")
    r.add_argument("--resume", metavar="RUN",
                   help="continue a stored run (id or prefix; 'last') with the options it was made with")
    r.add_argument("--no-retry-errors", action="store_true",
                   help="on resume, keep items stored as errors instead of scoring them again")
    r.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    r.add_argument("--concurrency", type=int, default=None, help="API requests in flight (default 8)")
    r.add_argument("--top-logprobs", type=int, default=None, help="top log-probabilities asked of an API (default 20)")
    r.add_argument("--max-retries", type=int, default=None)
    r.add_argument("--timeout", type=float, default=None, help="API request timeout in seconds")
    r.add_argument("--samples", type=int, default=None, help="samples per item when an API gives no logprobs")
    r.add_argument("--reasoning", action="store_true", default=None, help="treat the API model as a reasoning model")
    r.add_argument("--quiet", action="store_true")
    r.add_argument("--no-report", action="store_true")
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("suites", help="list built-in suites")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_suites)

    s = sub.add_parser("runs", help="list runs in the database")
    db_arg(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("report", help="accuracy with 95%% CIs and other metrics")
    db_arg(s)
    s.add_argument("--run", help="run id or prefix (default: every run)")
    s.add_argument("--by", action="append", help="group by this item field (repeatable)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("export", help="write a run's per-item results")
    db_arg(s)
    s.add_argument("--run", required=True)
    s.add_argument("--format", choices=["jsonl", "csv", "parquet", "worldsense"], default="jsonl")
    s.add_argument("-o", "--output")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("tokens", help="list a tokenizer's answer-token ids")
    s.add_argument("--tokenizer", required=True)
    s.add_argument("--answers", default="yes,no")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_tokens)

    s = sub.add_parser("view", aliases=["watch"], help="watch runs live (also from another terminal)")
    db_arg(s)
    s.add_argument("--run")
    s.set_defaults(func=cmd_view)

    s = sub.add_parser("import", help="import published results (worldsense DIR | results FILE... | answers FILE...)")
    db_arg(s)
    s.add_argument("kind", choices=["worldsense", "results", "answers"])
    s.add_argument("paths", nargs="+")
    s.add_argument("--suite-path", help="commonsense statements CSV (results) or CFC targets file (answers)")
    s.add_argument("--model", help="name of the imported answer set (answers)")
    s.set_defaults(func=cmd_import)

    s = sub.add_parser("compare", help="compare runs on the same suite (paired tests)")
    db_arg(s)
    s.add_argument("runs", nargs="+")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_compare)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        args.func = cmd_tui
    from llmscope.data.suites import SuiteError
    from llmscope.engine.config import ConfigError
    from llmscope.engine.models import ModelSpecError
    from llmscope.engine.runner import RunBusy
    from llmscope.store.db import StoreError

    try:
        return int(args.func(args) or 0)
    except (CLIError, SuiteError, StoreError, ModelSpecError, ConfigError, RunBusy) as e:
        print(f"llmscope: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
