"""Studies: the list of studies in the database, one study's matrix of cells (live while cells
run), and paired comparisons across cells.

Every number comes from elsewhere: a cell is a `llmscope.studies.spec.CellRow` from `study_cells`
(what `llmscope study status --json` prints; the headline metric from the metrics pipeline), and
a comparison is `llmscope compare A B` (`llmscope.compare.compare_pairs`, which adds each
p-value's Holm adjustment when several pairs are compared). tui/panels/study_matrix.py arranges them.

While another process holds the file (a `study run` writing its cells) the cells' state and
counts come from their runs' live channels (`live_cell_rows`), as `study status` shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Label, Static
from textual.worker import Worker

from llmscope.analysis.numbers import fmt_count, fmt_interval
from llmscope.runs.live import change_signature
from llmscope.store.db import StoreError
from llmscope.studies.store import CellRow
from llmscope.tui.data.store import is_lock_error
from llmscope.tui.panels.study_matrix import (
    Matrix,
    build_matrix,
    cell_lines,
    factors_of,
    filter_levels,
    live_study_names,
    merge_live,
    pairs_among,
)
from llmscope.tui.screens.base import BackScreen, _fmt_time
from llmscope.tui.widgets import clean, ellipsis, literal

__all__ = ["StudiesLoaded", "StudiesScreen", "StudyLoaded", "StudyPairsScreen", "StudyScreen"]

LIVE_NOTE = (
    "{db} is in use by another process (a study or run writing): each cell's state and counts "
    "come from its live channel; metrics appear when the file is free"
)


@dataclass(eq=False)
class StudiesLoaded(Message):
    rows: list[dict[str, Any]]
    notice: str
    watch_reason: str | None


@dataclass(eq=False)
class StudyLoaded(Message):
    """One study's cells; `live`: read from the live channel (the file is held elsewhere)."""

    rows: list[CellRow]
    live: bool
    notice: str
    watch_reason: str | None


@dataclass(eq=False)
class PairsLoaded(Message):
    result: dict[str, Any]


class _StudyReader(BackScreen):
    """A study screen reads the store in a worker (`load`, again on `r`); while another process
    holds the file, the live channel, and the app shows the file blocked until it is free."""

    if TYPE_CHECKING:

        def load(self) -> Worker[Any]: ...

    def action_reload(self) -> None:
        self.load()

    def show_read(
        self, watch_reason: str | None, selector: str, notice: str, style: str = ""
    ) -> None:
        """Apply a read: the file blocked or free (a read-only window never polls), the notice."""
        if not self.llm_app.watch_mode:
            self.llm_app.set_blocked(watch_reason)
        self.show_notice(selector, notice, style)


class StudiesScreen(_StudyReader):
    """The studies recorded in the database (`llmscope study run`); Enter opens one."""

    BINDINGS = [Binding("r", "reload", "Refresh")]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("Studies  (Enter: open the study's matrix)", classes="title")
        yield Static("", id="studies-notice")
        yield DataTable(id="studies", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#studies", DataTable).add_columns("study", "cells", "source", "recorded")
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="studies")
    def load(self) -> StudiesLoaded:
        from llmscope.studies.store import study_names

        app = self.llm_app
        reason: str | None = None
        notice = ""
        rows: list[dict[str, Any]] = []
        try:
            with app.handle.use() as store:
                for name in study_names(store):
                    src, n, at = store.execute(
                        "SELECT any_value(s.source), count(c.cell), max(s.updated_at) FROM studies s "
                        "LEFT JOIN study_cells c ON c.study = s.name WHERE s.name = ?",
                        [name],
                    ).fetchone()
                    rows.append({"name": name, "cells": int(n), "source": src, "updated": at})
        except StoreError as e:
            if not is_lock_error(e):
                raise
            if not app.watch_mode:
                reason = f"{app.db_path} is in use by another process"
            notice = LIVE_NOTE.format(db=app.db_path)
            rows = [
                {"name": n, "cells": None, "source": None, "updated": None}
                for n in live_study_names(app.db_path)
            ]
        return StudiesLoaded(rows, notice, reason)

    def on_studies_loaded(self, msg: StudiesLoaded) -> None:
        empty = (
            "" if msg.rows else "no study in this database (run one with `llmscope study run FILE`)"
        )
        text = "; ".join(t for t in (msg.notice, empty) if t)
        self.show_read(msg.watch_reason, "#studies-notice", text, "yellow")
        self.rows = msg.rows
        t = self.query_one("#studies", DataTable)
        t.clear()
        for r in msg.rows:
            t.add_row(
                literal(r["name"]),
                "-" if r["cells"] is None else str(r["cells"]),
                literal(ellipsis(r["source"] or "-", 50)),
                _fmt_time(r["updated"]),
                key=r["name"],
            )
        t.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.app.push_screen(StudyScreen(str(event.row_key.value)))


