"""TUI pieces for `syntaxgym` runs: the word-surprisal drill-down and the SG panel.

The drill-down shows, for one item, each prediction (met or not), the region
surprisals of every condition side by side, and each condition's words with their
surprisal (bits) as bars. The SG panel lists the SG score per suite (the share of
items meeting all predictions, Wilson 95% CI as in `llmscope report`) and their mean.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from llmscope.tui.widgets import bar, ci_bar, literal


def render_surprisal(extra: dict[str, Any], max_bits: float | None = None) -> list[Any]:
    """Renderables for one syntaxgym result's `extra` (predictions, regions, words)."""
    out: list[Any] = []
    preds = extra.get("predictions") or []
    conds: dict[str, Any] = extra.get("conditions") or {}
    if preds:
        out.append(Text("predictions", style="bold"))
        for p in preds:
            ok = bool(p.get("met"))
            out.append(
                Text.assemble(
                    ("  ✔ " if ok else "  ✘ ", "green" if ok else "red"), literal(p.get("formula"))
                )
            )
    if not conds:
        return out
    regions: list[str] = []
    for c in conds.values():
        regions += [r for r in (c.get("regions") or {}) if r not in regions]
    out.append(Text("region surprisal (bits) per condition", style="bold"))
    t = Table(box=None, padding=(0, 1), header_style="bold")
    t.add_column("condition", no_wrap=True)
    for r in regions:
        t.add_column(r, justify="right")
    for name, c in conds.items():
        regs = c.get("regions") or {}
        t.add_row(
            literal(name),
            *[f"{regs[r]['surprisal_bits']:.2f}" if r in regs else "" for r in regions],
        )
    out.append(t)
    words = [
        w
        for c in conds.values()
        for w in (c.get("words") or [])
        if w.get("surprisal_bits") is not None
    ]
    top = max_bits or max([float(w["surprisal_bits"]) for w in words] or [1.0]) or 1.0
    for name, c in conds.items():
        out.append(
            Text.assemble(("\n  " + name + "  ", "bold cyan"), literal(c.get("sentence"), "italic"))
        )
        wt = Table(box=None, padding=(0, 1), show_header=False)
        wt.add_column(no_wrap=True)
        wt.add_column(justify="right")
        wt.add_column()
        wt.add_column(justify="right")
        for w in c.get("words") or []:
            s = w.get("surprisal_bits")
            wt.add_row(
                literal(w.get("word")),
                f"r{w.get('region')}",
                bar(None if s is None else s / top, 24),
                "" if s is None else f"{s:.2f}",
            )
        out.append(wt)
    return out


def sg_panel(snap: Any) -> Text:
    """SG score per suite from the dashboard's per-group accuracies (same definition)."""
    t = Text()
    t.append("SG score (items meeting all predictions)\n", style="bold")
    overall = getattr(snap, "sg_overall", None)
    if overall is not None:  # the metrics pipeline's sg_score (as `llmscope report`)
        for a in getattr(snap, "sg", None) or []:
            t.append(f"{a.label[:18]:<18} {a.mean:.3f} ")
            t.append(ci_bar(a.mean, a.lo, a.hi, 16))
            t.append(f" n={a.n}\n")
        t.append(
            f"sg_score {overall.mean:.3f} [{overall.lo:.3f}, {overall.hi:.3f}] n={overall.n}\n",
            style="bold",
        )
        return t
    groups = getattr(snap, "groups", None) or {}
    if not groups:
        if getattr(snap, "overall", None) is not None:
            a = snap.overall
            t.append(f"{a.mean:.3f} {ci_bar(a.mean, a.lo, a.hi, 16)} n={a.n}\n")
        return t
    key, accs = next(iter(groups.items()))
    for a in accs:
        t.append(f"{a.label[:18]:<18} {a.mean:.3f} ")
        t.append(ci_bar(a.mean, a.lo, a.hi, 16))
        t.append(f" n={a.n}\n")
    if accs:
        t.append(
            f"mean over {len(accs)} {key} values {sum(a.mean for a in accs) / len(accs):.3f}\n",
            style="bold",
        )
    return t
