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
            "base_url": args.base_url,
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
        if not suite_name:
            raise CLIError("--suite is required (a built-in name, see `llmscope suites`, or a spec path)")
        suite = load_suite(suite_name, suite_path)
        suite.items()  # validate before any model is loaded or anything is written
        if args.chat is not None:
            task_opts["chat"] = args.chat
        reporter = ConsoleReporter(quiet=args.quiet)
        reporter.on_message("info", f"loading model {model_arg or 'SmolLM2-135M-Instruct (embedded default)'} ...")
        backend, spec, ident = make_backend(model_arg, args)
        plan = RunPlan(
            suite=suite, model_label=spec.display(), model_arg=model_arg, task_options=task_opts,
            backend_identity=ident, seed=args.seed, limit=limit,
            run_id=run["run_id"] if args.resume else None,
            window=max(args.batch_size * 4, args.concurrency * 2, 8),
        )
        live = LiveWriter(args.db)
        runner = Runner(plan, backend, store, MultiReporter(reporter, live))
        import asyncio

        async def main() -> Any:
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
    r.add_argument("--limit", type=int, help="only the first N items")
    r.add_argument("--batch-size", type=int, default=16)
    r.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, cuda:1, mps")
    r.add_argument("--dtype", default="auto", help="auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16, float16")
    r.add_argument("--threads", type=int, default=None,
                   help="torch threads for a local model on CPU (default: torch's choice; 1 is best on a busy machine)")
    r.add_argument("--sp-prefix", action="store_true",
                   help="append the bare SentencePiece word-boundary piece to chat prompts (LLaMA-2 style models)")
    r.add_argument("--chat", dest="chat", action="store_true", default=None, help="apply the chat template")
    r.add_argument("--no-chat", dest="chat", action="store_false", help="score raw text, no chat template")
    r.add_argument("--opt", action="append", metavar="KEY=VALUE", help="task option (JSON value), repeatable")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--resume", metavar="RUN", help="continue a stored run (id or prefix; 'last')")
    r.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    r.add_argument("--concurrency", type=int, default=8, help="API requests in flight")
    r.add_argument("--top-logprobs", type=int, default=20)
    r.add_argument("--max-retries", type=int, default=None)
    r.add_argument("--timeout", type=float, default=None, help="API request timeout in seconds")
    r.add_argument("--samples", type=int, default=None, help="samples per item when an API gives no logprobs")
    r.add_argument("--reasoning", action="store_true", help="treat the API model as a reasoning model")
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

    s = sub.add_parser("import", help="import published results (worldsense DIR | results FILE... | answers FILE... | lm-eval SAMPLES.jsonl...)")
    db_arg(s)
    s.add_argument("kind", choices=["worldsense", "results", "answers", "lm-eval"])
    s.add_argument("paths", nargs="+")
    s.add_argument("--suite-path", help="commonsense statements CSV (results) or CFC targets file (answers)")
    s.add_argument("--model", help="name of the imported answer set (answers) or model (lm-eval)")
    s.add_argument("--suite", help="lm-eval: the task YAML or suite the samples were scored on (default: "
                   "rebuilt from the samples)")
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
    from llmscope.engine.models import ModelSpecError
    from llmscope.store.db import StoreError

    try:
        return int(args.func(args) or 0)
    except (CLIError, SuiteError, StoreError, ModelSpecError) as e:
        print(f"llmscope: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
