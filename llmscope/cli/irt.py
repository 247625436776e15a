"""`llmscope irt`: Rasch and 2PL fits across runs of one suite (`llmscope.analysis.irt`), as a
table, JSON or CSV (`--format`, `-o FILE`). Registered in `COMMAND_GROUPS`; the fitting lives in analysis."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from llmscope.cli.common import CLIError, ParserContext, open_store

if TYPE_CHECKING:
    from llmscope.analysis.irt import IrtFit

# analysis.irt's MODELS; spelled here so that building the parser imports no numpy or pandas
# (tests/cli/test_startup.py); tests/analysis/test_irt.py checks they agree.
MODELS = ("rasch", "2pl")
FORMATS = ("table", "json", "csv")
TABLES = ("items", "abilities")


def select_runs(store: Any, runs: str | None, suite: str | None) -> list[dict[str, Any]]:
    """The runs named (ids or prefixes, comma-separated) or every run of a suite (by name)."""
    from llmscope.analysis.irt import runs_of_suite

    if bool(runs) == bool(suite):
        raise CLIError("irt: give --runs A,B,... or --suite NAME (one of them)")
    if suite:
        found = runs_of_suite(store, suite_name=suite)
        if not found:
            df = store.runs()
            names = sorted({str(s) for s in df["suite_name"].dropna()})
            raise CLIError(
                f"irt: no run of suite {suite!r}; suites with runs: {', '.join(names) or 'none'}"
            )
        return found
    out = []
    for name in [x.strip() for x in str(runs).split(",") if x.strip()]:
        run = store.find_run(name)
        if run is None:
            raise CLIError(f"irt: no run {name!r} in {store.path}")
        out.append(run)
    return out


def select_items(
    store: Any, runs: list[dict[str, Any]], items: str | None, where: str | None
) -> list[str] | None:
    """The item subset asked for: `--items` (ids or `id/variant` names, comma-separated, or
    @FILE with one a line) and/or `--where` (a filter over the first run's rows and the items'
    fields, `llmscope/runs/where.py`); both given: the items in both. None: every item."""
    if not items and not where:
        return None
    chosen: list[str] | None = None
    if items:
        if items.startswith("@"):
            path = items[1:]
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError) as e:
                raise CLIError(f"irt: --items {items}: cannot read ({type(e).__name__})") from e
            chosen = [ln.strip() for ln in text.splitlines() if ln.strip()]
        else:
            chosen = [x.strip() for x in items.split(",") if x.strip()]
        if not chosen:
            raise CLIError(f"irt: --items {items!r} names no item")
    if where:
        import duckdb

        from llmscope.cli.rerun import WHERE_SHORTHANDS, selection_frame
        from llmscope.runs.where import check_where, connect_sandboxed

        df = store.results_frame(runs[0]["run_id"])
        sel = selection_frame(df)
        cond = WHERE_SHORTHANDS.get(where.strip(), where)
        con = connect_sandboxed()
        try:
            con.register("r", sel)
            checked = check_where(cond, sel.columns, con)
            head = "SELECT DISTINCT item_id FROM r WHERE "
            if not checked.startswith(head):  # the checked query's shape is where.py's own
                raise ValueError("not a filter over the rows")
            sql = "SELECT DISTINCT item_id, variant FROM r WHERE " + checked[len(head) :]
            rows = con.execute(sql).fetchall()
        except (duckdb.Error, ValueError) as e:
            cols = ", ".join(sel.columns)
            raise CLIError(
                f"irt: --where {where!r}: {str(e).splitlines()[0]} (columns: {cols})"
            ) from e
        finally:
            con.close()
        one_variant = df["variant"].astype(str).nunique() <= 1
        names = [str(i) if one_variant else f"{i}/{v}" for i, v in rows]
        if not names:
            raise CLIError(f"irt: --where {where!r} matches no item of run {runs[0]['run_id']}")
        if chosen is not None:
            keep = set(chosen)
            names = [n for n in names if n in keep or n.partition("/")[0] in keep]
        chosen = list(dict.fromkeys(names))
    return chosen


def _num(v: float | None, fmt: str = "{:+.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _ci(ci: tuple[float | None, float | None]) -> str:
    return "" if ci[0] is None or ci[1] is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def format_fit(fit: IrtFit) -> str:
    """A plain-text table: abilities, then items (flagged ones first), then what was left out."""
    lines = [
        f"IRT {fit.model} on suite {fit.suite}: {len(fit.abilities)} runs x {len(fit.items)} items "
        f"({fit.method}; converged: {fit.converged})",
        *(f"WARNING: {w}" for w in fit.warnings),
        *(f"note: {n}" for n in fit.notes),
        "",
        "ability per run (theta, 95% interval; accuracy and fit accuracy over the fitted items)",
    ]
    for a in sorted(fit.abilities, key=lambda a: -a.theta):
        exp = (
            "" if a.expected_accuracy is None else f"  expected accuracy {a.expected_accuracy:.3f}"
        )
        lines.append(
            f"  {a.run_id:<18} {a.model[:30]:<30} {a.theta:+.2f} {_ci(a.ci):<16} "
            f"accuracy {a.accuracy:.3f} fit {a.fit_accuracy:.3f} n={a.n}{exp}"
        )
    lines += [
        "",
        "items (difficulty, discrimination, 95% intervals; flag: discrimination interval below 0)",
    ]
    w = max((len(i.item) for i in fit.items), default=4)
    for i in sorted(fit.items, key=lambda i: (not i.flagged, i.discrimination)):
        flag = (
            "  LIKELY LABEL ERROR" if i.flagged else ("  negative" if i.discrimination < 0 else "")
        ) + ("  AT BOUND" if i.at_bound else "")
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
    """`llmscope irt`: fit, then print or write (table, JSON, or CSV of items or abilities)."""
    from llmscope.analysis.irt import IrtError, fit_stored

    fmt = "json" if args.json else args.format
    if args.json and args.format not in ("table", "json"):
        raise CLIError(f"irt: --json and --format {args.format} ask for two formats; give one")
    if args.table != "items" and fmt != "csv":
        raise CLIError("irt: --table picks the CSV's table; use it with --format csv")
    if fmt == "table" and args.output:
        raise CLIError("irt: -o writes --format json or csv; the table prints to the terminal")
    store = open_store(args.db, read_only=True)
    try:
        runs = select_runs(store, args.runs, args.suite)
        items = select_items(store, runs, args.items, args.where)
        try:
            fits = [
                fit_stored(store, runs, m, items)
                for m in (MODELS if args.model == "both" else (args.model,))
            ]
        except IrtError as e:
            raise CLIError(f"irt: {e}") from e
    finally:
        store.close()
    if fmt == "table":
        print("\n\n".join(format_fit(f) for f in fits))
        return 0
    text = render(fits, fmt, args.table, raw=args.raw)
    from llmscope.io.export import ExportError, write_output

    try:
        write_output(text, args.output, force=args.force)
    except ExportError as e:
        raise CLIError(f"irt: {e}") from e
    if args.output:
        what = "fit(s)" if fmt == "json" else args.table
        print(f"wrote the IRT {what} of {len(runs)} runs to {args.output}", file=sys.stderr)
    return 0


def render(fits: list[IrtFit], fmt: str, table: str = "items", *, raw: bool = False) -> str:
    """The fits as JSON (every field, `IrtFit.to_dict`) or as CSV of one table: `items`
    (`analysis.irt.items_frame`) or `abilities` (`abilities_frame`)."""
    if fmt == "json":
        return json.dumps([f.to_dict() for f in fits], indent=1) + "\n"
    from llmscope.analysis.irt import TEXT_COLUMNS, abilities_frame, items_frame
    from llmscope.io.export import frame_csv

    df = items_frame(fits) if table == "items" else abilities_frame(fits)
    return frame_csv(df, TEXT_COLUMNS, raw=raw)


def add_parsers(sub: Any, ctx: ParserContext) -> None:
    """Register `llmscope irt` on the CLI's subparsers."""
    s = sub.add_parser("irt", help="Rasch and 2PL item response theory across runs of one suite")
    ctx.db_arg(s)
    s.add_argument("--runs", help="run ids or prefixes, comma-separated (runs of one suite)")
    s.add_argument("--suite", help="every run of this suite (its name)")
    s.add_argument(
        "--items",
        help="fit these items only: ids or id/variant names, comma-separated, or @FILE (one a line)",
    )
    s.add_argument(
        "--where",
        help="fit the items whose rows (of the first run) match FILTER, as in `rerun --where`",
    )
    s.add_argument(
        "--model",
        choices=[*MODELS, "both"],
        default="2pl",
        help="rasch (1PL), 2pl (default; flags negatively discriminating items) or both",
    )
    s.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (default, to the terminal), json (every field) or csv (one table, --table)",
    )
    s.add_argument(
        "--table",
        choices=TABLES,
        default="items",
        help="csv: items (parameters, intervals, flag, reading; default) or abilities (per run)",
    )
    s.add_argument("--json", action="store_true", help="print the fits as JSON (= --format json)")
    s.add_argument("-o", "--output", help="file for --format json or csv (default: stdout)")
    s.add_argument("--force", action="store_true", help="replace an existing output file")
    s.add_argument(
        "--raw",
        action="store_true",
        help="csv: write text cells starting with = + - @ tab CR unchanged (default: prefix ')",
    )
    s.set_defaults(func=cmd_irt)
