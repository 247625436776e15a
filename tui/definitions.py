"""What the numbers on a screen mean: the one-line definitions of the metrics pipeline
(`analysis.metrics.METRICS`, the same text `llmscope report --explain` prints), found by the
metric names a screen shows. No Textual here."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.table import Table
from rich.text import Text

from llmscope.analysis.metrics import METRICS

_NAMES = sorted(METRICS, key=len, reverse=True)  # longest first: `brier_yes` before `brier`
# A name counts when it stands as a word: `accuracy` in "item_accuracy" is not `accuracy`.
_PATTERN = re.compile(
    r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, _NAMES)) + r")(?![A-Za-z0-9_])"
)


def metric_names_in(texts: Iterable[str]) -> list[str]:
    """The registered metric names that occur in `texts`, in first-seen order."""
    seen: dict[str, None] = {}
    for t in texts:
        for m in _PATTERN.finditer(t):
            seen.setdefault(m.group(1), None)
    return list(seen)


def definition(name: str) -> str:
    """The pipeline's one-line definition of metric `name`."""
    d = METRICS.get(name)
    return d.definition if d is not None else "(no definition registered)"


def tooltip(names: Iterable[str]) -> str | None:
    """`name: definition` lines for a panel's tooltip (None when it shows no metric)."""
    lines = [f"{n}: {definition(n)}" for n in names]
    return "\n".join(lines) if lines else None


def definitions_table(names: Iterable[str]) -> Table:
    """Metric, definition and interval method, one row per metric."""
    t = Table(box=None, padding=(0, 1), header_style="bold", expand=True, show_lines=False)
    t.add_column("metric", no_wrap=True, style="bold")
    t.add_column("definition", ratio=3)
    t.add_column("interval", ratio=1, style="dim")
    for n in names:
        d = METRICS.get(n)
        t.add_row(
            Text(n),
            Text(d.definition if d else "(no definition registered)"),
            Text(d.interval if d else ""),
        )
    return t


def plain_text(renderable: object, width: int = 200) -> str:
    """A Rich renderable (Text, Table, Group, str) as plain text, titles and headers included."""
    import io

    from rich.console import Console

    if isinstance(renderable, str):
        return renderable
    if isinstance(renderable, Text):
        return renderable.plain
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, legacy_windows=False).print(renderable)
    return out.getvalue()