class StudyScreen(_StudyReader):
    """A study's cells as a matrix: rows and columns two of its factors (model, suite, the
    grid's), each cell its headline metric with its 95% interval, state and results stored."""

    BINDINGS = [
        Binding("f", "next_cols", "Column factor"),
        Binding("g", "next_rows", "Row factor"),
        Binding("t", "swap", "Swap axes"),
        Binding("s", "stack", "Stack/filter rest"),
        Binding("v", "next_level", "Next level"),
        Binding("space", "mark", "Mark cell"),
        Binding("M", "mark_row", "Mark row"),
        Binding("c", "compare", "Compare marked"),
        Binding("i", "irt", "IRT"),
        Binding("right_square_bracket", "page(1)", "More columns", key_display="]"),
        Binding("left_square_bracket", "page(-1)", "Previous columns", key_display="["),
        Binding("r", "reload", "Refresh"),
        Binding("d", "definitions", "Definitions", show=False),
    ]
    DEFAULT_CSS = """
    StudyScreen #study-title { height: auto; padding: 0 1; color: $accent; }
    StudyScreen #study-matrix { height: 1fr; }
    StudyScreen #study-detail { height: auto; max-height: 6; padding: 0 1; }
    StudyScreen #study-notice { color: $warning; padding: 0 1; }
    StudyScreen #study-axes { padding: 0 1; }
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self.study = name
        self.rows: list[CellRow] = []
        self.live = False
        self.row_factor = "model"
        self.col_factor = "suite"
        self.filtered = False
        self.filter_index = 0
        self.col_page = 0
        self.marked: list[str] = []  # cell keys, in the order marked
        self.matrix: Matrix | None = None
        self._shown_cols: list[int] = []
        self._sig: tuple[Any, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="study-title")
        yield Static("", id="study-axes")
        yield Static("", id="study-notice")
        yield DataTable(id="study-matrix", cursor_type="cell", header_height=2)
        yield Static("", id="study-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#study-notice").display = False
        self.load()
        self.set_interval(self.llm_app.refresh_s, self._tick)

    # -- loading -----------------------------------------------------------------------------
    def _tick(self) -> None:
        if any(w.group == "study" and w.is_running for w in self.workers):
            return
        sig = change_signature(self.llm_app.db_path)
        changed, self._sig = sig != self._sig, sig
        if changed or self.live or any(r.state == "running" for r in self.rows):
            self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="study")
    def load(self) -> StudyLoaded:
        from llmscope.studies.store import live_cell_rows, study_cells, study_record

        app = self.llm_app
        before = self.rows
        try:
            with app.handle.use() as store:
                if study_record(store, self.study) is None:
                    raise LookupError(f"no study {self.study!r} in {app.db_path}")
                rows = study_cells(store, self.study)
            return StudyLoaded(rows, False, "", None)
        except StoreError as e:
            if not is_lock_error(e):
                raise
        # the cells' grid as last read from the database (else the cells on the live channel)
        shape = [(r.cell, r.position, r.suite, r.model, dict(r.levels)) for r in before] or None
        rows = merge_live(live_cell_rows(app.db_path, self.study, shape), before)
        reason = None if app.watch_mode else f"{app.db_path} is in use by another process"
        return StudyLoaded(rows, True, LIVE_NOTE.format(db=app.db_path), reason)

    def on_study_loaded(self, msg: StudyLoaded) -> None:
        self.show_read(msg.watch_reason, "#study-notice", msg.notice)
        self.rows, self.live = msg.rows, msg.live
        self._redraw()

    # -- the matrix --------------------------------------------------------------------------
    def _filter(self) -> dict[str, str] | None:
        if not self.filtered:
            return None
        rest = [f for f in factors_of(self.rows) if f not in (self.row_factor, self.col_factor)]
        combos = filter_levels(self.rows, rest)
        return combos[self.filter_index % len(combos)]

    def _redraw(self) -> None:
        rows = self.rows
        counts: dict[str, int] = {}
        for r in rows:
            counts[r.state] = counts.get(r.state, 0) + 1
        summary = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items())
        title = Text(f"Study {clean(self.study)}", style="bold")
        title.append(f"  {len(rows)} cells: {summary or 'none recorded'}")
        title.append("   (= llmscope study status)", style="dim")
        self.query_one("#study-title", Static).update(title)
        m = build_matrix(rows, self.row_factor, self.col_factor, self._filter())
        self.matrix = m
        self._fill(m)

    def _col_texts(self, m: Matrix, j: int) -> tuple[str, str]:
        metric = m.col_metric(j)
        return clean(m.col_labels[j]), clean(metric or "")  # labels from a shared study file

    def _fill(self, m: Matrix) -> None:
        t = self.query_one("#study-matrix", DataTable)
        keep = (t.cursor_row, t.cursor_column)
        width = max(self.size.width, 40)
        marked = set(self.marked)
        # every cell's two lines, then column widths: no column is wider than the screen and
        # columns that do not fit go to the next page (`]`), so no number is cut at the edge
        lines: dict[tuple[int, int], tuple[Text, Text]] = {}
        for (i, j), c in m.cells.items():
            lines[(i, j)] = cell_lines(c, bool(m.col_metric(j)), c.cell in marked)
        label_w = min(
            max([len(s) for s in m.row_labels] + [len(m.row_factor), 5]), max(12, width // 3)
        )
        avail = width - label_w - 2 - 2 - 1  # the label's padding, the scrollbar, a margin
        col_w: list[int] = []
        for j in range(len(m.col_labels)):
            head = self._col_texts(m, j)
            w = max(
                [len(head[0]), len(head[1])]
                + [max(len(a.plain), len(b.plain)) for (_, jj), (a, b) in lines.items() if jj == j]
            )
            col_w.append(max(5, min(w, avail - 2)))
        pages: list[list[int]] = [[]]
        used = 0
        for j, w in enumerate(col_w):
            if pages[-1] and used + w + 2 > avail:
                pages.append([])
                used = 0
            pages[-1].append(j)
            used += w + 2
        self.col_page = max(0, min(self.col_page, len(pages) - 1))
        shown = pages[self.col_page]
        self._shown_cols = shown
        t.clear(columns=True)
        t.add_column(
            Text(ellipsis(clean(self.row_factor), label_w), style="bold"),
            width=label_w,
            key="label",
        )
        for j in shown:
            name, metric = self._col_texts(m, j)
            title = Text(ellipsis(name, col_w[j]), style="bold")
            title.append("\n" + ellipsis(metric, col_w[j]), style="dim")
            t.add_column(title, width=col_w[j], key=f"c{j}")
        for i, label in enumerate(m.row_labels):
            cells: list[Any] = [literal(ellipsis(label, label_w))]
            for j in shown:
                a, b = lines.get((i, j), (Text("-", style="dim"), Text("")))
                cells.append(Text("\n").join([_cut(a, col_w[j]), _cut(b, col_w[j])]))
            t.add_row(*cells, height=2, key=f"r{i}")
        if m.row_labels and shown:
            t.move_cursor(
                row=min(keep[0], len(m.row_labels) - 1),
                column=max(1, min(keep[1], len(shown))),
                animate=False,
            )
        self._axes(m, len(pages))
        self._detail()

    def _axes(self, m: Matrix, n_pages: int) -> None:
        t = Text()
        t.append("rows ", style="dim")
        t.append(m.row_factor, style="bold")
        if m.rest and m.filtered is None:
            t.append(" (+ " + ", ".join(m.rest) + ")")
        t.append("  columns ", style="dim")
        t.append(m.col_factor, style="bold")
        if m.filtered:
            t.append("  only ", style="dim")
            t.append(", ".join(f"{k}={v}" for k, v in m.filtered.items()), style="bold")
            t.append(" (v next)", style="dim")
        if n_pages > 1:
            first, last = self._shown_cols[0] + 1, self._shown_cols[-1] + 1
            t.append(f"  columns {first}-{last} of {len(m.col_labels)} ([ ])", style="yellow")
        t.append("   f g t s: axes", style="dim")
        self.query_one("#study-axes", Static).update(t)

    def current_cell(self) -> CellRow | None:
        m, t = self.matrix, self.query_one("#study-matrix", DataTable)
        if m is None or t.cursor_column < 1 or t.cursor_column > len(self._shown_cols):
            return None
        return m.cells.get((t.cursor_row, self._shown_cols[t.cursor_column - 1]))

    def _detail(self) -> None:
        c = self.current_cell()
        box = self.query_one("#study-detail", Static)
        if c is None:
            box.update("")
            return
        t = Text()
        t.append(clean(c.cell), style="bold")
        t.append(
            f"\nrun {c.run_id or '-'}   {c.state.replace('_', ' ')}   "
            f"results {c.n_done}/{c.n_total or '?'} ({c.n_errors} errors)"
        )
        if c.metric is not None:
            lo, hi = c.ci95 if c.ci95 else (None, None)
            t.append(
                f"\n{c.metric} {fmt_interval(c.value, lo, hi, c.metric)} {c.interval_method or ''} "
                f"n={fmt_count(c.n)}"
            )
        if c.error:
            t.append("\n" + clean(c.error), style="red")
        box.update(t)

    def on_data_table_cell_highlighted(self, event: DataTable.CellHighlighted) -> None:
        self._detail()

    def on_data_table_cell_selected(self, event: DataTable.CellSelected) -> None:
        self.open_cell()

    def on_resize(self) -> None:
        self._refill()

    def _refill(self) -> None:
        """Lay the matrix out again (a new size or page of columns); its cells stay as read."""
        if self.matrix is not None:
            self._fill(self.matrix)

    def open_cell(self) -> None:
        """The cell's run dashboard (live while it runs)."""
        from llmscope.tui.screens.dashboard import DashboardScreen

        c = self.current_cell()
        if c is None:
            return
        if not c.run_id:
            self.notify(
                f"[{clean(c.cell)}] has no run yet ({c.state.replace('_', ' ')})",
                severity="warning",
            )
            return
        self.app.push_screen(DashboardScreen(c.run_id))

    # -- axes --------------------------------------------------------------------------------
    def _cycle(self, current: str, other: str) -> str:
        fs = [f for f in factors_of(self.rows) if f != other]
        return fs[(fs.index(current) + 1) % len(fs)] if current in fs else fs[0]

    def action_next_cols(self) -> None:
        self.col_factor = self._cycle(self.col_factor, self.row_factor)
        self.col_page, self.filter_index = 0, 0
        self._redraw()

    def action_next_rows(self) -> None:
        self.row_factor = self._cycle(self.row_factor, self.col_factor)
        self.filter_index = 0
        self._redraw()

    def action_swap(self) -> None:
        self.row_factor, self.col_factor = self.col_factor, self.row_factor
        self.col_page = 0
        self._redraw()

    def action_stack(self) -> None:
        self.filtered = not self.filtered
        self.filter_index = 0
        self._redraw()

    def action_next_level(self) -> None:
        if not self.filtered:
            self.notify(
                "the other factors are stacked in the rows; s holds them at one level",
                severity="warning",
            )
            return
        self.filter_index += 1
        self._redraw()

    def action_page(self, step: int) -> None:
        self.col_page += step
        self._refill()

    # -- marks and comparisons ---------------------------------------------------------------
    def action_mark(self) -> None:
        c = self.current_cell()
        if c is None:
            return
        if c.cell in self.marked:
            self.marked.remove(c.cell)
        else:
            self.marked.append(c.cell)
        if self.matrix is not None:
            self._fill(self.matrix)

    def action_mark_row(self) -> None:
        m, t = self.matrix, self.query_one("#study-matrix", DataTable)
        if m is None:
            return
        row = [c.cell for (i, _), c in sorted(m.cells.items()) if i == t.cursor_row]
        if all(k in self.marked for k in row):
            self.marked = [k for k in self.marked if k not in row]
        else:
            self.marked += [k for k in row if k not in self.marked]
        self._fill(m)

    def action_compare(self) -> None:
        """Two marked cells: the compare screen (`llmscope compare A B`); more: every pair of
        marked cells on one suite, with the Holm adjustment over the pairs."""
        from llmscope.tui.screens.compare import CompareScreen

        by_key = {r.cell: r for r in self.rows}
        marked = sorted((by_key[k] for k in self.marked if k in by_key), key=lambda r: r.position)
        pairs = pairs_among(marked)
        if not pairs:
            self.notify(
                "mark two or more cells of one suite that have runs (space, or M for a row), "
                "then press c",
                severity="warning",
            )
            return
        if self.live:
            self.notify(
                "comparisons read the database, which another process holds; try again when "
                "it is free",
                severity="warning",
            )
            return
        if len(marked) == 2:
            a, b = pairs[0]
            self.app.push_screen(
                CompareScreen(
                    [str(a.run_id), str(b.run_id)],
                    labels={str(a.run_id): a.cell, str(b.run_id): b.cell},
                )
            )
        else:
            self.app.push_screen(StudyPairsScreen(self.study, pairs))

    def action_irt(self) -> None:
        """The study's item response theory (tui/screens/irt.py)."""
        from llmscope.tui.screens.irt import StudyIrtScreen

        if self.live:
            self.notify(
                "IRT reads the database, which another process holds; try again when it is free",
                severity="warning",
            )
            return
        self.app.push_screen(StudyIrtScreen(self.study, list(self.rows)))


