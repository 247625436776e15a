"""A study's cells as a matrix for the TUI's study screen (tui/screens/study.py).

Nothing is computed here: each cell is a `llmscope.studies.spec.CellRow` (`study_cells`, the rows
`llmscope study status --json` prints: state, counts, the headline metric and its interval
from the metrics pipeline), and this module only arranges them (which two factors form the
rows and columns, the others stacked into the row label or filtered to one level) and writes
each as text at the precision every surface prints (`analysis.metrics.display`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.text import Text

from llmscope.analysis.metrics import display
from llmscope.studies.store import CellRow

__all__ = [
    "STATE_STYLE",
    "Matrix",
    "build_matrix",
    "cell_lines",
    "factors_of",
    "filter_levels",
    "level_of",
    "live_study_names",
    "merge_live",
]

STATE_STYLE = {
    "done": "green",
    "done_with_errors": "yellow",
    "running": "bold cyan",
    "partial": "yellow",
    "error": "bold red",
    "not_started": "dim",
}


def factors_of(rows: list[CellRow]) -> list[str]:
    """The study's factors: model, suite, then the grid's factors in the order they appear."""
    out = ["model", "suite"]
    for r in rows:
        out += [k for k in r.levels if k not in out]
    return out


def level_of(row: CellRow, factor: str) -> str:
    if factor == "model":
        return row.model
    if factor == "suite":
        return row.suite
    return str(row.levels.get(factor, "-"))


def _levels(rows: list[CellRow], factor: str) -> list[str]:
    return list(dict.fromkeys(level_of(r, factor) for r in rows))


def filter_levels(rows: list[CellRow], rest: list[str]) -> list[dict[str, str]]:
    """Every combination of the other factors' levels that some cell has, in cell order."""
    if not rest:
        return [{}]
    seen = dict.fromkeys(tuple(level_of(r, f) for f in rest) for r in rows)
    return [dict(zip(rest, combo, strict=True)) for combo in seen]


@dataclass
class Matrix:
    """Rows x columns of cells; `rest` are the factors neither axis shows."""

    row_factor: str
    col_factor: str
    rest: list[str]
    filtered: dict[str, str] | None  # the other factors' levels shown (None: stacked in rows)
    row_labels: list[str] = field(default_factory=list)
    col_labels: list[str] = field(default_factory=list)
    cells: dict[tuple[int, int], CellRow] = field(default_factory=dict)

    def col_metric(self, j: int) -> str | None:
        """The column's headline metric when every cell of it that has one shares it."""
        names = {c.metric for (_, jj), c in self.cells.items() if jj == j and c.metric}
        return names.pop() if len(names) == 1 else None


def build_matrix(
    rows: list[CellRow], row_factor: str, col_factor: str, filtered: dict[str, str] | None
) -> Matrix:
    """Cells arranged by two factors. The other factors are stacked into the row label
    (`filtered` None: `model prompt=plain`) or held at one level each (`filtered`)."""
    rest = [f for f in factors_of(rows) if f not in (row_factor, col_factor)]
    m = Matrix(row_factor, col_factor, rest, filtered)
    keep = [
        r for r in rows if not filtered or all(level_of(r, f) == v for f, v in filtered.items())
    ]
    m.col_labels = _levels(keep, col_factor)
    stacked = [] if filtered is not None else rest
    keys = list(
        dict.fromkeys((level_of(r, row_factor), *(level_of(r, f) for f in stacked)) for r in keep)
    )
    # rows in the order of the row factor's levels (file order), the stacked ones within
    order = {lv: i for i, lv in enumerate(_levels(keep, row_factor))}
    keys.sort(key=lambda k: order[k[0]])
    m.row_labels = [
        k[0] + "".join(f" {f}={v}" for f, v in zip(stacked, k[1:], strict=True)) for k in keys
    ]
    index = {k: i for i, k in enumerate(keys)}
    cols = {lv: j for j, lv in enumerate(m.col_labels)}
    for r in keep:
        k = (level_of(r, row_factor), *(level_of(r, f) for f in stacked))
        m.cells[(index[k], cols[level_of(r, col_factor)])] = r
    return m


def _state(r: CellRow) -> str:
    return r.state.replace("_", " ")


def cell_lines(
    r: CellRow | None, metric_in_header: bool, marked: bool = False
) -> tuple[Text, Text]:
    """A cell's two lines: the headline value with its 95% interval (and the metric's name
    unless the column header gives it), then its state and the results stored (`n_done` of
    `n_total`, errors beside), as `study status --json` has them."""
    if r is None:
        return Text("-", style="dim"), Text("")
    top = Text()
    if r.value is not None and r.metric:
        if not metric_in_header:
            top.append(f"{r.metric} ", style="dim")
        top.append(display(r.metric, r.value), style="bold")
        if r.ci95 is not None:
            top.append(f" [{display(r.metric, r.ci95[0])}, {display(r.metric, r.ci95[1])}]")
    else:
        top.append("-", style="dim")
    low = Text("● " if marked else "", style="bold magenta")
    low.append(_state(r), style=STATE_STYLE.get(r.state, ""))
    if r.n_total or r.n_done:
        low.append(f" {r.n_done}/{r.n_total if r.n_total else '?'}", style="default")
        if r.state == "running" and r.n_total:
            low.append(f" {100 * r.n_done / r.n_total:.0f}%")
    if r.n_errors:
        low.append(f" {r.n_errors} err", style="red")
    return top, low


def merge_live(live: list[CellRow], before: list[CellRow]) -> list[CellRow]:
    """Live-channel rows (state and counts only) with the metric an earlier database read gave
    the same finished run at the same count: a finished run's stored results, and so its
    metric, no longer change. Other cells show no metric until the file is free."""
    import dataclasses

    old = {r.cell: r for r in before}
    out = []
    for r in live:
        o = old.get(r.cell)
        if (
            o is not None
            and o.metric is not None
            and r.state in ("done", "done_with_errors")
            and o.state == r.state
            and o.run_id == r.run_id
            and o.n_done == r.n_done
        ):
            r = dataclasses.replace(
                r,
                metric=o.metric,
                value=o.value,
                ci95=o.ci95,
                interval_method=o.interval_method,
                n=o.n,
            )
        out.append(r)
    return out


def live_study_names(db: str | Path) -> list[str]:
    """Studies a `study run` published beside the file, or named by runs on the live channel
    (while another process holds the file)."""
    from llmscope.runs.live import read_live
    from llmscope.studies.store import published_study_names

    names: list[str] = list(dict.fromkeys(published_study_names(db)))
    for snap in read_live(db):
        run: Any = snap.get("run") or {}
        meta = run.get("meta") if isinstance(run, dict) else None
        studies = meta.get("studies") if isinstance(meta, dict) else None
        if isinstance(studies, dict):
            names += [str(k) for k in studies if str(k) not in names]
    return sorted(names)


def pairs_among(marked: list[CellRow]) -> list[tuple[CellRow, CellRow]]:
    """Every pair of marked cells that scored the same suite (a paired comparison needs the
    same items), earlier cell first."""
    return [
        (a, b)
        for a, b in itertools.combinations(marked, 2)
        if a.suite == b.suite and a.run_id and b.run_id
    ]
