"""Commands that prepare a run: `suites`, `plan` and `tokens`.

`suites` lists the built-in suites, `plan` writes a pre-registration plan, `tokens` lists a
tokenizer's answer-token ids.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from llmscope.cli.common import CLIError, ParserContext, parse_opts


def cmd_suites(args: argparse.Namespace) -> int:
    from llmscope.data.registry import external_suite, suite_names
    from llmscope.data.suites import SuiteError, load_suite

    rows = []
    for name in suite_names():
        entry = external_suite(name)
        if entry is not None:
            # Loaders of full third-party corpora: listed, not parsed (WorldSense is 87k trials).
            rows.append(
                {
                    "name": name,
                    "task": entry.task,
                    "items": None,
                    "variants": None,
                    "description": f"full {name} corpus, read from --suite-path (or ../shared when present)",
                }
            )
            continue
        try:
            s = load_suite(name)
            n: int | None = len(s.items())
            rows.append(
                {
                    "name": name,
                    "task": s.task,
                    "items": n,
                    "variants": len(s.variant_names()),
                    "description": " ".join((s.description or "").split()),
                }
            )
        except SuiteError as e:  # a broken built-in suite is listed with its error
            rows.append(
                {
                    "name": name,
                    "task": "?",
                    "items": None,
                    "variants": None,
                    "description": f"error: {e}",
                }
            )
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        tw = max((len(r["task"]) for r in rows), default=12)  # "contamination" is 13
        for r in rows:
            n_txt = "-" if r["items"] is None else str(r["items"])
            d = r["description"]
            d = d if len(d) <= 70 else d[:69] + "…"  # a cut says so; --json has it whole
            print(f"{r['name']:<22} {r['task']:<{tw}} {n_txt:>7}  {d}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    import datetime as dt

    from llmscope.data.suites import load_suite
    from llmscope.runs.plan import PLAN_VERSION, PlanError, write_plan

    suite = load_suite(args.suite, args.suite_path)
    suite.task_options = {**suite.task_options, **parse_opts(args.opt)}
    suite.work(1)  # the suite and its design options are valid
    plan = {
        "llmscope_plan": PLAN_VERSION,
        "suite": args.suite,
        "suite_id": suite.suite_id,
        **({"suite_path": args.suite_path} if args.suite_path else {}),
        "models": args.model or ["default"],
        "task_options": parse_opts(args.opt),
        "metrics": args.metric or ["accuracy"],
        "hypotheses": [
            {"id": f"H{i}", "text": h, "test": "paired-t"}
            for i, h in enumerate(args.hypothesis or [], 1)
        ],
        "seed": args.seed,
        "alpha": args.alpha,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    try:
        digest = write_plan(args.output, plan, force=args.force)
    except PlanError as e:
        raise CLIError(str(e)) from e
    print(
        f"wrote plan {args.output} (sha256 {digest[:12]}); run it with: llmscope run --plan {args.output}"
    )
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


def add_parsers(sub: Any, ctx: ParserContext) -> None:
    """Register `suites`, `plan` and `tokens`."""
    s = sub.add_parser("suites", help="list built-in suites")
    ctx.json_arg(s, "the list")
    s.set_defaults(func=cmd_suites)

    s = sub.add_parser(
        "plan", help="write a pre-registration plan (suite, models, options, hypotheses, seed)"
    )
    s.add_argument("--suite", required=True, help="built-in suite name or path of a suite spec")
    s.add_argument("--suite-path", help="data file or folder for loaders")
    s.add_argument(
        "--model", action="append", help="planned model (repeatable; default: the embedded model)"
    )
    s.add_argument(
        "--opt", action="append", metavar="KEY=VALUE", help="task option (JSON value), repeatable"
    )
    s.add_argument(
        "--metric", action="append", help="planned analysis metric (repeatable; default accuracy)"
    )
    s.add_argument(
        "--hypothesis",
        action="append",
        help="e.g. 'accuracy(q1) > accuracy(q2)' or 'p_yes(q1) < 0.5' (repeatable)",
    )
    s.add_argument("--seed", type=int, default=0, help="seed the planned runs use (default 0)")
    s.add_argument("--alpha", type=float, default=0.05, help="one-sided test level (default 0.05)")
    s.add_argument("-o", "--output", required=True, help="plan file to write (YAML)")
    s.add_argument("--force", action="store_true", help="replace an existing plan file")
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("tokens", help="list a tokenizer's answer-token ids")
    s.add_argument(
        "--tokenizer", required=True, help="tokenizer folder (tokenizer.json / vocab files)"
    )
    s.add_argument(
        "--answers", default="yes,no", help="comma-separated answers (default %(default)s)"
    )
    ctx.json_arg(s, "the ids")
    s.set_defaults(func=cmd_tokens)