def _cut(t: Text, width: int) -> Text:
    """A cell line in `width` characters, ending in "…" where it was cut."""
    if len(t.plain) <= width:
        return t
    out = t[: max(width - 1, 0)]
    out.append("…")
    return out


class StudyPairsScreen(BackScreen):
    """Several paired comparisons (each `llmscope compare A B`: Δ accuracy of B − A with its
    cluster-bootstrap interval and p-value), every p-value also Holm-adjusted over the pairs."""

    def __init__(self, study: str, pairs: list[tuple[CellRow, CellRow]]) -> None:
        super().__init__()
        self.study = study
        self.pairs = pairs
        self.result: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(
            Text(
                f"Study {self.study}: {len(self.pairs)} paired comparisons "
                "(each = llmscope compare A B)",
                style="bold",
            ),
            id="pairs-title",
        )
        yield Static("loading ...", id="pairs-note")
        yield DataTable(id="pairs", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#pairs", DataTable).add_columns(
            "B vs A", "Δ acc", "95% CI", "p", "p Holm", "n", "clusters"
        )
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="pairs")
    def load(self) -> PairsLoaded:
        from llmscope.compare import compare_pairs

        with self.llm_app.handle.use() as store:
            res = compare_pairs(store, [(str(a.run_id), str(b.run_id)) for a, b in self.pairs])
        return PairsLoaded(res)

    def on_pairs_loaded(self, msg: PairsLoaded) -> None:
        from llmscope.analysis.rows import format_p

        self.result = res = msg.result
        note = Text()
        if res["correction"]:
            note.append(
                f"p Holm: {res['correction']} over the {res['family_size']} pairs compared",
                style="bold",
            )
        b = res["bootstrap"]
        note.append(
            f"\nΔ accuracy = B − A on the items both scored; paired cluster bootstrap "
            f"({b['resamples']} resamples, seed {b['seed']}). Enter: the pair's compare screen.",
            style="dim",
        )
        self.query_one("#pairs-note", Static).update(note)
        t = self.query_one("#pairs", DataTable)
        t.clear()
        for k, ((ca, cb), p) in enumerate(zip(self.pairs, res["pairs"], strict=True)):
            label = literal(f"{cb.cell}  vs  {ca.cell}")
            cp = p["comparison"]
            if cp is None or cp.get("diff") is None:
                t.add_row(
                    label,
                    literal(p.get("error") or "no common items", "yellow"),
                    "",
                    "",
                    "",
                    "",
                    "",
                    key=str(k),
                )
                continue
            lo, hi = cp["diff_ci95"]
            adj = p["p_adjusted"]
            t.add_row(
                label,
                f"{cp['diff']:+.3f}",
                f"[{lo:+.3f}, {hi:+.3f}]",
                format_p(cp["p_value"]),
                format_p(adj) if adj is not None else "-",
                str(cp["n"]),
                str(cp["n_clusters"]),
                key=str(k),
            )
        t.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        from llmscope.tui.screens.compare import CompareScreen

        a, b = self.pairs[int(str(event.row_key.value))]
        self.app.push_screen(CompareScreen([str(a.run_id), str(b.run_id)]))
