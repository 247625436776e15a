"""The dashboard's accuracy panel: accuracy with CIs, yes/no and WorldSense bias, P(other), more metrics.

Every number is the metrics pipeline's (`Snapshot`, tui/data/snapshot.py); this module only lays
them out.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmscope.analysis.metrics import display
from llmscope.tui.data.snapshot import STORED_RUN_PRODUCERS, Snapshot
from llmscope.tui.widgets import bar, ci_bar, clean, fmt, literal, plain_table


def render_accuracy(snap: Snapshot, no_gold_variants: list[str], active: bool) -> Table | Group:
    """Accuracy overall, by prompt variant and by group, the variants without gold, and the
    stored-run producers' overall numbers (`more_metrics`)."""
    tab = Table(box=None, padding=(0, 1), show_header=True, header_style="bold", expand=True)
    tab.add_column(snap.accuracy_name, no_wrap=True, overflow="ellipsis", ratio=2)
    tab.add_column("mean", justify="right", width=5)
    tab.add_column("95% CI", width=16, no_wrap=True)
    tab.add_column("n", justify="right", width=5)

    def row(a: Any, indent: str = "") -> None:
        tab.add_row(
            literal(indent + a.label), f"{a.mean:.3f}", ci_bar(a.mean, a.lo, a.hi, 16), str(a.n)
        )

    if snap.overall:
        row(snap.overall)
    if snap.variants:
        tab.add_row(Text("by prompt variant", style="dim"), "", "", "")
        for a in snap.variants:
            row(a, "  ")
    for g, accs in snap.groups.items():
        tab.add_row(literal(f"by {g}", "dim"), "", "", "")
        for a in accs:
            row(a, "  ")
    if not snap.overall:
        # A finished run whose items have no gold (cfc/ProbEval, contamination probes) has no
        # accuracy at all; "yet" would promise one.
        done = not active and bool(snap.n)
        tab.add_row(
            Text(
                "no accuracy: these items have no gold answer (metrics below; h: human vs model)"
                if done
                else "no scored results yet",
                style="dim",
            ),
            "",
            "",
            "",
        )
    no_gold = Text()
    for v in no_gold_variants:
        no_gold.append(
            f"  {clean(v)}: no gold for this variant (no {snap.accuracy_name})\n", style="dim"
        )
    more = more_metrics(snap)
    parts: list[Table | Text] = [tab, *([no_gold] if no_gold else []), *([more] if more else [])]
    return Group(*parts) if len(parts) > 1 else tab


def more_metrics(snap: Snapshot) -> Text | None:
    """Overall numbers of the stored-run producers (contamination probes, generation metrics)."""
    rm = snap.metrics
    rows = [
        m
        for m in (rm.metrics if rm is not None else [])
        if m.producer in STORED_RUN_PRODUCERS and not m.group and m.value is not None
    ]
    if not rows:
        return None
    t = Text("more metrics (d: definitions)\n", style="bold")
    for m in rows:
        ci = f" [{display(m.name, m.lo)}, {display(m.name, m.hi)}]" if m.ci95 is not None else ""
        t.append(
            f"  {m.name} {display(m.name, m.value)}{ci}   n {m.n if m.n is not None else '-'}\n"
        )
    return t


def render_bias(snap: Snapshot, no_gold_variants: list[str]) -> Any:
    """The yes/no bias table (one column per variant) and WorldSense's per-problem table."""
    parts: list[Any] = []
    if snap.yesno is not None and len(snap.yesno):
        recs = snap.yesno.to_dict("records")
        ci = recs[0].get("yes_bias_ci")
        t = plain_table(
            title="yes/no bias"
            + (f" (yes_bias 95% CI [{fmt(ci[0])}, {fmt(ci[1])}])" if ci else ""),
            expand=True,
        )
        # One row per metric (the names `llmscope report` prints), one column per variant.
        t.add_column("metric", justify="left", no_wrap=True)
        for r in recs:
            t.add_column(literal(str(r.get("variant"))), justify="right", no_wrap=True)
        for name in ("mean_p_yes", "pred_yes_rate", "gold_yes_rate", "yes_bias"):
            # gold-based cells of a variant without gold say so rather than a bare "-"
            t.add_row(
                name,
                *[
                    Text("no gold", style="dim")
                    if name in ("gold_yes_rate", "yes_bias")
                    and str(r.get("variant")) in no_gold_variants
                    else fmt(r[name])
                    for r in recs
                ],
            )
        parts.append(t)
    if snap.worldsense is not None and len(snap.worldsense):
        t = plain_table(
            title="WorldSense per problem (the authors' metrics: worldsense_accuracy, worldsense_bias)",
            expand=True,
        )
        for c in ("problem", "acc", "±", "bias", "±"):
            t.add_column(c, justify="left" if c == "problem" else "right")
        for r in snap.worldsense.to_dict("records"):
            t.add_row(
                literal(r["problemname"]),
                display("worldsense_accuracy", r["acc"]),
                display("worldsense_accuracy", r["acc_ci"]),
                display("worldsense_bias", r["bias"]),
                display("worldsense_bias", r["bias_ci"]),
            )
        parts.append(t)
    return Group(*parts) if parts else Text("")


def render_other(snap: Snapshot) -> Text:
    """P(other): the probability mass outside the answers, as a histogram (yes/no runs)."""
    o = Text()
    if snap.other_hist is not None:
        o.append("P(other) — mass outside the answers\n", style="bold")
        o.append(f"mean_p_other {fmt(snap.other_mean)}   off_format_rate {fmt(snap.off_format)}\n")
        for r in snap.other_hist.itertuples():
            o.append(f"{r.lo:.1f}-{r.hi:.1f} {bar(r.share, 20)} {int(r.count)}\n")
    return o
