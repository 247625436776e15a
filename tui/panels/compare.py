"""Compare any number of runs: a runs x metrics matrix, every pair's paired accuracy
difference, and the items the runs disagree on.

Every number is rendered, not computed, here: the per-run metrics come from the metrics
pipeline (`analysis.metrics.run_metrics`, what `llmscope report` prints) and each pair's
difference, interval and p-value from `llmscope.compare.compare_runs` called on exactly that
pair, so a cell equals `llmscope compare A B --json`'s `comparisons[0]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmscope.analysis.rows import format_p
from llmscope.tui.widgets import literal, plain_table

__all__ = [
    "CompareMatrix",
    "PairCell",
    "compare_matrix",
    "disagreement_rows",
    "render_matrix",
    "render_pairs",
    "sort_disagreements",
]

# Overall metrics shown as matrix columns when a run has them (report names, in this order);
# other overall metrics follow, up to MAX_METRICS in all.
PREFERRED = (
    "accuracy",
    "item_accuracy",
    "ece",
    "brier",
    "yes_bias",
    "human_pearson",
    "probeval_kl",
    "position_bias",
    "off_format_rate",
    "errors",
)
MAX_METRICS = 8


@dataclass
class PairCell:
    """Run `b` against run `a` (`llmscope compare a b`): the comparison as the CLI's JSON has it."""

    a: str
    b: str
    comparison: dict[str, Any]
    p_holm: float | None = None  # Holm-adjusted over every pair shown (3+ runs)

    @property
    def diff(self) -> float | None:
        v = self.comparison.get("diff")
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


@dataclass
class CompareMatrix:
    run_ids: list[str]
    runs: list[dict[str, Any]]
    metrics: list[str]
    values: dict[str, dict[str, dict[str, Any]]]  # run_id -> metric -> report row
    pairs: dict[tuple[str, str], PairCell] = field(default_factory=dict)
    items: dict[str, str] = field(default_factory=dict)  # item_id -> text
    error: str | None = None
    correction: str | None = None  # the multiple-comparison correction over the pairs, if any
    family_size: int = 0

    def cell(self, a: str, b: str) -> PairCell | None:
        return self.pairs.get((a, b))


def compare_matrix(store: Any, run_ids: list[str]) -> CompareMatrix:
    """Metrics of every run and the paired comparison of every pair (i < j: j against i)."""
    from llmscope.analysis.metrics import run_metrics
    from llmscope.compare import compare_pairs

    runs = []
    for rid in run_ids:
        r = store.get_run(rid) or store.find_run(rid)
        if r is not None:
            runs.append(r)
    ids = [str(r["run_id"]) for r in runs]
    values: dict[str, dict[str, dict[str, Any]]] = {}
    seen: list[str] = []
    for r in runs:
        rows = {row["metric"]: row for row in run_metrics(store, r).rows() if not row.get("group")}
        values[str(r["run_id"])] = rows
        seen += [m for m in rows if m not in seen]
    metrics = [m for m in PREFERRED if m in seen]
    metrics += [m for m in seen if m not in metrics]
    out = CompareMatrix(ids, runs, metrics[:MAX_METRICS], values)
    # every pair is `llmscope compare A B`; with 3+ runs each p-value is also Holm-adjusted over
    # all the pairs shown (`compare_pairs`, as the study screen's comparisons)
    res = compare_pairs(store, [(a, b) for i, a in enumerate(ids) for b in ids[i + 1 :]])
    for p in res["pairs"]:
        if p["error"]:
            out.error = str(p["error"])
            out.pairs.clear()
            return out
        out.pairs[(p["a"], p["b"])] = PairCell(p["a"], p["b"], p["comparison"], p["p_adjusted"])
    out.correction, out.family_size = res["correction"], res["family_size"]
    if runs:
        rows = store.execute(
            "SELECT item_id, text FROM items WHERE suite_id = ?", [runs[0]["suite_id"]]
        ).fetchall()
        out.items = {str(i): t or "" for i, t in rows}
    return out


def _ci(row: dict[str, Any] | None, name: str) -> Text:
    from llmscope.analysis.metrics import display  # scipy: only once runs are compared

    if not row or row.get("value") is None:
        return Text("-", style="dim")
    t = Text(display(name, row["value"]))
    ci = row.get("ci95")
    if ci:
        t.append(f" [{display(name, ci[0])}, {display(name, ci[1])}]", style="dim")
    return t


