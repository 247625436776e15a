"""The `llmscope` command line."""

from __future__ import annotations

import argparse
import json
import os
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


def _open_store(path: str, read_only: bool = False) -> Any:
    from llmscope.store.db import Store

    if read_only and not Path(path).exists():
        raise CLIError(f"no database at {path} (run `llmscope run` first, or pass --db)")
    return Store(path, read_only=read_only)


def make_backend(model_arg: str | None, args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any]]:
    """Build the backend for a --model argument; returns (backend, spec, identity options)."""
    from llmscope.engine.models import parse_model

    spec = parse_model(model_arg)
    if spec.backend == "openai":
        from llmscope.engine.openai_backend import OpenAIBackend

        kw: dict[str, Any] = {
            "model": spec.name,
            "base_url": args.base_url or getattr(args, "config_base_url", None),
            "concurrency": args.concurrency,
            "top_logprobs": args.top_logprobs,
            "seed": args.seed,
        }
        if args.max_retries is not None:
            kw["max_retries"] = args.max_retries
        if args.timeout is not None:
            kw["timeout"] = args.timeout
        if args.samples is not None:
            kw["samples"] = args.samples
        if args.reasoning:
            kw["reasoning"] = True
        backend = OpenAIBackend(**kw)
        ident = {"backend": "openai", "base_url": backend.describe().get("base_url"),
                 "top_logprobs": args.top_logprobs}
        return backend, spec, ident
    try:
        from llmscope.engine.hf_backend import HFBackend
    except ImportError as e:
        raise CLIError(
            f"local models need the `hf` extra ({e.name} is missing): pip install 'llmscope[hf]'"
        ) from e
    try:
        backend = HFBackend(
            spec, device=args.device, dtype=args.dtype, batch_size=args.batch_size, sp_prefix=args.sp_prefix,
            threads=args.threads,
        )
    except (OSError, ValueError, RuntimeError) as e:
        # transformers reports a missing hub id, no network, a bad GGUF or a wrong device this way
        first = (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(".")
        raise CLIError(
            f"cannot load model {model_arg or 'default'!r}: {first}. Hub ids need internet the first time; "
            "a local folder needs config.json and weights; a .gguf file needs the `gguf` package."
        ) from e
    ident = {"backend": "hf", "dtype": backend.dtype, "device": backend.device.split(":")[0],
             "sp_prefix": backend.sp_prefix, "add_bos": backend.add_bos}
    return backend, spec, ident


# -- commands ---------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    try:
        return _cmd_run(args)
    except KeyboardInterrupt:
        # Ctrl-C before scoring started (loading the model, reading the suite): nothing to keep.
        print("\ninterrupted before any item was scored; run the same command again to start.", file=sys.stderr)
        return 130


def _cmd_run(args: argparse.Namespace) -> int:
    from llmscope.console import ConsoleReporter
    from llmscope.data.suites import EXTERNAL_SUITES, load_suite
    from llmscope.engine.progress import MultiReporter
    from llmscope.engine.runner import RunInterrupted, Runner, RunPlan
    from llmscope.live import LiveWriter
    from llmscope.report import build_report, format_rows

    store = _open_store(args.db)
    try:
        model_arg = args.model
        task_opts = _parse_opts(args.opt)
        suite_name, suite_path, limit = args.suite, args.suite_path, args.limit
        if args.resume:
            run = store.find_run(args.resume)
            if run is None:
                raise CLIError(f"no run {args.resume!r} in {args.db}")
            opts = run.get("options") or {}
            meta = run.get("meta") or {}
            suite_meta = meta.get("suite") or {}
            model_arg = opts.get("model_arg")
            suite_name = suite_meta.get("spec_path") or suite_meta.get("name")
            if suite_meta.get("name") in EXTERNAL_SUITES:
                suite_name, suite_path = suite_meta["name"], suite_meta.get("items_path")
            t = dict(opts.get("task") or {})
            t.pop("task", None)
            task_opts = {**t, **task_opts}
            limit = args.limit if args.limit is not None else opts.get("limit")
        plan_info = None
        seed = args.seed
        if getattr(args, "plan", None):  # pre-registration (llmscope/plan.py)
            from llmscope.plan import PlanError, plan_hash, read_plan

            try:
                plan_body = read_plan(args.plan)
            except PlanError as e:
                raise CLIError(str(e)) from e
            suite_name = suite_name or plan_body["suite"]
            suite_path = suite_path or plan_body.get("suite_path")
            model_arg = model_arg or next(iter(plan_body.get("models") or []), None)
            if model_arg == "default":
                model_arg = None
            task_opts = {**(plan_body.get("task_options") or {}), **task_opts}
            seed = int(plan_body.get("seed", seed)) if args.seed == 0 else args.seed
            plan_info = (plan_body, plan_hash(args.plan))
        if not suite_name:
            raise CLIError("--suite is required (a built-in name, see `llmscope suites`, or a spec path)")
        suite = load_suite(suite_name, suite_path)
        suite.items()  # validate before any model is loaded or anything is written
        if args.chat is not None:
            task_opts["chat"] = args.chat
        from llmscope.engine.tasks.options import TaskOptionError, validate_task_options

        try:
            validate_task_options(suite.task, {**suite.task_options, **task_opts})
        except TaskOptionError as e:
            raise CLIError(f"task options (--opt, --chat, suite task_options): {e}") from None
        # design options (counterbalancing, few-shot) given with --opt shape the work list too
        suite.task_options = {**suite.task_options, **task_opts}
        suite.work(1)  # validates the design options before the model loads
        reporter = ConsoleReporter(quiet=args.quiet)
        reporter.on_message("info", f"loading model {model_arg or 'SmolLM2-135M-Instruct (embedded default)'} ...")
        backend, spec, ident = make_backend(model_arg, args)
        from llmscope.engine.cache import with_cache

        backend = with_cache(backend, enabled=not args.no_cache,
                             warn=lambda m: reporter.on_message("warning", m))
        plan = RunPlan(
            suite=suite, model_label=spec.display(), model_arg=model_arg, task_options=task_opts,
            backend_identity=ident, seed=seed, limit=limit,
            run_id=run["run_id"] if args.resume else None,
            window=max(args.batch_size * 4, args.concurrency * 2, 8),
        )
        live = LiveWriter(args.db, store=store)
        extra_reporters: list[Any] = []
        if plan_info is not None:
            from llmscope.plan import PlanRecorder, deviations

            devs = deviations(plan_info[0], suite_id=suite.suite_id, model=model_arg, task_options=task_opts, seed=seed)
            for d in devs:
                reporter.on_message("warning", f"run differs from plan {args.plan}: {d}")
            extra_reporters.append(PlanRecorder(store, plan_info[0], plan_info[1], str(args.plan), devs))
        runner = Runner(plan, backend, store, MultiReporter(*extra_reporters, reporter, live))
        import asyncio

        async def main() -> Any:
            try:
                if hasattr(backend, "probe"):
                    # Check the configuration and learn the server's capabilities before
                    # anything is written; BackendConfigError ends the command with one line.
                    # (the backend's notices reach stderr once, through its logger)
                    await backend.probe(suite.task, runner.task.options)
                    choice = (backend.describe().get("method_choice") or {})
                    if choice.get("method"):
                        reporter.on_message("info", f"method: {choice['method']} ({choice.get('reason')})")
                return await runner.run()
            finally:
                await backend.aclose()

        try:
            prog = asyncio.run(main())
        except (RunInterrupted, KeyboardInterrupt):
            rid = runner.run_id or "?"
            print(
                f"\ninterrupted: everything scored so far is stored in {args.db}. "
                f"Resume with the same command, or: llmscope run --resume {rid} --db {args.db}",
                file=sys.stderr,
            )
            return 130
        run_row = store.get_run(prog.run_id)
        if not args.no_report and run_row:
            print(format_rows(build_report(store, run_row)))
        return 0 if prog.errors == 0 else 1
    finally:
        store.close()


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
    r.add_argument("--model", default=cfg.get("model"),
                   help="hf:<hub id or folder> | gguf:<file> | openai:<name>; default: embedded SmolLM2-135M-Instruct")
    r.add_argument("--limit", type=int, help="only the first N items (N >= 1)")
    r.add_argument("--batch-size", type=int, default=cfg.get("batch_size", 16),
                   help="sequences per forward pass for a local model (default %(default)s)")
    r.add_argument("--device", default=cfg.get("device", "auto"), help="auto (cuda > mps > cpu), cpu, cuda, cuda:1, mps")
    r.add_argument("--dtype", default=cfg.get("dtype", "auto"),
                   help="auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16, float16")
    r.add_argument("--threads", type=int, default=cfg.get("threads"),
                   help="torch threads for a local model on CPU (default: torch's choice; 1 is best on a busy machine)")
    r.add_argument("--sp-prefix", action="store_true",
                   help="append the bare SentencePiece word-boundary piece to chat prompts (LLaMA-2 style models)")
    r.add_argument("--chat", dest="chat", action="store_true", default=None,
                   help="apply the chat template (default: the task's choice)")
    r.add_argument("--no-chat", dest="chat", action="store_false", help="score raw text, no chat template")
    r.add_argument("--opt", action="append", metavar="KEY=VALUE",
                   help="task option (value parsed as JSON, else text), repeatable; e.g. --opt permutations=2")
    r.add_argument("--seed", type=int, default=0, help="seed for sampling and permutations (part of the run id; default 0)")
    r.add_argument("--resume", metavar="RUN", help="continue a stored run (id or prefix; 'last')")
    r.add_argument("--base-url", action="append", default=None,
                   help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL, then llmscope.toml); repeat it, or "
                        "give @FILE with one URL per line, to spread requests round-robin over replicas of one model")
    r.set_defaults(config_base_url=default_base_url)
    r.add_argument("--concurrency", type=int, default=cfg.get("concurrency", 8),
                   help="API requests in flight, per endpoint (default %(default)s)")
    r.add_argument("--top-logprobs", type=int, default=20,
                   help="top log-probabilities asked of an API per position (default 20; the server's maximum when lower)")
    r.add_argument("--max-retries", type=int, default=None,
                   help="retries per API request on 429/5xx/timeouts (default 6)")
    r.add_argument("--timeout", type=float, default=cfg.get("timeout"), help="API request timeout in seconds")
    r.add_argument("--samples", type=int, default=None, help="samples per item when an API gives no logprobs")
    r.add_argument("--reasoning", action="store_true", help="treat the API model as a reasoning model")
    r.add_argument("--no-cache", action="store_true",
                   help="do not reuse or store responses in the shared response cache")
    r.add_argument("--plan", help="a pre-registration plan file (llmscope plan): suite, model, options and seed "
                   "come from it; its hash is stored before any result")
    r.add_argument("--quiet", action="store_true", help="no progress line, only warnings and the report")
    r.add_argument("--no-report", action="store_true", help="do not print the report when the run ends")
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("suites", help="list built-in suites")
    json_arg(s, "the list")
    s.set_defaults(func=cmd_suites)

    s = sub.add_parser("runs", help="list runs in the database")
    db_arg(s)
    json_arg(s, "the runs")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("report", help="accuracy with 95%% CIs and other metrics")
    db_arg(s)
    s.add_argument("--run", help="run id or prefix (default: every run)")
    s.add_argument("--by", action="append", help="group by this item field (repeatable)")
    json_arg(s, "metric rows")
    s.add_argument("--explain", action="store_true", help="print how every metric is computed and exit")
    s.set_defaults(func=cmd_report)

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
    s.add_argument("--seed", type=int, default=0)
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
    if not args.command:
        args.func = cmd_tui
    from llmscope.data.suites import SuiteError
    from llmscope.engine.backend import BackendConfigError
    from llmscope.engine.models import ModelSpecError
    from llmscope.store.db import StoreError

    try:
        return int(args.func(args) or 0)
    except (CLIError, SuiteError, StoreError, ModelSpecError, BackendConfigError) as e:
        print(f"llmscope: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
