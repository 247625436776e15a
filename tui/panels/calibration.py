"""The dashboard's calibration panel: the pipeline's ECE, MCE and Brier scores under the reliability plot."""

from __future__ import annotations

import math

from rich.text import Text

from llmscope.tui.data.snapshot import Snapshot
from llmscope.tui.widgets import fmt


def render_calibration(snap: Snapshot) -> Text:
    """The calibration numbers, labelled with the metric names `llmscope report` prints
    (docs/METRICS.md)."""
    cal = Text()
    cal.append("ece ", style="bold")
    cal.append(fmt(snap.ece))
    cal.append("   mce ", style="bold")
    cal.append(fmt(snap.mce))
    if not math.isnan(snap.ece_raw):
        # which confidence each ECE uses (docs/METRICS.md): renormalised over the answers, or raw
        cal.append("  (P(pred) renormalised)")
        cal.append("\nece_raw ", style="bold")
        cal.append(fmt(snap.ece_raw))
        cal.append("  (raw P(pred))")
    cal.append("\nbrier ", style="bold")
    cal.append(fmt(snap.brier))
    if not math.isnan(snap.brier_yes):
        cal.append("\nbrier_yes ", style="bold")
        cal.append(fmt(snap.brier_yes))
    return cal
