"""`llmscope run`: score a suite with a model, resume a run, stop it cleanly on a signal."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from llmscope.cli.common import (
    CONFIG_FLAGS,
    DEFAULT_DB,
    CLIError,
    ParserContext,
    add_report_flags,
    add_request_flags,
    check_endpoints,
    check_stored_code,
    config_from_args,
    discard_if_unused,
    invocation,
    open_store,
    parse_opts,
    unset_flag,
)
from llmscope.engine.textsafety import for_terminal


def _check_positive(flag: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise CLIError(f"{flag} must be a positive number of items (1 or more), got {value}")


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
        self.signals = [
            getattr(signal, n)
            for n in self.NAMES
            if hasattr(signal, n) and signal.getsignal(getattr(signal, n)) is not signal.SIG_IGN
        ]
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


def _templates_arg(args: argparse.Namespace) -> Any:
    if not getattr(args, "templates", None):
        return None
    from llmscope.data.derived import read_templates_file

    return read_templates_file(args.templates)


def cmd_run(args: argparse.Namespace) -> int:
    stop = StopSignals()
    args._stop_signals = stop
    try:
        stop.install()
        return _cmd_run(args)
    except KeyboardInterrupt:
        # Ctrl-C before scoring started (loading the model, reading the suite): nothing to keep.
        print(
            "\ninterrupted before any item was scored; run the same command again to start.",
            file=sys.stderr,
        )
        return stop.exit_code()
    finally:
        stop.restore()


def _cmd_run(args: argparse.Namespace) -> int:
    from llmscope.console import ConsoleReporter
    from llmscope.engine.runner import RunInterrupted
    from llmscope.runs.start import RunComplete, RunRequest, execute, prepare_run, start_run
    from llmscope.store.db import StoreError

    _check_positive("--limit", args.limit)
    if not args.resume:
        config_from_args(args).validate()  # bad numbers stop before the database is touched
    created = not Path(args.db).exists()
    store = open_store(args.db)
    try:
        task_opts = parse_opts(args.opt)
        suite_name, suite_path = args.suite, args.suite_path
        plan_info = None
        if getattr(args, "plan", None):  # pre-registration (llmscope/runs/plan.py)
            from llmscope.runs.plan import PlanError, plan_hash, read_plan

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
        req = RunRequest(
            suite_name=suite_name,
            suite_path=suite_path,
            config=config_from_args(args),
            task_options=task_opts,
            limit=args.limit,
            resume=args.resume,
            overrides=given,
            retry_errors=not args.no_retry_errors,
            cache=not args.no_cache,
            plan=plan_info,
            templates=_templates_arg(args),
        )
        reporter = ConsoleReporter(quiet=args.quiet)
        try:
            prep = prepare_run(
                store, req
            )  # the suite, options and stored run, checked with no model loaded
        except RunComplete as e:
            print(f"llmscope: {for_terminal(str(e))}", file=sys.stderr)
            return 1 if e.n_errors else 0  # as a run that ends with errors stored
        stored_in = (
            f"run {prep.existing['run_id']} in {args.db}"
            if args.resume and prep.existing is not None
            else None
        )
        check_stored_code(args, prep.config, stored_in)
        check_endpoints(args, prep.config, reporter.on_message, stored_in=stored_in)
        reporter.on_message(
            "info",
            f"loading model {prep.config.model or 'SmolLM2-135M-Instruct (embedded default)'} ...",
        )
        started = start_run(
            store, prep, [reporter], db=args.db, warn=lambda m: reporter.on_message("warning", m)
        )
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
                print(
                    "\ninterrupted before any item was scored; run the same command again to start.",
                    file=sys.stderr,
                )
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
            raise CLIError(
                f"{e}. The run is marked failed; once fixed, continue it with: "
                f"{resume_hint(runner.run_id, args.db)}"
            ) from e
        stop.install()
        run_row = store.get_run(prog.run_id)
        if not args.no_report and run_row:
            # pandas and scipy: loaded once a run has ended, not before it starts
            from llmscope.report import build_report, format_rows

            print(for_terminal(format_rows(build_report(store, run_row))))
        # The checked close: a run is reported done only once the file alone holds it (a full
        # disk during the final checkpoint leaves every row in the .wal; say so, exit 2).
        try:
            store.checkpoint()
        except StoreError as e:
            raise CLIError(f"run {prog.run_id} {prog.status}, but {e}") from e
        return 0 if prog.errors == 0 else 1
    except BaseException:
        discard_if_unused(store, created)  # a refused suite, task or plan file: no empty file left
        raise
    finally:
        store.close()


def resume_hint(run_id: str, db: str) -> str:
    """The command that continues a run (its backend config is stored, so nothing else is
    needed), as it can be pasted: how this llmscope was started, and --db unless the default."""
    import shlex

    at = "" if str(db) == DEFAULT_DB else f" --db {shlex.quote(str(db))}"
    return f"{invocation()} run --resume {shlex.quote(run_id)}{at}"


def add_parsers(sub: Any, ctx: ParserContext) -> None:
    """Register `run`."""
    from llmscope.engine.config import REASONING_EFFORTS

    r = sub.add_parser("run", help="score a suite with a model and store per-item results")
    ctx.db_arg(r)
    r.add_argument(
        "--suite", help="built-in suite name (see `llmscope suites`) or path of a suite spec"
    )
    r.add_argument(
        "--suite-path", help="data file or folder for loaders (commonsense CSV, WorldSense dir)"
    )
    r.add_argument(
        "--model",
        help="hf:<hub id or folder> | gguf:<file> | openai:<name>; default: embedded "
        "SmolLM2-135M-Instruct (or `model` in llmscope.toml)",
    )
    r.add_argument("--limit", type=int, help="only the first N items (1 or more)")
    # Backend flags default to None so that a resume can tell "given" from "not given": the
    # run's stored config (engine/config.py BackendConfig) fills the rest, and for a new run
    # llmscope.toml and then BackendConfig's defaults do.
    r.add_argument(
        "--batch-size", type=int, default=None, help="prompts per forward pass (default 16)"
    )
    r.add_argument("--device", default=None, help="auto (cuda > mps > cpu), cpu, cuda, cuda:1, mps")
    r.add_argument(
        "--dtype",
        default=None,
        help="auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16, float16",
    )
    r.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads for a local model on CPU (default: $OMP_NUM_THREADS, else the physical cores; 1 is best on a busy machine)",
    )
    unset_flag(
        r,
        "--sp-prefix",
        "append the bare SentencePiece word-boundary piece to chat prompts (LLaMA-2 style models)",
    )
    unset_flag(r, "--chat", "apply the chat template (default: the task's choice)", dest="chat")
    r.add_argument(
        "--no-chat", dest="chat", action="store_false", help="score raw text, no chat template"
    )
    r.add_argument(
        "--revision", default=None, help="hub revision (branch, tag or commit) of a local model"
    )
    unset_flag(
        r,
        "--trust-remote-code",
        "allow a hub model's own Python code (transformers trust_remote_code)",
    )
    r.add_argument(
        "--adapter",
        default=None,
        help="PEFT adapter folder or hub id applied to the local model (needs peft)",
    )
    r.add_argument(
        "--system-prompt", default=None, help="system message put before every chat prompt"
    )
    unset_flag(r, "--load-in-8bit", "8-bit weights (bitsandbytes; CUDA only)")
    unset_flag(r, "--load-in-4bit", "4-bit weights (bitsandbytes; CUDA only)")
    r.add_argument(
        "--opt",
        action="append",
        metavar="KEY=VALUE",
        help="task option (value parsed as JSON, else text), repeatable; e.g. --opt permutations=2",
    )
    r.add_argument(
        "--templates",
        metavar="[LEVEL=]FILE",
        help="other prompt templates (YAML/TOML: variant -> template, or one template): the run "
        "scores the derived suite SUITE~LEVEL (LEVEL: the file's stem), as a study's "
        "`templates` level does (docs/studies.md)",
    )
    r.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed for sampling and permutations (part of the run id; default 0)",
    )
    r.add_argument(
        "--resume",
        metavar="RUN",
        help="continue a stored run (id or prefix; 'last') with the options it was made with",
    )
    r.add_argument(
        "--trust-db",
        action="store_true",
        help="on resume, send requests (and $OPENAI_API_KEY) to the base URL stored in the "
        "database without asking, even when no flag, environment or config of yours names it; "
        "allow the model's own code if the run was made with --trust-remote-code",
    )
    r.add_argument(
        "--no-retry-errors",
        action="store_true",
        help="on resume, keep items stored as errors instead of scoring them again",
    )
    r.add_argument(
        "--base-url",
        action="append",
        default=None,
        help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL, then llmscope.toml); repeat it, or "
        "give @FILE with one URL per line, to spread requests round-robin over replicas of one model",
    )
    r.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="API requests in flight, per endpoint (default 8)",
    )
    r.add_argument(
        "--top-logprobs",
        type=int,
        default=None,
        help="top log-probabilities asked of an API per position (default 20; the server's maximum when lower)",
    )
    add_request_flags(r)
    r.add_argument(
        "--reasoning-effort",
        default=None,
        metavar="EFFORT",
        help=f"reasoning_effort sent with every chat request to an API model ({', '.join(REASONING_EFFORTS)}); "
        "default: not sent, except 'minimal' (then 'low', then none) for reasoning models",
    )
    r.add_argument(
        "--no-cache",
        action="store_true",
        help="do not reuse or store responses in the shared response cache",
    )
    r.add_argument(
        "--plan",
        help="a pre-registration plan file (llmscope plan): suite, model, options and seed "
        "come from it; its hash is stored before any result",
    )
    add_report_flags(r)
    # llmscope.toml values for a new run (beneath flags; a resume uses the run's stored config)
    r.set_defaults(
        config_defaults={
            k: v
            for k, v in {
                "model": ctx.settings.get("model"),
                "base_url": ctx.default_base_url,
                "concurrency": ctx.settings.get("concurrency"),
                "timeout": ctx.settings.get("timeout"),
                "device": ctx.settings.get("device"),
                "dtype": ctx.settings.get("dtype"),
                "batch_size": ctx.settings.get("batch_size"),
                "threads": ctx.settings.get("threads"),
            }.items()
            if v is not None
        }
    )
    r.set_defaults(func=cmd_run)
