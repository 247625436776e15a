"""Home: runs in the database, the suites available, and a form to start a run."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Header, Input, Label, Static

from llmscope.runs.live import change_signature
from llmscope.store.db import StoreError
from llmscope.tui.data.live import live_runs
from llmscope.tui.data.store import db_runs, is_lock_error
from llmscope.tui.messages import RunsLoaded, SuitesLoaded
from llmscope.tui.panels.form import RunForm
from llmscope.tui.screens.base import BaseScreen, _fmt_time, limited_note
from llmscope.tui.screens.compare import CompareScreen
from llmscope.tui.screens.dashboard import DashboardScreen
from llmscope.tui.widgets import clean, ellipsis, fmt, literal

WATCH_ONLY = (
    "This window only watches (`llmscope view`, or the database is in use by another "
    "process): it cannot start runs.\n\nStart one with `llmscope` (the full interface) "
    "or `llmscope run` on a database no other process is writing."
)


RUN_COLUMNS = (" ", "run", "suite", "model", "accuracy", "progress", "status", "started")


def _with_live_progress(rows: list[dict[str, Any]], live: Any) -> Any:
    """The stored runs, with the progress that runs another process is writing publish on
    their live channel (a few seconds ahead of its last commit), and the runs it started after
    that commit; `skipped` (unreadable live-channel files) kept for the notice."""
    from llmscope.runs.live import LiveRuns

    out = LiveRuns(skipped=getattr(live, "skipped", []))
    running = {str(r["run_id"]): r for r in live if r.get("live")}
    for r in rows:
        lr = running.pop(str(r["run_id"]), None)
        if lr is not None:
            r = {**r, **{k: lr[k] for k in ("status", "n_done", "n_errors", "accuracy", "live")}}
        out.append(r)
    return LiveRuns([*running.values(), *out], skipped=out.skipped)


class HomeScreen(BaseScreen):
    """Runs in the database, the suites available, and a form to start a run."""

    BINDINGS = [
        Binding("space", "mark", "Mark for compare"),
        Binding("c", "compare", "Compare"),
        Binding("r", "reload", "Refresh"),
        Binding("n", "new_run", "New run"),
        Binding("S", "studies", "Studies", show=False),  # in Help and the command palette
        Binding("q", "app.quit", "Quit"),
        # Inputs leave Esc to us: it takes the focus out of the form, back to the runs list.
        Binding("escape", "focus_runs", "Runs list", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.marked: set[str] = set()
        self._opened_initial = False
        # The run a pushed screen shows: when it closes, the runs list gets the focus back with
        # its cursor on that run, never the form field focused before (so a key pressed
        # after Esc, such as `n`, cannot land in the base URL).
        self._returning_to: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="notice")
        with Vertical(id="home-runs"):
            yield Label("Runs  (Enter open · Space mark · c compare)", classes="title")
            yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="home-bottom"):
            with Vertical(id="suites-box"):
                yield Label("Suites  (Enter: use in the form)", classes="title")
                yield DataTable(id="suites", cursor_type="row")
            yield RunForm(id="run-form")  # tui/panels/form.py: every `llmscope run` option
            # in its place while this window only watches (`llmscope view`, or a locked file)
            yield Static(WATCH_ONLY, id="form-off")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#runs", DataTable)
        # The headline number right after what was run, so an 80-column terminal shows it; no
        # fixed widths: a column is as wide as its longest cell (ids and counts keep every
        # character) and the table scrolls sideways when the columns do not fit.
        t.add_columns(*RUN_COLUMNS)
        self._suite_rows: list[dict[str, Any]] = []
        self._suite_cols()
        for inp in self.query(Input):
            inp.cursor_blink = False
        self.reload()
        self.load_suites()
        self._sync_form()
        self.set_interval(self.llm_app.refresh_s * 2, self._tick)

    def _sync_form(self) -> None:
        """The new-run form only where this window can start runs (not while it watches)."""
        watching = bool(self.llm_app.watch_mode)
        form, off = self.query_one(RunForm), self.query_one("#form-off", Static)
        if form.display == watching or off.display != watching:
            if watching and form.has_focus_within:
                self.query_one("#runs", DataTable).focus()
            form.display, off.display = not watching, watching

    def _tick(self) -> None:
        self._sync_form()
        if any(w.group == "home-runs" and w.is_running for w in self.workers):
            return  # never pile up reads (each opens a short-lived connection)
        # Refresh while something is running, and when another process starts or ends a run
        # (its live channel or the file changed): a viewer opened early picks new runs up itself.
        sig = change_signature(self.llm_app.db_path)
        changed, self._change_sig = sig != getattr(self, "_change_sig", sig), sig
        if (
            changed
            or self.llm_app.blocked  # another process holds the file: try again until it is free
            or self.llm_app.handle.written_by is not None  # read from a copy: follow the writer
            or any(
                r.get("live") or str(r.get("status", "")).startswith("running") for r in self.rows
            )
            or self.llm_app.running
        ):
            self.reload()

    def action_reload(self) -> None:
        self.reload()

    def reload(self) -> None:
        self.load_runs()

    @work(thread=True, exclusive=True, exit_on_error=False, group="home-runs")
    def load_runs(self) -> RunsLoaded:
        app = self.llm_app
        notice = app.notice
        watch_reason: str | None = None
        rows: list[dict[str, Any]] = []
        try:
            # another llmscope process writing the file: its rows as of its last commit
            with app.handle.use() as store:
                rows = db_runs(store)
            if app.handle.written_by is not None:
                rows = _with_live_progress(rows, live_runs(app.db_path))
        except StoreError as e:
            if not is_lock_error(e):
                raise
            # a holder that allows no copy: applied on the UI thread (on_runs_loaded); cleared
            # by the next read that succeeds
            watch_reason = f"{app.db_path} is in use by another process"
            rows = live_runs(app.db_path)
            notice = (
                f"{app.db_path} is in use by another process (DuckDB allows one writer); "
                "showing runs published on its live channel until it is free again"
            )
        skipped = getattr(rows, "skipped", None)
        if skipped:
            notice = f"{notice + '; ' if notice else ''}{len(skipped)} unreadable live-channel file(s) skipped"
        for r in rows:
            h = app.running.get(str(r.get("run_id")))
            if h is not None:
                p = h.reporter.snapshot()
                if p:
                    r["n_done"], r["n_total"], r["accuracy"] = (
                        p.get("done"),
                        p.get("total"),
                        p.get("accuracy"),
                    )
        return RunsLoaded(rows, notice, watch_reason)

    def on_runs_loaded(self, msg: RunsLoaded) -> None:
        self.llm_app.set_blocked(msg.watch_reason)
        self._sync_form()
        self.rows = msg.rows
        self.show_notice("#notice", msg.notice, "yellow")
        self._fill_runs()
        if self.llm_app.initial_run and not self._opened_initial:
            self._opened_initial = True
            want = self.llm_app.initial_run
            ids = [str(r["run_id"]) for r in self.rows]
            if want == "last" and ids:
                match = [ids[-1] if not self.rows[0].get("live") else ids[0]]
            else:
                match = [i for i in ids if i.startswith(want)]
            if len(match) == 1:
                self.open_run(match[0])
            else:
                self.notify(f"no single run matches {want!r}", severity="warning")

    def _fill_runs(self) -> None:
        t = self.query_one("#runs", DataTable)
        keep = t.cursor_row
        t.clear()
        # Below DESCRIPTION_MIN_WIDTH the model's name gives way (ellipsis) and the progress
        # leaves out its share, so the count ends before the right edge: with the embedded
        # model's name an 80-column list once showed "300/300 10" for 300/300 100%.
        self._runs_narrow = narrow = self.app.size.width < self.DESCRIPTION_MIN_WIDTH
        for r in self.rows:
            rid = str(r.get("run_id"))
            done, total = r.get("n_done"), r.get("n_total")
            prog = f"{done or 0}/{total or '?'}"
            if total and not narrow:
                prog += f" {100 * (done or 0) / total:.0f}%"
            prog += limited_note(r, narrow)
            acc = r.get("accuracy")
            t.add_row(
                "●" if rid in self.marked else " ",
                literal(rid),
                literal(r.get("suite_name")),
                literal(ellipsis(str(r.get("model") or ""), 14 if narrow else 40)),
                fmt(acc)
                if r.get("metric") in (None, "accuracy")
                else f"{fmt(acc)} {r['metric']}",  # headline (store.runs)
                prog,
                literal(r.get("status")),
                _fmt_time(r.get("started_at")),
                key=rid,
            )
        if self.rows:
            t.move_cursor(row=min(keep, len(self.rows) - 1))

    def _current_run(self) -> str | None:
        t = self.query_one("#runs", DataTable)
        if not self.rows or t.cursor_row < 0 or t.cursor_row >= len(self.rows):
            return None
        return str(self.rows[t.cursor_row]["run_id"])

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "runs":
            rid = str(event.row_key.value)
            self.open_run(rid)
        elif event.data_table.id == "suites" and not self.llm_app.watch_mode:
            self.query_one("#f-suite", Input).value = str(event.row_key.value)
            self.query_one("#f-model", Input).focus()

    def open_run(self, run_id: str) -> None:
        self._returning_to = run_id
        self.app.push_screen(DashboardScreen(run_id))

    def on_screen_resume(self) -> None:
        if self._returning_to is None:
            return  # e.g. Help closed: the focus stays where the user put it
        rid, self._returning_to = self._returning_to, None
        self._cursor_to(rid)
        self.query_one("#runs", DataTable).focus()

    def _cursor_to(self, run_id: str) -> None:
        ids = [str(r.get("run_id")) for r in self.rows]
        if run_id in ids:
            self.query_one("#runs", DataTable).move_cursor(row=ids.index(run_id))

    def action_focus_runs(self) -> None:
        self.query_one("#runs", DataTable).focus()

    def action_mark(self) -> None:
        rid = self._current_run()
        if rid is None:
            return
        self.marked.symmetric_difference_update({rid})
        t = self.query_one("#runs", DataTable)
        t.update_cell(rid, t.ordered_columns[0].key, "●" if rid in self.marked else " ")

    def action_compare(self) -> None:
        ids = [str(r["run_id"]) for r in self.rows if str(r["run_id"]) in self.marked]
        if len(ids) < 2:
            self.notify("mark two or more runs with Space, then press c", severity="warning")
            return
        if self.llm_app.blocked:
            self.notify(
                "compare needs the database, which another process holds; try again when it "
                "is free",
                severity="warning",
            )
            return
        self._returning_to = ids[0]
        self.app.push_screen(CompareScreen(ids))

    def action_studies(self) -> None:
        from llmscope.tui.screens.study import StudiesScreen  # tui/screens/study.py

        self.app.push_screen(StudiesScreen())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # `llmscope view` cannot start runs: its footer does not offer the key (False hides it)
        if action == "new_run" and self.llm_app.watch_mode:
            return False
        return True

    def action_new_run(self) -> None:
        if self.llm_app.watch_mode:
            self.notify(
                "this window only watches; start runs with `llmscope` or `llmscope run`",
                severity="warning",
            )
            return
        self.query_one("#f-suite", Input).focus()

    # -- suites -----------------------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="home-suites")
    def load_suites(self) -> SuitesLoaded:
        from llmscope.data.registry import external_suite
        from llmscope.data.suites import SuiteDataMissing, builtin_names, load_suite

        rows = []
        for name in builtin_names():
            entry = external_suite(name)
            if entry is not None and entry.large:  # listed unread
                rows.append(
                    {
                        "name": name,
                        "task": entry.task,
                        "items": None,
                        "description": "full data set (needs --suite-path or ../shared)",
                    }
                )
                continue
            try:
                s = load_suite(name)
                rows.append(
                    {
                        "name": name,
                        "task": s.task,
                        "items": len(s.items()),
                        "description": " ".join((s.description or "").split()),
                    }
                )
            except SuiteDataMissing:  # a loader whose default data (../shared) is absent
                rows.append(
                    {
                        "name": name,
                        "task": entry.task if entry is not None else "?",
                        "items": None,
                        "description": "needs --suite-path (no ../shared)",
                    }
                )
            except Exception as e:  # a broken spec is listed with its error
                rows.append({"name": name, "task": "?", "items": None, "description": str(e)})
        return SuitesLoaded(rows)

    # Below this many columns the runs list gives the model's name less room (ellipsis).
    DESCRIPTION_MIN_WIDTH = 100
    # The suites list shows descriptions only with this much room: cut short, their leading
    # numbers ("243 statements ...") read as cut item counts.
    DESCRIPTION_MIN_ROOM = 16

    def _suite_cols(self, force: bool = False) -> None:
        """The suites list's columns for the table's width, its rows filled again.

        Suite names and item counts stay whole; the task name gives way (ellipsis) where the
        table is narrow, and the description is shown, cut with an ellipsis, only where it has
        room: at 80 columns the task once showed `contamin`, cut at the edge with no mark."""
        t = self.query_one("#suites", DataTable)
        rows, pad = self._suite_rows, 2 * t.cell_padding
        name_w = max([cell_len("suite")] + [cell_len(clean(r["name"])) for r in rows])
        items_w = max(
            [cell_len("items")]
            + [len("-" if r["items"] is None else str(r["items"])) for r in rows]
        )
        task_full = max([cell_len("task")] + [cell_len(clean(r["task"])) for r in rows])
        task_w: int | None = None
        desc_w: int | None = None
        if t.size.width:  # laid out: fit the last column to the room left
            used = name_w + pad + items_w + pad
            bar = t.styles.scrollbar_size_vertical if len(rows) + 1 > t.size.height else 0
            room = t.size.width - bar - used - pad  # for the task (and description) column
            if room - task_full - pad >= self.DESCRIPTION_MIN_ROOM:
                desc_w = min(room - task_full - pad, 60)
            else:
                task_w = max(room, 4)
        if not force and getattr(self, "_suites_layout", None) == (task_w, desc_w):
            return
        self._suites_layout = (task_w, desc_w)
        keep = t.cursor_row
        t.clear(columns=True)  # a column keeps its widest cell's width until it is re-added
        # Explicit widths: sized from the cells as they are added, a column could be drawn at
        # its title's width (`commo` for commonsense-sample) when the rows came in mid-layout.
        widths = {
            "suite": max([cell_len("suite")] + [cell_len(clean(r["name"])) for r in rows]),
            "items": max(
                [cell_len("items")]
                + [len("-" if r["items"] is None else str(r["items"])) for r in rows]
            ),
            "task": task_w
            if task_w is not None
            else max([cell_len("task")] + [cell_len(clean(r["task"])) for r in rows]),
        }
        if desc_w:
            widths["description"] = max(
                [cell_len("description")]
                + [cell_len(ellipsis(clean(r["description"]), desc_w)) for r in rows]
            )
        for name, w in widths.items():
            t.add_column(name, width=w)
        self._fill_suites()
        if rows:
            t.move_cursor(row=min(keep, len(rows) - 1))

    def on_resize(self) -> None:
        # after the layout, so the table's new width is known
        self.call_after_refresh(self._suite_cols)
        if getattr(self, "_runs_narrow", None) is not None and self._runs_narrow != (
            self.app.size.width < self.DESCRIPTION_MIN_WIDTH
        ):
            t = self.query_one("#runs", DataTable)
            keep = t.cursor_row
            t.clear(columns=True)  # a column keeps its widest cell's width until it is re-added
            t.add_columns(*RUN_COLUMNS)
            self._fill_runs()
            if self.rows:
                t.move_cursor(row=min(keep, len(self.rows) - 1))

    def _fill_suites(self) -> None:
        t = self.query_one("#suites", DataTable)
        t.clear()
        task_w, desc_w = getattr(self, "_suites_layout", (None, None))
        for r in self._suite_rows:
            t.add_row(
                literal(r["name"]),
                Text("-" if r["items"] is None else str(r["items"]), justify="right"),
                literal(r["task"] if task_w is None else ellipsis(r["task"], task_w)),
                *([literal(ellipsis(r["description"], desc_w))] if desc_w else []),
                key=r["name"],
            )

    def on_suites_loaded(self, msg: SuitesLoaded) -> None:
        self._suite_rows = msg.rows
        self._suite_cols(force=True)  # the task column's room depends on the suite names
        inp = self.query_one("#f-suite", Input)
        if not inp.value and msg.rows:
            inp.value = msg.rows[0]["name"]

    # -- form -------------------------------------------------------------------------------
    def on_run_form_submitted(self, event: RunForm.Submitted) -> None:
        run = event.run
        self.notify(f"starting {run.suite} with {run.config.model or 'the default model'} ...")
        self.llm_app.start_run(run.params())
