"""The dashboard's humans panel: model P(yes) by human majority and the pipeline's agreement numbers.

Other human data (choice counts, ratings, answer clusters) is summarised by tui/panels/human.py.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from llmscope.tui.widgets import fmt


def human_histogram(hist: dict[str, list[int]]) -> Text:
    """Model P(yes) (q1) in ten bins, items split by the human majority: agree █, disagree ▒."""
    agree, disagree = list(hist.values())[0], list(hist.values())[1]
    top = max([1, *agree, *disagree])
    t = Text()
    t.append("model P(yes) by human majority\n", style="bold")
    t.append("█ agree", style="green")
    t.append(" / ")
    t.append("▒ disagree", style="red")
    t.append(" (humans)\n")
    for i in range(10):
        a, d = agree[i], disagree[i]
        t.append(f"{i / 10:.1f}-{(i + 1) / 10:.1f} ")
        t.append("█" * round(10 * a / top), style="green")
        t.append("▒" * round(10 * d / top), style="red")
        t.append(f" {a}/{d}\n")
    return t


def render_human_stats(hs: dict[str, Any]) -> Text:
    """Consensus, awareness and commonsensicality with their CIs, and the P(yes)-vs-humans
    correlations (`Snapshot.human_stats`)."""
    h = Text()
    for k, name in (
        ("consensus", "consensus"),
        ("awareness", "awareness"),
        ("commonsensicality", "commonsensicality"),
    ):
        h.append(f"{name:<12} ", style="bold")
        h.append(f"{fmt(hs.get(k))} [{fmt(hs.get(k + '_lo'), 2)}, {fmt(hs.get(k + '_hi'), 2)}]\n")
    h.append(
        f"human_pearson {fmt(hs.get('pearson'), 2)}  human_spearman {fmt(hs.get('spearman'), 2)}"
        "  (P(yes) vs humans)"
    )
    return h