def render_matrix(
    m: CompareMatrix, width: int = 120, labels: dict[str, str] | None = None
) -> Table:
    """Runs x metrics: each value with its 95% interval, as `llmscope report` gives it.

    As many metric columns as `width` holds (about 22 cells each); the run id is never cut.
    `labels` (a study's cell names by run id) replace the model column, so two cells of one
    model read apart."""
    run_w = max([len(str(r["run_id"])) for r in m.runs] + [3])

    def who(r: dict[str, Any]) -> str:
        return (labels or {}).get(str(r["run_id"])) or str(r.get("model") or "")

    model_w = min(30 if labels else 20, max([len(who(r)) for r in m.runs] + [5]))
    fit = max(1, (width - run_w - model_w - 6) // 23)
    names = m.metrics[:fit]
    hidden = len(m.metrics) - len(names)
    title = "runs × metrics (as llmscope report)" + (
        f"; {hidden} more with a wider window" if hidden else ""
    )
    t = Table(box=None, padding=(0, 1), header_style="bold", title=title, title_justify="left")
    t.add_column("run", no_wrap=True, min_width=run_w)
    t.add_column(
        "cell" if labels else "model", no_wrap=True, max_width=model_w, overflow="ellipsis"
    )
    for name in names:
        t.add_column(name, no_wrap=True, overflow="ellipsis")
    for r in m.runs:
        rid = str(r["run_id"])
        t.add_row(
            literal(rid),
            literal(who(r)),
            *[_ci(m.values.get(rid, {}).get(name), name) for name in names],
        )
    return t


def render_pairs(m: CompareMatrix) -> Any:
    """Every pair: Δ accuracy (column run − row run) [95% CI] p, from `llmscope compare row col`."""
    from llmscope.compare import HOLM_NAME

    if m.error:
        return Text(m.error, style="yellow")
    if len(m.run_ids) < 2:
        return Text("")
    t = plain_table(
        title="paired Δ accuracy: column − row [95% CI] p   (= llmscope compare ROW COL)",
    )
    t.add_column("row \\ column", no_wrap=True)
    for b in m.run_ids[1:]:
        t.add_column(literal(b), no_wrap=True)
    for i, a in enumerate(m.run_ids[:-1]):
        cells: list[Any] = []
        for j, b in enumerate(m.run_ids[1:], start=1):
            c = m.cell(a, b) if j > i else None
            if c is None:
                cells.append(Text("", style="dim"))
                continue
            cp = c.comparison
            lo, hi = cp.get("diff_ci95") or (None, None)
            d = c.diff
            if d is None:
                cells.append(Text("no common items", style="dim"))
                continue
            sig = lo is not None and hi is not None and (lo > 0 or hi < 0)
            txt = Text(
                f"{d:+.3f}", style="bold green" if sig and d > 0 else "bold red" if sig else ""
            )
            txt.append(
                f" [{lo:+.3f}, {hi:+.3f}] p={format_p(cp.get('p_value'))} n={cp.get('n')}",
                style="dim",
            )
            if c.p_holm is not None:
                txt.append(f"\n{HOLM_NAME}={format_p(c.p_holm)}", style="dim")
            cells.append(txt)
        t.add_row(literal(a), *cells)
    lines = Text()
    for (a, b), c in m.pairs.items():  # the same line `llmscope compare a b` prints, per pair
        cp, mc = c.comparison, c.comparison.get("mcnemar") or {}
        lo, hi = cp.get("diff_ci95") or (None, None)
        if c.diff is None or lo is None or hi is None:
            continue
        mp = format_p(mc.get("p"))
        lines.append(f"{b} vs {a}: ", style="bold")
        lines.append(
            f"Δacc {c.diff:+.3f} [{lo:+.3f}, {hi:+.3f}] p={format_p(cp.get('p_value'))}  n={cp.get('n')} "
            f"clusters={cp.get('n_clusters')}   McNemar b={mc.get('b_base_only')} c={mc.get('c_run_only')} "
            f"p={mp} ({mc.get('method')})"
        )
        if c.p_holm is not None:
            lines.append(f"  {HOLM_NAME}={format_p(c.p_holm)}")
        lines.append("\n")
    if m.correction:
        lines.append(
            f"{HOLM_NAME}: {m.correction} over the {m.family_size} pairs shown; "
            "p alone is each pair's own test",
            style="dim",
        )
    return Group(t, lines)


def disagreement_rows(m: CompareMatrix) -> list[dict[str, Any]]:
    """One row per (pair, item, variant) where the pair's correctness differs; `diff` is
    correct(b) − correct(a), the item's contribution to that pair's Δ accuracy."""
    out = []
    for (a, b), cell in m.pairs.items():
        for rec in cell.comparison.get("disagreements") or []:
            ca, cb = rec.get("correct_base"), rec.get("correct_run")
            d = float(cb) - float(ca) if ca is not None and cb is not None else math.nan
            out.append(
                {
                    "a": a,
                    "b": b,
                    "pair": f"{a[:8]}→{b[:8]}",
                    "item_id": str(rec.get("item_id")),
                    "variant": rec.get("variant"),
                    "diff": d,
                    "prediction_a": rec.get("prediction_base"),
                    "prediction_b": rec.get("prediction_run"),
                    "gold_a": rec.get("gold"),
                    "text": m.items.get(str(rec.get("item_id")), ""),
                }
            )
    return out


def _item_key(v: Any) -> tuple[int, float, str]:
    s = str(v)
    try:
        return (0, float(s), s)
    except ValueError:
        return (1, 0.0, s)


DIS_SORTS = ("|difference|", "item")


def sort_disagreements(rows: list[dict[str, Any]], how: str) -> list[dict[str, Any]]:
    """Largest |difference| first (then item id, numerically), or by item id numerically."""
    if how == "item":
        return sorted(rows, key=lambda r: (_item_key(r["item_id"]), str(r["variant"]), r["pair"]))
    return sorted(
        rows,
        key=lambda r: (
            -abs(r["diff"]) if math.isfinite(r["diff"]) else 0.0,
            _item_key(r["item_id"]),
            str(r["variant"]),
            r["pair"],
        ),
    )
