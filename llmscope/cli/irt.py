"""`llmscope irt`: Rasch and 2PL fits across runs of one suite (`llmscope.analysis.irt`), as a
table or JSON. Registered in `COMMAND_GROUPS`; the fitting lives in analysis."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from llmscope.cli.common import CLIError, ParserContext, open_store

if TYPE_CHECKING:
    from llmscope.analysis.irt import IrtFit

# analysis.irt's MODELS; spelled here so that building the parser imports no numpy or pandas
# (tests/cli/test_startup.py); tests/analysis/test_irt.py checks they agree.
MODELS = ("rasch", "2pl")


def select_runs(store: Any, runs: str | None, suite: str | None) -> list[dict[str, Any]]:
    """The runs named (ids or prefixes, comma-separated) or every run of a suite (by name)."""
    if bool(runs) == bool(suite):
        raise CLIError("irt: give --runs A,B,... or --suite NAME (one of them)")
    if suite:
        df = store.runs()
        ids = [str(r) for r, s in zip(df["run_id"], df["suite_name"], strict=True) if s == suite]
        if not ids:
            names = sorted({str(s) for s in df["suite_name"].dropna()})
            raise CLIError(
                f"irt: no run of suite {suite!r}; suites with runs: {', '.join(names) or 'none'}"
            )
        return [r for r in (store.get_run(x) for x in ids) if r is not None]
    out = []
    for name in [x.strip() for x in str(runs).split(",") if x.strip()]:
        run = store.find_run(name)
        if run is None:
            raise CLIError(f"irt: no run {name!r} in {store.path}")
        out.append(run)
    return out


def _num(v: float | None, fmt: str = "{:+.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _ci(ci: tuple[float | None, float | None]) -> str:
    return "" if ci[0] is None or ci[1] is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def format_fit(fit: IrtFit) -> str:
    """A plain-text table: abilities, then items (flagged ones first), then what was left out."""
    lines = [
        f"IRT {fit.model} on suite {fit.suite}: {len(fit.abilities)} runs x {len(fit.items)} items "
        f"({fit.method}; converged: {fit.converged})",
        "",
        "ability per run (theta, 95% interval)",
    ]
    for a in sorted(fit.abilities, key=lambda a: -a.theta):
        exp = (
            "" if a.expected_accuracy is None else f"  expected accuracy {a.expected_accuracy:.3f}"
        )
        lines.append(
            f"  {a.run_id:<18} {a.model[:30]:<30} {a.theta:+.2f} {_ci(a.ci):<16} "
            f"accuracy {a.accuracy:.3f} n={a.n}{exp}"
        )
    lines += [
        "",
        "items (difficulty, discrimination, 95% intervals; flag: discrimination interval below 0)",
    ]
    w = max((len(i.item) for i in fit.items), default=4)
    for i in sorted(fit.items, key=lambda i: (not i.flagged, i.discrimination)):
        flag = (
            "  LIKELY LABEL ERROR" if i.flagged else ("  negative" if i.discrimination < 0 else "")
        )
        exp = "" if i.expected_accuracy is None else f" exp {i.expected_accuracy:.2f}"
        lines.append(
            f"  {i.item:<{w}} b {i.difficulty:+.2f} {_ci(i.difficulty_ci):<16} "
            f"a {i.discrimination:+.2f} {_ci(i.discrimination_ci):<16} "
            f"p {i.p_correct:.2f} n={i.n}{exp}{flag}"
        )
    if fit.constant_items:
        shown = ", ".join(fit.constant_items[:20]) + (
            " ..." if len(fit.constant_items) > 20 else ""
        )
        lines += [
            "",
            f"left out (every run answered alike): {len(fit.constant_items)} item(s): {shown}",
        ]
    return "\n".join(lines)


def cmd_irt(args: argparse.Namespace) -> int:
    """`llmscope irt`: fit and print."""
    from llmscope.analysis.irt import IrtError, fit_irt, response_matrix

    store = open_store(args.db, read_only=True)
    try:
        runs = select_runs(store, args.runs, args.suite)
        try:
            matrix = response_matrix(store, runs)
        except IrtError as e:
            raise CLIError(f"irt: {e}") from e
    finally:
        store.close()
    try:
        fits = [fit_irt(matrix, m) for m in (MODELS if args.model == "both" else (args.model,))]
    except IrtError as e:
        raise CLIError(f"irt: {e}") from e
    if args.json:
        print(json.dumps([f.to_dict() for f in fits], indent=1))
    else:
        print("\n\n".join(format_fit(f) for f in fits))
    return 0


def add_parsers(sub: Any, ctx: ParserContext) -> None:
    """Register `llmscope irt` on the CLI's subparsers."""
    s = sub.add_parser("irt", help="Rasch and 2PL item response theory across runs of one suite")
    ctx.db_arg(s)
    s.add_argument("--runs", help="run ids or prefixes, comma-separated (runs of one suite)")
    s.add_argument("--suite", help="every run of this suite (its name)")
    s.add_argument(
        "--model",
        choices=[*MODELS, "both"],
        default="2pl",
        help="rasch (1PL), 2pl (default; flags negatively discriminating items) or both",
    )
    s.add_argument("--json", action="store_true", help="print the fits as JSON")
    s.set_defaults(func=cmd_irt)
