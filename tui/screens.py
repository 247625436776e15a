"""Screens of the llmscope TUI: Home, Dashboard, Item, Compare, Help."""

from __future__ import annotations

import json
import math
import shlex
from typing import TYPE_CHECKING, Any, cast

import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Footer, Header, Input, Label, ProgressBar, Static
from textual.worker import Worker

from llmscope.analysis.api_method import method_banner
from llmscope.analysis.metrics import display
from llmscope.store.db import StoreError
from llmscope.tui.model import (
    LiveFeed,
    RunModel,
    Snapshot,
    active_live_runs,
    compare_runs,
    db_runs,
    is_lock_error,
    item_detail,
    item_detail_live,
    items_from_suite,
    live_runs,
    load_items,
)
from llmscope.tui.widgets import (
    ItemList,
    ReliabilityPlot,
    bar,
    ci_bar,
    clean,
    fmt,
    literal,
)

if TYPE_CHECKING:
    from llmscope.tui.app import LlmscopeApp


def _fmt_time(v: Any) -> str:
    if v is None or v is pd.NaT:
        return "-"
    s = str(v)
    return s[:19].replace("T", " ")


def _duration(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    s = int(s)
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def _set(widget: Static, renderable: Any, sig: str) -> None:
    """Update a Static only when what it shows changed (signature string)."""
    if getattr(widget, "_sig", None) != sig:
        widget._sig = sig  # type: ignore[attr-defined]
        widget.update(renderable)


class BaseScreen(Screen[None]):
    """Worker state changes don't bubble: every screen hands them to the app's one handler."""

    @property
    def llm_app(self) -> LlmscopeApp:
        """`self.app`, typed as the llmscope app so its attributes are checked."""
        # Screens are only ever pushed by LlmscopeApp; the import stays lazy (app imports us).
        return cast("LlmscopeApp", self.app)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        self.llm_app.on_worker_state_changed(event)


# =============================================================================================
# Home
# =============================================================================================
class RunsLoaded(Message):
    def __init__(self, rows: list[dict[str, Any]], notice: str) -> None:
        super().__init__()
        self.rows = rows
        self.notice = notice


class SuitesLoaded(Message):
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__()
        self.rows = rows


class HomeScreen(BaseScreen):
    """Runs in the database, the suites available, and a form to start a run."""

    BINDINGS = [
        Binding("space", "mark", "Mark for compare"),
        Binding("c", "compare", "Compare"),
        Binding("r", "reload", "Refresh"),
        Binding("n", "new_run", "New run"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.marked: set[str] = set()
        self._opened_initial = False

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
            with Grid(id="form"):
                yield Label("New run", classes="title form-title")
                yield Label("suite")
                yield Input(id="f-suite", placeholder="built-in name or spec path", compact=True)
                yield Label("model")
                yield Input(
                    id="f-model",
                    placeholder="default | hf:ID | gguf:FILE | openai:NAME",
                    compact=True,
                )
                yield Label("base URL")
                yield Input(id="f-base-url", placeholder="for openai: models", compact=True)
                yield Label("options")
                yield Input(id="f-options", placeholder="task options: key=value ...", compact=True)
                yield Label("limit")
                yield Input(id="f-limit", placeholder="all items", type="integer", compact=True)
                yield Label("batch size")
                yield Input(id="f-batch", value="16", type="integer", compact=True)
                yield Label("concurrency")
                yield Input(id="f-conc", value="8", type="integer", compact=True)
                yield Button("Start run", id="start", variant="primary")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#runs", DataTable)
        t.add_columns(" ", "run", "suite", "model", "status", "progress", "accuracy", "started")
        s = self.query_one("#suites", DataTable)
        s.add_column("suite", width=20)
        s.add_column("task", width=11)
        s.add_column("items", width=6)
        s.add_column("description", width=60)
        for inp in self.query(Input):
            inp.cursor_blink = False
        self.reload()
        self.load_suites()
        self.set_interval(self.llm_app.refresh_s * 2, self._tick)

    def _tick(self) -> None:
        if any(w.group == "home-runs" and w.is_running for w in self.workers):
            return  # never pile up reads (each opens a short-lived connection)
        # Only refresh while something is running: finished lists don't change by themselves.
        if (
            any(r.get("live") or str(r.get("status", "")).startswith("running") for r in self.rows)
            or self.llm_app.running
        ):
            self.reload()

    def action_reload(self) -> None:
        self.reload()

    def reload(self) -> None:
        self.load_runs()

    @work(thread=True, exclusive=True, exit_on_error=False, group="home-runs")
    def load_runs(self) -> None:
        app = self.llm_app
        notice = app.notice
        rows: list[dict[str, Any]] = []
        if app.watch_mode and active_live_runs(app.db_path):
            rows = live_runs(app.db_path)
            notice = (
                "a run is writing this database: showing the live channel; "
                "finished runs appear when it ends"
            )
        else:
            try:
                with app.handle.use() as store:
                    rows = db_runs(store)
            except StoreError as e:
                if not is_lock_error(e):
                    raise
                if not app.watch_mode:
                    app.switch_to_watch(
                        f"{app.db_path} is in use by another process; watching it "
                        "through the live channel (read-only)"
                    )
                rows = live_runs(app.db_path)
                notice = (
                    f"{app.db_path} is in use by another process (DuckDB allows one writer); "
                    "showing runs published on its live channel"
                )
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
        self.post_message(RunsLoaded(rows, notice))

    def on_runs_loaded(self, msg: RunsLoaded) -> None:
        self.rows = msg.rows
        _set(self.query_one("#notice", Static), literal(msg.notice, "yellow"), msg.notice)
        self.query_one("#notice").display = bool(msg.notice)
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
        for r in self.rows:
            rid = str(r.get("run_id"))
            done, total = r.get("n_done"), r.get("n_total")
            prog = f"{done or 0}/{total or '?'}"
            if total:
                prog += f" {100 * (done or 0) / total:.0f}%"
            acc = r.get("accuracy")
            t.add_row(
                "●" if rid in self.marked else " ",
                literal(rid),
                literal(r.get("suite_name")),
                literal(str(r.get("model") or "")[:40]),
                literal(r.get("status")),
                prog,
                fmt(acc),
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
        elif event.data_table.id == "suites":
            self.query_one("#f-suite", Input).value = str(event.row_key.value)
            self.query_one("#f-model", Input).focus()

    def open_run(self, run_id: str) -> None:
        self.app.push_screen(DashboardScreen(run_id))

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
        if self.llm_app.watch_mode and active_live_runs(self.llm_app.db_path):
            self.notify(
                "compare needs the database, which a live run holds; try again when it ends",
                severity="warning",
            )
            return
        self.app.push_screen(CompareScreen(ids))

    def action_new_run(self) -> None:
        self.query_one("#f-suite", Input).focus()

    # -- suites -----------------------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="home-suites")
    def load_suites(self) -> None:
        from llmscope.data.suites import builtin_names, load_suite

        rows = []
        for name in builtin_names():
            if name in ("commonsense", "worldsense"):
                rows.append(
                    {
                        "name": name,
                        "task": {"commonsense": "yesno"}.get(name, "constrained"),
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
            except Exception as e:  # a broken spec is listed with its error
                rows.append({"name": name, "task": "?", "items": None, "description": str(e)})
        self.post_message(SuitesLoaded(rows))

    def on_suites_loaded(self, msg: SuitesLoaded) -> None:
        t = self.query_one("#suites", DataTable)
        t.clear()
        for r in msg.rows:
            t.add_row(
                literal(r["name"]),
                r["task"],
                "-" if r["items"] is None else str(r["items"]),
                literal(r["description"][:60]),
                key=r["name"],
            )
        inp = self.query_one("#f-suite", Input)
        if not inp.value and msg.rows:
            inp.value = msg.rows[0]["name"]

    # -- form -------------------------------------------------------------------------------
    def form_params(self) -> dict[str, Any]:
        """The new-run form as parameters for `LlmscopeApp.start_run` (raises ValueError)."""
        from llmscope.engine.config import ConfigError, parse_options

        def val(i: str) -> str:
            return self.query_one(f"#{i}", Input).value.strip()

        def number(i: str, name: str, lo: int) -> int | None:
            text = val(i)
            if not text:
                return None
            try:
                n = int(text)
            except ValueError:
                raise ValueError(f"{name} must be a whole number, got {text!r}") from None
            if n < lo:
                raise ValueError(f"{name} must be {lo} or more, got {n}")
            return n

        if not val("f-suite"):
            raise ValueError("choose a suite")
        try:
            opts = parse_options(shlex.split(val("f-options")))
        except (ConfigError, ValueError) as e:
            raise ValueError(str(e)) from e
        return {
            "suite": val("f-suite"),
            "model": val("f-model") or None,
            "base_url": val("f-base-url") or None,
            "options": opts,
            "limit": number("f-limit", "limit", 1),
            "batch_size": number("f-batch", "batch size", 1) or 16,
            "concurrency": number("f-conc", "concurrency", 1) or 8,
        }

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            self.start_from_form()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.start_from_form()

    def start_from_form(self) -> None:
        try:
            params = self.form_params()
        except ValueError as e:
            self.notify(str(e), severity="error")
            return
        self.notify(f"starting {params['suite']} with {params['model'] or 'the default model'} ...")
        self.llm_app.start_run(params)


# =============================================================================================
# Dashboard
# =============================================================================================
class DashData(Message):
    def __init__(
        self, run: dict[str, Any], progress: dict[str, Any] | None, snap: Snapshot, source: str
    ) -> None:
        super().__init__()
        self.run = run
        self.progress = progress
        self.snap = snap
        self.source = source


FAIL_COLUMNS = [
    ("item_id", "item", 12),
    ("variant", "variant", 8),
    ("group", "group", 16),
    ("gold", "gold", 8),
    ("prediction", "pred", 10),
    ("confidence", "conf", 5),
    ("distance", "|m-h|", 5),
    ("text", "text", 0),
]


class DashboardScreen(BaseScreen):
    """One run: progress, accuracy with CIs, bias, calibration, humans, failing items."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("s", "sort", "Sort"),
        Binding("g", "group", "Group filter"),
        Binding("f", "conf", "Conf. filter"),
        Binding("l", "focus_list", "Items", show=False),
        Binding("x", "stop", "Stop run"),
        Binding("r", "resume", "Resume run"),
        Binding("m", "methods", "Methods", show=False),  # hidden: keeps the footer snapshot stable
    ]

    RESUMABLE = ("interrupted", "failed", "completed_with_errors", "incomplete")
    PAGED_LIST = True  # False: the in-memory list for finished runs too (bench.scale's "before")

    def action_methods(self) -> None:
        """Scoring schemes, human fit, order effects, plan (tui/panels_methods.py)."""
        from llmscope.tui.panels_methods import MethodsScreen

        self.app.push_screen(MethodsScreen(self.run_id))

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.model: RunModel | None = None
        self.feed: LiveFeed | None = None
        self.source = "db"
        self.run: dict[str, Any] = {"run_id": run_id}
        self._group_values: list[str] = []
        self._shown_version = -1
        self.active = True

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="dash-head"):
            yield Static("loading ...", id="head")
            yield ProgressBar(id="bar", show_eta=False, show_percentage=True)
        with Horizontal(id="panels"):
            with VerticalScroll(id="left"):
                yield Static("", id="acc")
                yield Static("", id="bias")
                yield Static("", id="other")
            with Vertical(id="middle"):
                yield ReliabilityPlot(id="rel")
                yield Static("", id="cal")
            with VerticalScroll(id="right"):
                yield Static("", id="human-plot")
                yield Static("", id="human")
        yield Static("", id="fail-title")
        yield Static("", id="fail-head")
        yield ItemList(FAIL_COLUMNS, id="failing")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#fail-head", Static).update(self.query_one(ItemList).header())
        self.query_one("#human", Static).update(
            Text("no human judgements in this suite", style="dim")
        )
        self.load(initial=True)
        self.set_interval(self.llm_app.refresh_s, self._tick)
        self.query_one(ItemList).focus()

    def _tick(self) -> None:
        if not self.active:
            return
        for w in self.workers:
            if w.group == "dash" and w.is_running:
                return  # never pile up reads
        self.load(initial=False)

    def _is_active(self, run: dict[str, Any]) -> bool:
        if self.source == "live":
            return True
        h = self.llm_app.running.get(self.run_id)
        if h is not None and not h.reporter.ended:
            self._resume_pending = False
            return True
        if getattr(self, "_resume_pending", False):
            return True  # a resume is starting: keep polling until its run shows up
        return str(run.get("status") or "").startswith("running")

    @work(thread=True, exclusive=True, exit_on_error=False, group="dash")
    def load(self, initial: bool) -> None:
        app = self.llm_app
        if initial and app.watch_mode and self.run_id not in app.running:
            feed = LiveFeed(app.db_path, self.run_id)
            snap = feed.progress()
            if snap is not None and not snap["ended"]:
                self.feed, self.source = feed, "live"
        progress: dict[str, Any] | None = None
        if initial and self.source == "db" and self.model is None:
            self._first_frame()
        if self.source == "live":
            assert self.feed is not None
            snap = self.feed.progress() or {}
            run = dict(snap.get("run") or {"run_id": self.run_id})
            if self.model is None:
                spec, items = items_from_suite(run)
                self.model = RunModel(run, spec, items)
            self.model.add_live(self.feed.read_new())
            progress = snap.get("progress")
            if snap.get("ended"):
                try:
                    self._load_db(initial=True)
                    self.source = "db"
                    run = self.run
                except StoreError as e:
                    if not is_lock_error(e):
                        raise
                    # The writer has not released the file yet; try on the next tick.
        else:
            self._load_db(initial=self.model is None)
            run = self.run
            h = app.running.get(self.run_id)
            if h is not None:
                progress = h.reporter.snapshot()
        self.run = run
        assert self.model is not None
        # While a run streams, the metrics pipeline runs at most every two refreshes.
        snap_ = self.model.compute(throttle_s=app.refresh_s * 2 if self._is_active(run) else 0.0)
        self.post_message(DashData(run, progress, snap_, self.source))

    def _first_frame(self) -> None:
        """Header and counts at once (one SQL query); the numbers follow from the pipeline."""
        from llmscope.tui.model import quick_snapshot

        try:
            with self.llm_app.handle.use() as store:
                run, snap = quick_snapshot(store, self.run_id)
        except StoreError:
            return  # _load_db reports it
        if run is not None:
            self.post_message(DashData(run, None, snap, "db"))

    def _load_db(self, initial: bool) -> None:
        with self.llm_app.handle.use() as store:
            run = store.get_run(self.run_id) or store.find_run(self.run_id)
            if run is None:
                raise StoreError(f"no run {self.run_id!r} in {self.llm_app.db_path}")
            self.run = run
            if initial:
                self.run_id = str(run["run_id"])
                self.model = RunModel(
                    run, store.suite_spec(run["suite_id"]), load_items(store, run["suite_id"])
                )
            assert self.model is not None
            self.model.run = run
            self.model.poll_db(store)

    def on_dash_data(self, msg: DashData) -> None:
        self.active = self._is_active(msg.run)
        status = (msg.progress or {}).get("status") or msg.run.get("status")
        if status != getattr(self, "_bound_status", None):
            self._bound_status = status
            self.refresh_bindings()  # Stop run / Resume run follow the status
        self._show_header(msg.run, msg.progress, msg.snap, msg.source)
        if msg.snap.pending:
            self.query_one("#acc", Static).update(Text("computing metrics ...", style="dim"))
            return
        if msg.snap.version != self._shown_version:
            self._shown_version = msg.snap.version
            self._show_panels(msg.snap)

    # -- drawing ----------------------------------------------------------------------------
    def _show_header(
        self, run: dict[str, Any], p: dict[str, Any] | None, snap: Snapshot, source: str
    ) -> None:
        total = int((p or {}).get("total") or run.get("n_total") or 0)
        done = int(p.get("done") or 0) if p else snap.n
        errors = int(p.get("errors") or 0) if p else snap.n_errors
        status = (p or {}).get("status") if p else run.get("status")
        t = Text()
        t.append(clean(run.get("model") or "?"), style="bold")
        t.append("  on  ")
        t.append(clean(run.get("suite_name") or "?"), style="bold")
        t.append(f"  [{clean(run.get('task'))}]  run {clean(self.run_id)}  ")
        t.append(
            clean(status or "?"), style="green" if str(status).startswith("completed") else "yellow"
        )
        if source == "live":
            t.append("  (live channel)", style="magenta")
        t.append("\n")
        t.append(f"{done}/{total or '?'} results   errors {errors}")
        if p and self._is_active(run):
            be = p.get("backend") or {}
            retries = be.get("retries", be.get("n_retries", 0))
            t.append(
                f"   retries {retries}   {p.get('items_per_s', 0):.1f} items/s   "
                f"{p.get('tokens_per_s', 0):.0f} tok/s   ETA {_duration(p.get('eta_s'))}"
            )
        acc = snap.overall
        if acc is not None:
            t.append(f"   {snap.accuracy_name} {acc.mean:.3f} [{acc.lo:.3f}, {acc.hi:.3f}]")
        banner = method_banner(run)  # API runs: the scoring method chosen and why
        if banner:
            t.append("\n" + clean(banner), style="cyan")
        _set(self.query_one("#head", Static), t, t.plain)
        b = self.query_one("#bar", ProgressBar)
        if total:
            b.update(total=total, progress=done)

    def _show_panels(self, snap: Snapshot) -> None:
        model = self.model
        # accuracy
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
            tab.add_row(Text("no scored results yet", style="dim"), "", "", "")
        self.query_one("#acc", Static).update(tab)
        # bias
        self.query_one("#bias", Static).update(self._bias(snap))
        # other mass
        o = Text()
        if snap.other_hist is not None:
            o.append("P(other) — mass outside the answers\n", style="bold")
            o.append(
                f"mean {fmt(snap.other_mean)}   off-format (other > answers) {fmt(snap.off_format)}\n"
            )
            for r in snap.other_hist.itertuples():
                o.append(f"{r.lo:.1f}-{r.hi:.1f} {bar(r.share, 20)} {int(r.count)}\n")
        self.query_one("#other", Static).update(o)
        if self.run.get("task") == "syntaxgym":  # SG panel
            from llmscope.tui.panels_surprisal import sg_panel

            self.query_one("#other", Static).update(sg_panel(snap))
        # calibration
        self.query_one(ReliabilityPlot).show(snap.rel_bins)
        # Labels are the metric names `llmscope report` prints (docs/METRICS.md).
        cal = Text()
        cal.append("ece ", style="bold")
        cal.append(fmt(snap.ece))
        cal.append("   mce ", style="bold")
        cal.append(fmt(snap.mce))
        cal.append("\nbrier ", style="bold")
        cal.append(fmt(snap.brier))
        if not math.isnan(snap.brier_yes):
            cal.append("\nbrier_yes ", style="bold")
            cal.append(fmt(snap.brier_yes))
        self.query_one("#cal", Static).update(cal)
        # humans
        if model is not None and model.has_human and snap.human_hist:
            self.query_one("#human-plot", Static).update(human_histogram(snap.human_hist))
            hs = snap.human_stats or {}
            h = Text()
            for k, name in (
                ("consensus", "consensus"),
                ("awareness", "awareness"),
                ("commonsensicality", "common sense"),
            ):
                h.append(f"{name:<13}", style="bold")
                h.append(
                    f"{fmt(hs.get(k))} [{fmt(hs.get(k + '_lo'), 2)}, {fmt(hs.get(k + '_hi'), 2)}]\n"
                )
            h.append(
                f"r {fmt(hs.get('pearson'), 2)}  rho {fmt(hs.get('spearman'), 2)}  (P(yes) vs humans)"
            )
            self.query_one("#human", Static).update(h)
        # failing items
        lst = self.query_one(ItemList)
        if self.PAGED_LIST and not self.active and self.source == "db" and model is not None:
            # A finished stored run: the list pages from DuckDB (sorted and filtered in SQL).
            if lst.source is None:
                from llmscope.tui.pages import FailingSource

                g0 = model.group_by[0] if model.group_by else None
                lst.set_source(FailingSource(self.llm_app.handle.use, self.run_id, g0))
        else:
            lst.set_data(snap.failing)
        self._group_values = snap.group_values
        self._fail_title()

    def _bias(self, snap: Snapshot) -> Any:
        parts: list[Any] = []
        if snap.yesno is not None and len(snap.yesno):
            recs = snap.yesno.to_dict("records")
            ci = recs[0].get("yes_bias_ci")
            t = Table(
                box=None,
                padding=(0, 1),
                header_style="bold",
                title="yes/no bias" + (f" (yes_bias 95% CI [{fmt(ci[0])}, {fmt(ci[1])}])" if ci else ""),
                title_justify="left",
                expand=True,
            )
            # One row per metric (the names `llmscope report` prints), one column per variant.
            t.add_column("metric", justify="left", no_wrap=True)
            for r in recs:
                t.add_column(literal(str(r.get("variant"))), justify="right", no_wrap=True)
            for name in ("mean_p_yes", "pred_yes_rate", "gold_yes_rate", "yes_bias"):
                t.add_row(name, *[fmt(r[name]) for r in recs])
            parts.append(t)
        if snap.worldsense is not None and len(snap.worldsense):
            t = Table(
                box=None,
                padding=(0, 1),
                header_style="bold",
                title="WorldSense per problem (the authors' metrics: worldsense_accuracy, worldsense_bias)",
                title_justify="left",
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

    def _fail_title(self) -> None:
        lst = self.query_one(ItemList)
        t = Text()
        t.append(f"Failing items {lst.count}", style="bold")
        if lst.count != lst.n_total:
            t.append(f" of {lst.n_total}")
        t.append(f"   sort: {lst.sort_key}")
        t.append(f"   group: {lst.group_filter if lst.group_filter is not None else 'all'}")
        t.append(f"   confidence ≥ {lst.min_conf if lst.min_conf is not None else 'any'}")
        _set(self.query_one("#fail-title", Static), t, t.plain)

    # -- actions ----------------------------------------------------------------------------
    def action_sort(self) -> None:
        from llmscope.tui.widgets import SORTS

        lst = self.query_one(ItemList)
        lst.set_view(sort=SORTS[(SORTS.index(lst.sort_key) + 1) % len(SORTS)])
        self._fail_title()

    def action_group(self) -> None:
        lst = self.query_one(ItemList)
        vals: list[str | None] = [None, *self._group_values]
        i = vals.index(lst.group_filter) if lst.group_filter in vals else 0
        lst.set_view(group=vals[(i + 1) % len(vals)])
        self._fail_title()

    def action_conf(self) -> None:
        steps: list[float | None] = [None, 0.5, 0.7, 0.9]
        lst = self.query_one(ItemList)
        i = steps.index(lst.min_conf) if lst.min_conf in steps else 0
        lst.set_view(min_conf=steps[(i + 1) % len(steps)])
        self._fail_title()

    def action_focus_list(self) -> None:
        self.query_one(ItemList).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Offer "Stop run" only for a run writing in this window, "Resume run" only for a
        stopped run (its owner is gone), never in a watching window."""
        if action == "stop":
            h = self.llm_app.running.get(self.run_id)
            return h is not None and not h.reporter.ended
        if action == "resume":
            h = self.llm_app.running.get(self.run_id)
            busy = h is not None and not h.reporter.ended
            return (not self.llm_app.watch_mode and not busy
                    and str(self.run.get("status") or "") in self.RESUMABLE)
        return True

    def action_resume(self) -> None:
        if not self.check_action("resume", ()):
            self.notify("only a stopped run can be resumed, from a window that is not watching",
                        severity="warning")
            return
        self.notify(f"resuming run {self.run_id} with the options it was made with ...")
        self.active = True  # poll again: rows will arrive
        self._resume_pending = True
        self.llm_app.resume_run(self.run_id)

    def action_stop(self) -> None:
        h = self.llm_app.running.get(self.run_id)
        if h is None or h.reporter.ended:
            self.notify("this run is not running in this window", severity="warning")
            return
        h.stop()
        self.notify("stopping: results so far are kept; resume with the same settings")

    def on_item_list_opened(self, event: ItemList.Opened) -> None:
        self.app.push_screen(
            ItemScreen([self.run_id], event.row["item_id"], nav=event.item_list, dashboard=self)
        )


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


# =============================================================================================
# Item drill-down
# =============================================================================================
class ItemLoaded(Message):
    def __init__(self, details: list[dict[str, Any]]) -> None:
        super().__init__()
        self.details = details


class ItemScreen(BaseScreen):
    """Everything about one item: prompts, gold, each variant's distribution and scores."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("n", "step(1)", "Next item"),
        Binding("p", "step(-1)", "Previous item"),
    ]

    def __init__(
        self,
        run_ids: list[str],
        item_id: str,
        *,
        nav: ItemList | None = None,
        dashboard: DashboardScreen | None = None,
    ) -> None:
        super().__init__()
        self.run_ids = run_ids
        self.item_id = item_id
        self.nav = nav
        self.dashboard = dashboard

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="item-head")
        with VerticalScroll(id="item-body"):
            yield Static("loading ...", id="item-content")
        yield Footer()

    def on_mount(self) -> None:
        self.load()
        self.query_one("#item-body").focus()

    @work(thread=True, exclusive=True, exit_on_error=False, group="item")
    def load(self) -> None:
        out = []
        d = self.dashboard
        if d is not None and d.source == "live" and d.model is not None:
            out.append({"run_id": self.run_ids[0], **item_detail_live(d.model, self.item_id, d.feed)})
        else:
            with self.llm_app.handle.use() as store:
                for rid in self.run_ids:
                    out.append({"run_id": rid, **item_detail(store, rid, self.item_id)})
        self.post_message(ItemLoaded(out))

    def action_step(self, delta: int) -> None:
        if self.nav is None or self.nav.count == 0:
            self.notify("no list to step through", severity="warning")
            return
        self.nav.action_cursor(delta)
        row = self.nav.current_row()
        if row is not None:
            self.item_id = row["item_id"]
            self.load()

    def on_item_loaded(self, msg: ItemLoaded) -> None:
        head = Text()
        head.append(f"item {clean(self.item_id)}", style="bold")
        if self.nav is not None:
            head.append(f"   ({self.nav.cursor + 1}/{self.nav.count} in the list; n/p step)")
        self.query_one("#item-head", Static).update(head)
        self.query_one("#item-content", Static).update(render_item(msg.details))
        self.query_one("#item-body").scroll_home(animate=False)


def render_item(details: list[dict[str, Any]]) -> Group:
    """The drill-down content for an item in one or more runs (all text literal)."""
    parts: list[Any] = []
    first = details[0] if details else {}
    parts.append(Text("text", style="bold underline"))
    parts.append(literal(first.get("text")))
    fields = first.get("fields") or {}
    human = {k: v for k, v in fields.items() if k.startswith("human")}
    if first.get("options"):
        parts.append(
            Text.assemble(("options  ", "bold"), literal(" | ".join(map(str, first["options"]))))
        )
    if human:
        parts.append(Text("human", style="bold underline"))
        for k, v in human.items():
            line = Text(f"{k:<12} ")
            if isinstance(v, (int, float)) and 0 <= float(v) <= 1:
                line.append(bar(float(v), 20) + f" {float(v):.2f}")
            else:
                line.append(literal(v))
            parts.append(line)
    if first.get("live"):
        parts.append(
            Text(
                "live run: prompts, top tokens and option scores appear once the run has ended",
                style="yellow",
            )
        )
    for d in details:
        if len(details) > 1:
            parts.append(Text(f"\n══ run {d.get('run_id')} ══", style="bold magenta"))
        if not d.get("variants"):
            parts.append(Text("no result for this item in this run", style="dim"))
        for v in d.get("variants", []):
            parts.extend(_render_variant(v))
    return Group(*parts)


def _render_variant(v: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    corr = v.get("correct")
    mark = (
        ("✔", "green")
        if corr is not None and corr >= 0.5
        else (("✘", "red") if corr is not None else ("·", "dim"))
    )
    head = Text("\n")
    head.append(f"── variant {clean(v.get('variant'))} ", style="bold cyan")
    head.append(mark[0], style=mark[1])
    out.append(head)
    line = Text()
    line.append("gold ", style="bold")
    line.append(literal(v.get("gold")))
    line.append("   prediction ", style="bold")
    line.append(literal(v.get("prediction")))
    line.append(f"   confidence {fmt(v.get('confidence'))}   tokens {v.get('n_tokens') or 0}")
    out.append(line)
    if v.get("error"):
        out.append(Text.assemble(("error ", "bold red"), literal(v["error"])))
    if v.get("prompt"):
        out.append(Text("prompt (exactly as rendered for the model)", style="bold"))
        out.append(literal(v["prompt"], "italic"))
    probs = v.get("probs")
    if isinstance(probs, dict) and probs:
        out.append(Text("answer probabilities", style="bold"))
        t = Table(box=None, padding=(0, 1), show_header=False)
        t.add_column(no_wrap=True)
        t.add_column()
        t.add_column(justify="right")
        for k, p in list(probs.items())[:20]:
            t.add_row(literal(k), bar(p, 30), fmt(p))
        if v.get("other") is not None:
            t.add_row(Text("(other)", style="dim"), bar(v.get("other"), 30), fmt(v.get("other")))
        out.append(t)
    top = v.get("top_tokens")
    if isinstance(top, list) and top:
        out.append(Text("top next tokens", style="bold"))
        t = Table(box=None, padding=(0, 1), show_header=False)
        t.add_column(no_wrap=True)
        t.add_column()
        t.add_column(justify="right")
        for tok in top[:20]:
            if isinstance(tok, dict):
                t.add_row(
                    literal(repr(tok.get("token"))),
                    bar(tok.get("prob"), 30),
                    fmt(tok.get("prob"), 4),
                )
        out.append(t)
    scores = v.get("option_scores")
    if isinstance(scores, dict) and scores:
        methods: list[str] = []
        for m in scores.values():
            if isinstance(m, dict):
                methods += [k for k in m if k not in methods]
        out.append(Text("option scores by method", style="bold"))
        t = Table(box=None, padding=(0, 1), header_style="bold")
        t.add_column("option", no_wrap=True)
        for m in methods:
            t.add_column(m, justify="right")
        for opt, m in scores.items():
            m = m if isinstance(m, dict) else {}
            t.add_row(literal(opt), *[fmt(m.get(k), 4) for k in methods])
        out.append(t)
    extra = v.get("extra")
    if isinstance(extra, dict) and isinstance(extra.get("context"), dict):
        # Minimal pairs: what each sentence was conditioned on (task option `context`).
        c = extra["context"]
        out.append(Text.assemble(("sentence context ", "bold"), literal(f"{c.get('mode')} {c.get('text')!r}"),
                                 (f"  ({c.get('why')})", "dim")))
    if isinstance(extra, dict) and extra:
        if "methods" in extra:
            out.append(Text("methods", style="bold"))
            out.append(
                literal(json.dumps(extra["methods"], ensure_ascii=False, default=str)[:2000])
            )
        if "conditions" in extra and "predictions" in extra:  # syntaxgym: word-surprisal drill-down
            from llmscope.tui.panels_surprisal import render_surprisal

            out.extend(render_surprisal(extra))
            extra = {k: x for k, x in extra.items() if k not in ("conditions", "per_token", "predictions")}
        trace = {k: x for k, x in extra.items() if k != "methods"}
        if trace:
            out.append(Text("normalisation trace / task detail", style="bold"))
            for k, x in trace.items():
                s = x if isinstance(x, str) else json.dumps(x, ensure_ascii=False, default=str)
                out.append(Text.assemble((f"  {k}: ", "dim"), literal(s[:1000])))
    return out


# =============================================================================================
# Compare
# =============================================================================================
class CompareLoaded(Message):
    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__()
        self.data = data


DIS_COLUMNS = [
    ("item_id", "item", 12),
    ("variant", "variant", 8),
    ("b", "vs run", 13),
    ("prediction_a", "pred A", 10),
    ("prediction_b", "pred B", 10),
    ("gold_a", "gold", 8),
    ("text", "text", 0),
]


class CompareScreen(BaseScreen):
    """Runs side by side with paired tests, and the items they disagree on."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, run_ids: list[str]) -> None:
        super().__init__()
        self.run_ids = run_ids

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label(
            "Compare (first run = A; each other run B is tested against it)", classes="title"
        )
        yield DataTable(id="cmp-table", cursor_type="row")
        yield Static("", id="cmp-tests")
        yield Static("", id="dis-title")
        yield Static(ItemList(DIS_COLUMNS).header(), id="dis-head")
        yield ItemList(DIS_COLUMNS, id="dis")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#cmp-table", DataTable)
        t.add_columns("run", "model", "status", "n", "errors", "accuracy", "95% CI")
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="compare")
    def load(self) -> None:
        with self.llm_app.handle.use() as store:
            data = compare_runs(store, self.run_ids)
        self.post_message(CompareLoaded(data))

    def on_compare_loaded(self, msg: CompareLoaded) -> None:
        d = msg.data
        t = self.query_one("#cmp-table", DataTable)
        for r in d["table"]:
            t.add_row(
                literal(r["run_id"]),
                literal(str(r["model"])[:40]),
                literal(r["status"]),
                str(r["n"]),
                str(r["errors"]),
                fmt(r["accuracy"]),
                ci_bar(r["accuracy"], r["lo"], r["hi"], 24),
            )
        s = Text()
        if not d["same_suite"]:
            s.append(
                "warning: these runs are on different suites; paired tests use items with the same id\n",
                style="yellow",
            )
        for x in d["tests"]:
            s.append(f"{x['b']} vs {x['a']}: ", style="bold")
            mp = "-" if x["p"] is None else f"{x['p']:.4g}"
            s.append(
                f"Δacc {x['diff']:+.3f} [{x['lo']:+.3f}, {x['hi']:+.3f}] p={x['p_value']:.4g}  "
                f"n={x['n']} clusters={x['n_clusters']}   McNemar "
                f"b={x['b_only_a']} c={x['c_only_b']} p={mp} ({x['method']})\n"
            )
        self.query_one("#cmp-tests", Static).update(s)
        dis = d["disagreements"]
        cols = {k: [r.get(k) for r in dis] for k, _, _ in DIS_COLUMNS}
        cols["a"] = [r.get("a") for r in dis]
        lst = self.query_one("#dis", ItemList)
        lst.set_data(cols)
        self.query_one("#dis-title", Static).update(
            Text(f"Items they disagree on: {len(dis)}", style="bold")
        )
        lst.focus()

    def on_item_list_opened(self, event: ItemList.Opened) -> None:
        r = event.row
        self.app.push_screen(ItemScreen([r["a"], r["b"]], r["item_id"], nav=event.item_list))


# =============================================================================================
# Help
# =============================================================================================
HELP = """\
llmscope — keys

Everywhere     ?  this help        ctrl+q  quit        escape  back
               mouse: click rows, scroll with the wheel, click buttons

Home           enter  open the run under the cursor (live while it runs)
               space  mark a run for comparison      c  compare the marked runs
               n  go to the new-run form             r  refresh the run list
               tab  move between runs, suites and the form; enter in a suite fills the form

Dashboard      up/down/pgup/pgdn/home/end  move in the failing-items list
               enter  open the item                  s  cycle sort (arrival, confidence,
               g  cycle group filter                    distance to humans, group)
               f  cycle minimum confidence           x  stop a run started in this window
               m  methods: scoring schemes, human fit, order effects, plan

Item           n / p  next / previous item of the list without going back
               up/down/pgup/pgdn  scroll

Compare        enter  open a disagreement (both runs' answers side by side)

Watching another process (`llmscope view`): progress and results come from the live
channel beside the database; the database is opened read-only once the run has ended.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(Text(HELP), id="help-text")
            yield Button("Close", id="help-close")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss()
