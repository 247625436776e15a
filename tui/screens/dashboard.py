"""Dashboard: one run, live: progress, accuracy with CIs, bias, calibration, humans, failing items.

This screen lays the panels out, loads the run and handles keys; the panels' drawing is in
tui/panels/ (accuracy.py, calibration.py, human_agreement.py, surprisal.py).
"""

from __future__ import annotations

import threading
from typing import Any

import pandas as pd
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Header, ProgressBar, Static

from llmscope.analysis.api_method import method_banner
from llmscope.analysis.metric_values import headline
from llmscope.analysis.metrics import display
from llmscope.store.db import StoreError
from llmscope.tui.data.live import LiveFeed, active_live_runs, items_from_suite, run_signature
from llmscope.tui.data.run_model import RunModel
from llmscope.tui.data.snapshot import Snapshot
from llmscope.tui.data.store import is_lock_error, load_items
from llmscope.tui.messages import DashData
from llmscope.tui.panels.accuracy import render_accuracy, render_bias, render_other
from llmscope.tui.panels.calibration import render_calibration
from llmscope.tui.panels.human_agreement import human_histogram, render_human_stats
from llmscope.tui.screens.base import BackScreen, _duration, _set, limited_note
from llmscope.tui.screens.item import ItemScreen
from llmscope.tui.widgets import ITEM_KEY_COLUMNS, ItemList, ReliabilityPlot, clean, literal

FAIL_COLUMNS = [
    *ITEM_KEY_COLUMNS,
    ("group", "group", 16),
    ("gold", "gold", 8),
    ("prediction", "pred", 10),
    ("confidence", "conf", 5),
    ("distance", "|m-h|", 5),
    ("text", "text", 0),
]


class DashboardScreen(BackScreen):
    """One run: progress, accuracy with CIs, bias, calibration, humans, failing items."""

    BINDINGS = [
        Binding("s", "sort", "Sort"),
        Binding("g", "group", "Group filter"),
        Binding("f", "conf", "Conf. filter"),
        Binding(
            "a", "scope", "Failing/all/flagged", show=False
        ),  # hidden: keeps the footer snapshot stable
        Binding("l", "focus_list", "Items", show=False),
        Binding("x", "stop", "Stop run"),
        Binding("r", "resume", "Resume run"),
        Binding("m", "methods", "Methods", show=False),  # hidden: keeps the footer snapshot stable
        Binding("d", "definitions", "Definitions", show=False),
        Binding("v", "next_panel", "Next panel", show=False),
        Binding("h", "human", "Human vs model", show=False),  # tui/panels/human.py
        Binding("p", "plots", "Plots", show=False),  # tui/plots.py
        Binding("w", "write_page", "Write page and figure", show=False),  # tui/handoff.py
    ]
    # Narrow terminals show one panel at a time (app.tcss: Screen.-narrow); `v` steps through.
    PANELS = (("left", "accuracy"), ("middle", "calibration"), ("right", "humans"))

    RESUMABLE = ("interrupted", "failed", "completed_with_errors", "incomplete")
    PAGED_LIST = True  # False: the in-memory list for finished runs too (bench.scale's "before")

    def action_methods(self) -> None:
        """Scoring schemes, human fit, order effects, plan (tui/panels/methods.py)."""
        from llmscope.tui.panels.methods import MethodsScreen

        self.app.push_screen(MethodsScreen(self.run_id))

    def action_human(self) -> None:
        """Human vs model side by side (tui/panels/human.py); live: the rows received so far."""
        from llmscope.tui.panels.human import HumanScreen

        self.app.push_screen(
            HumanScreen(self.run_id, self.model if self.source == "live" else None)
        )

    def action_plots(self) -> None:
        """Accuracy and throughput over the run, reliability, score distributions (tui/plots.py)."""
        from llmscope.tui.data.live import LiveFeed
        from llmscope.tui.plots import PlotsScreen

        feed = LiveFeed(self.llm_app.db_path, self.run_id) if self.source == "live" else None
        self.app.push_screen(PlotsScreen(self.run_id, self.run.get("task"), feed))

    def action_write_page(self) -> None:
        """The run's offline page and the current panel's figure, written beside the database."""
        self.notify("writing the run's page and figure ...")
        self._write_handoff(self.PANELS[self.panel][1])

    @work(thread=True, exclusive=True, exit_on_error=False, group="dash-handoff")
    def _write_handoff(self, panel: str) -> None:
        from llmscope.figures.make import FigureError
        from llmscope.tui.handoff import handoff_message, write_handoff

        try:
            with self.llm_app.handle.use() as store:
                paths = write_handoff(store, self.run_id, panel, self.llm_app.db_path)
        except (OSError, ValueError, FigureError, StoreError) as e:
            self.app.call_from_thread(
                self.notify, f"could not write the page: {e}", severity="error"
            )
            return
        self.app.call_from_thread(self.notify, handoff_message(paths, panel), timeout=15)

    @work(thread=True, exclusive=True, exit_on_error=False, group="dash-human")
    def _load_human(self) -> None:
        from llmscope.store.db import decode_json
        from llmscope.tui.panels.human import human_data, human_kind, render_human_summary

        with self.llm_app.handle.use() as store:
            # Whether the suite has human data at all, from its first items (as human_data
            # decides), before human_data reads every item of a big suite.
            spec = store.suite_spec(self.run["suite_id"]) or {}
            first = store.execute(
                "SELECT fields FROM items WHERE suite_id = ? ORDER BY idx LIMIT 50",
                [self.run["suite_id"]],
            ).fetchall()
            if not any(
                human_kind(decode_json(f) or {}, spec, self.run.get("task")) for (f,) in first
            ):
                return
            d = human_data(store, self.run)
        if d.kind is not None:
            self.app.call_from_thread(
                self.query_one("#human", Static).update, render_human_summary(d)
            )

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
        self.panel = 0
        self.no_gold: list[str] = []
        self._painted = threading.Event()  # the first frame is on screen (see _first_frame)
        self._follow_sig: tuple[Any, ...] | None = None  # what a stopped run looked like (_tick)

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="dash-head"):
            yield Static("loading ...", id="head")
            yield ProgressBar(id="bar", show_eta=False, show_percentage=True)
        # A scoring-method fallback (API runs: no echo log-likelihoods -> letter labels, no
        # log-probs -> sampling), shown on the run whenever its config records one.
        yield Static("", id="method-banner")
        yield Static("", id="panel-tabs")
        with Horizontal(id="panels"):
            with VerticalScroll(id="left", classes="panel -shown"):
                yield Static("", id="acc")
                yield Static("", id="bias")
                yield Static("", id="other")
            with Vertical(id="middle", classes="panel"):
                yield ReliabilityPlot(id="rel")
                yield Static("", id="cal")
            with VerticalScroll(id="right", classes="panel"):
                yield Static("", id="human-plot")
                yield Static("", id="human")
        yield Static("", id="fail-title")
        yield Static("", id="fail-head")
        yield ItemList(FAIL_COLUMNS, id="failing")
        yield Footer()

    def on_screen_resume(self) -> None:
        """Back from a drill-down (or anything pushed on top): the list it was opened from has focus."""
        self.query_one(ItemList).focus()

    def on_mount(self) -> None:
        lst = self.query_one(ItemList)
        lst.header_widget = self.query_one("#fail-head", Static)
        lst.header_widget.update(lst.header())
        self.query_one("#human", Static).update(
            Text("no human judgements in this suite", style="dim")
        )
        self.query_one("#method-banner").display = False
        self._show_tabs()
        self.load(initial=True)
        self.set_interval(self.llm_app.refresh_s, self._tick)
        self.query_one(ItemList).focus()

    def _tick(self) -> None:
        for w in self.workers:
            if w.group == "dash" and w.is_running:
                return  # never pile up reads
        if not self.active:
            # A stopped run may be resumed, or scored again, by another process: follow it when
            # its live channel or the database file changes (a few stat calls a tick).
            sig = run_signature(self.llm_app.db_path, self.run_id)
            if self._follow_sig is None or sig == self._follow_sig:
                self._follow_sig = sig
                return
            self._follow_sig = sig
            self.load(initial=self.model is None)
            return
        self.load(initial=False)

    def _is_active(self, run: dict[str, Any], source: str | None = None) -> bool:
        """Whether the run may still change (reads state only: workers call it too)."""
        if (source or self.source) == "live":
            return True
        h = self.llm_app.running.get(self.run_id)
        if h is not None and not h.reporter.ended:
            return True
        if getattr(self, "_resume_pending", False):
            return True  # a resume is starting: keep polling until its run shows up
        return str(run.get("status") or "").startswith("running")

    # The worker reads the screen's state and returns what it found (DashData); the screen
    # applies it on the UI thread (BaseScreen.on_worker_state_changed -> on_dash_data).
    @work(thread=True, exclusive=True, exit_on_error=False, group="dash")
    def load(self, initial: bool) -> DashData | None:
        try:
            return self._load(initial)
        except StoreError as e:
            if not is_lock_error(e):
                raise
            # Another process holds the file and publishes nothing for this run: keep what is
            # shown, say why, and try again on the next tick (the signature is forgotten).
            self._follow_sig = None
            self.active = True
            self.app.call_from_thread(
                self.llm_app.set_blocked, f"{self.llm_app.db_path} is in use by another process"
            )
            return None

    def _load(self, initial: bool) -> DashData:
        app = self.llm_app
        run_id, model, feed, source = self.run_id, self.model, self.feed, self.source
        run: dict[str, Any] = self.run
        # Until a load's result is applied (model None) a tick may start the next load, so the
        # live channel is looked for then too, not only in the first load.
        # A run another process writes (a resume, a rerun, a run started in another terminal) is
        # read from its live channel, in any window: the file is locked while it writes.
        if (
            (initial or feed is None or model is None)
            and source == "db"
            and run_id not in app.running
        ):
            f = LiveFeed(app.db_path, run_id)
            live = f.progress()
            if live is not None and (
                not live["ended"] or active_live_runs(app.db_path)
            ):  # file locked: its record
                feed, source = f, "live"
        progress: dict[str, Any] | None = None
        if initial and source == "db" and model is None:
            first = self._first_frame()
            if first is not None and self.PAGED_LIST and not self._is_active(first, "db"):
                # A finished stored run: numbers from the pipeline and SQL aggregates, the list
                # pages from DuckDB; no result or item rows are loaded into Python.
                from llmscope.tui.data.store import stored_snapshot

                with app.handle.use() as store:
                    snap_, no_gold = stored_snapshot(store, first)
                return DashData(first, None, snap_, "db", no_gold=no_gold)
        if source == "live":
            assert feed is not None
            snap = feed.progress() or {}
            run = dict(snap.get("run") or {"run_id": run_id})
            if model is None:
                spec, items = items_from_suite(run)
                model = RunModel(run, spec, items)
            model.add_live(feed.read_new())
            progress = snap.get("progress")
            if snap.get("ended"):
                try:
                    run, model = self._load_db(run_id, None)
                    source = "db"
                except StoreError as e:
                    if not is_lock_error(e):
                        raise
                    # The writer has not released the file yet; try on the next tick.
        else:
            run, model = self._load_db(run_id, model)
            h = app.running.get(run_id)
            if h is not None:
                progress = h.reporter.snapshot()
        # While a run streams, the metrics pipeline runs at most every two refreshes.
        snap_ = model.compute(throttle_s=app.refresh_s * 2 if self._is_active(run, source) else 0.0)
        with model.lock:
            no_gold = variants_without_gold(model.df)
        return DashData(run, progress, snap_, source, model=model, feed=feed, no_gold=no_gold)

    def _first_frame(self) -> dict[str, Any] | None:
        """Header, counts and the first page of failing items at once (cheap SQL only); the
        numbers follow from the pipeline. Returns the run (None: not found, _load_db says so).

        The worker waits (at most a second) until that frame is painted, so the heavier work
        after it does not compete with the first paint for the interpreter."""
        from llmscope.tui.data.store import quick_snapshot

        try:
            with self.llm_app.handle.use() as store:
                run, snap = quick_snapshot(store, self.run_id)
                _suite_size(store, run)
        except StoreError:
            return None  # _load_db reports it
        if run is not None:
            self._painted.clear()
            self.post_message(DashData(run, None, snap, "db"))
            self._painted.wait(1.0)
        return run

    def _load_db(self, run_id: str, model: RunModel | None) -> tuple[dict[str, Any], RunModel]:
        """The stored run and its model (made when `model` is None), polled for new rows."""
        with self.llm_app.handle.use() as store:
            run = store.get_run(run_id) or store.find_run(run_id)
            if run is None:
                raise StoreError(f"no run {run_id!r} in {self.llm_app.db_path}")
            if model is None:
                model = RunModel(
                    run, store.suite_spec(run["suite_id"]), load_items(store, run["suite_id"])
                )
            _suite_size(store, run)
            model.run = run
            model.poll_db(store)
        return run, model

    def on_dash_data(self, msg: DashData) -> None:
        self.run, self.source, self.feed, self.no_gold = (
            msg.run,
            msg.source,
            msg.feed,
            (msg.no_gold or []),
        )
        if msg.model is not None:
            self.model = msg.model
        self.run_id = str(msg.run.get("run_id") or self.run_id)  # a prefix becomes the full id
        if msg.source == "db":
            self.llm_app.set_blocked(None)  # the file was read: free again
        h = self.llm_app.running.get(self.run_id)
        if h is not None and not h.reporter.ended:
            self._resume_pending = False  # the resumed run is writing
        self.active = self._is_active(msg.run)
        status = (msg.progress or {}).get("status") or msg.run.get("status")
        if status != getattr(self, "_bound_status", None):
            self._bound_status = status
            self.refresh_bindings()  # Stop run / Resume run follow the status
        self._task_columns(msg.run, msg.snap)
        self._show_header(msg.run, msg.progress, msg.snap, msg.source)
        if msg.snap.pending:
            self.query_one("#acc", Static).update(Text("computing metrics ...", style="dim"))
            if not self.active and msg.source == "db":
                self._page_list(msg.snap.group_field)
            self.call_after_refresh(self._painted.set)
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
            bad = self.feed.tail.skipped if self.feed is not None else 0
            if bad:
                t.append(f"  {bad} unreadable live record(s) skipped", style="yellow")
        t.append("\n")
        t.append(f"{done}/{total or '?'} results{limited_note(run)}   errors {errors}")
        if p and self._is_active(run):
            be = p.get("backend") or {}
            retries = be.get("retries", be.get("n_retries", 0))
            t.append(
                f"   retries {retries}   {p.get('items_per_s', 0):.1f} items/s   "
                f"{p.get('tokens_per_s', 0):.0f} tok/s   ETA {_duration(p.get('eta_s'))}"
            )
        acc = snap.overall
        # The run's headline metric first, as the report and the runs list lead with it (the
        # published worldsense_accuracy of a WorldSense run; sg_score of a SyntaxGym run).
        head = headline(snap.metrics) if snap.metrics is not None else None
        if head is not None and head.name != snap.accuracy_name:
            t.append(f"   {head.name} {display(head.name, head.value)}", style="bold")
            if head.ci95 is not None:
                t.append(f" [{display(head.name, head.lo)}, {display(head.name, head.hi)}]")
        if acc is not None:
            t.append(f"   {snap.accuracy_name} {acc.mean:.3f} [{acc.lo:.3f}, {acc.hi:.3f}]")
        if p and self._is_active(run) and self.size.width >= 170:  # room on the second line
            from llmscope.tui.plots import RunSparks

            sparks = self.__dict__.setdefault("_sparks", RunSparks())
            sparks.add(
                done, acc.mean if acc is not None else None, float(p.get("items_per_s") or 0.0)
            )
            t.append(sparks.text())  # accuracy and items/s over the run so far (p: full plots)
        _set(self.query_one("#head", Static), t, t.plain)
        banner = method_banner(run)  # API runs: the scoring method chosen and why
        bw = self.query_one("#method-banner", Static)
        bw.display = bool(banner)
        if banner:
            _set(bw, literal(banner, "bold"), banner)
        b = self.query_one("#bar", ProgressBar)
        if total:
            b.update(total=total, progress=done)

    def _show_panels(self, snap: Snapshot) -> None:
        model = self.model
        self.query_one("#acc", Static).update(render_accuracy(snap, self.no_gold, self.active))
        self.query_one("#bias", Static).update(render_bias(snap, self.no_gold))
        self.query_one("#other", Static).update(render_other(snap))
        if snap.sg_overall is not None or snap.sg:  # the pipeline reported SG scores: the SG panel
            from llmscope.tui.panels.surprisal import sg_panel

            self.query_one("#other", Static).update(sg_panel(snap))
        self.query_one(ReliabilityPlot).show(snap.rel_bins)
        self.query_one("#cal", Static).update(render_calibration(snap))
        # humans
        if snap.human_hist:
            self.query_one("#human-plot", Static).update(human_histogram(snap.human_hist))
            self.query_one("#human", Static).update(render_human_stats(snap.human_stats or {}))
        elif not self.active and self.source == "db" and not getattr(self, "_human_asked", False):
            # other human data (choice counts, ratings, answer clusters): summarised once the run is stored
            self._human_asked = True
            self._load_human()
        # failing items
        if self.PAGED_LIST and not self.active and self.source == "db":
            g0 = model.group_by[0] if model is not None and model.group_by else snap.group_field
            self._page_list(g0)
        else:
            self.query_one(ItemList).set_data(snap.failing)
        self._group_values = snap.group_values
        self._fail_title()
        self._tooltips()

    def _task_columns(self, run: dict[str, Any], snap: Snapshot) -> None:
        """Once the run's task is known: the list shows the columns the task declares
        (`Task.item_fields`), and a run without scored rows (e.g. contamination probes)
        lists all its rows rather than an empty failing list."""
        task = run.get("task")
        if not task or getattr(self, "_columns_task", None) == task:
            return
        from llmscope.tui.data.fields import list_fields

        self._columns_task = task
        width = {"flags": 14, "number": 8, "prob": 6, "bool": 5}
        extra = [(f.key, f.label, width.get(f.kind, 10)) for f in list_fields(task)]
        lst = self.query_one(ItemList)
        lst.set_columns(
            [*FAIL_COLUMNS[:-1], *extra, FAIL_COLUMNS[-1]], optional={k for k, _, _ in extra}
        )
        if snap.n and not snap.n_scored and lst.scope == "failing":
            lst.scope = "all"

    def _page_list(self, group_field: str | None) -> None:
        """A finished stored run: the list pages from DuckDB (sorted and filtered in SQL)."""
        lst = self.query_one(ItemList)
        if self.PAGED_LIST and lst.source is None:
            from llmscope.tui.data.fields import list_fields
            from llmscope.tui.pages import FailingSource

            lst.set_source(
                FailingSource(
                    self.llm_app.handle.use,
                    self.run_id,
                    group_field,
                    list_fields(self.run.get("task")),
                )
            )
            self._fail_title()

    def _tooltips(self) -> None:
        """Hovering a panel shows the definition of each metric it shows."""
        from llmscope.tui.definitions import metric_names_in, plain_text, tooltip

        for wid in ("#head", "#acc", "#bias", "#other", "#cal", "#human"):
            w = self.query_one(wid, Static)
            w.tooltip = tooltip(metric_names_in([plain_text(w.content)]))

    # -- narrow terminals: one panel at a time -----------------------------------------------
    def action_next_panel(self) -> None:
        self.panel = (self.panel + 1) % len(self.PANELS)
        self._show_tabs()

    def _show_tabs(self) -> None:
        t = Text()
        for i, (wid, title) in enumerate(self.PANELS):
            self.query_one(f"#{wid}").set_class(i == self.panel, "-shown")
            t.append(f" {title} ", style="reverse bold" if i == self.panel else "dim")
        t.append("   v: next panel · d: definitions", style="dim")
        self.query_one("#panel-tabs", Static).update(t)

    def _fail_title(self) -> None:
        lst = self.query_one(ItemList)
        t = Text()
        t.append(f"{lst.scope.capitalize()} items {lst.count}", style="bold")
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

    def action_scope(self) -> None:
        """Failing rows, all rows, or (for a task that flags items) the flagged ones."""
        from llmscope.tui.data.fields import has_flags

        scopes = ["failing", "all", *(["flagged"] if has_flags(self.run.get("task")) else [])]
        lst = self.query_one(ItemList)
        i = scopes.index(lst.scope) if lst.scope in scopes else 0
        lst.set_view(scope=scopes[(i + 1) % len(scopes)])
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
            return (
                not self.llm_app.watch_mode
                and not busy
                and str(self.run.get("status") or "") in self.RESUMABLE
            )
        return True

    def action_resume(self) -> None:
        if not self.check_action("resume", ()):
            self.notify(
                "only a stopped run can be resumed, from a window that is not watching",
                severity="warning",
            )
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


def _suite_size(store: Any, run: dict[str, Any] | None) -> None:
    """The run's `item_limit` and its suite's item count (`n_suite_items`), for the header."""
    if not run or not run.get("suite_id"):
        return
    opts = run.get("options")
    run["item_limit"] = opts.get("limit") if isinstance(opts, dict) else None
    if run["item_limit"]:
        row = store.execute(
            "SELECT count(*) FROM items WHERE suite_id = ?", [run["suite_id"]]
        ).fetchone()
        run["n_suite_items"] = int(row[0]) if row else None


def variants_without_gold(df: pd.DataFrame) -> list[str]:
    """Prompt variants whose answered rows all lack a correctness score because their items
    carry no gold (e.g. commonsense q3, "do most people agree?"), in a run where some variant
    has one: the dashboard says so instead of leaving the variant out silently."""
    if df.empty or not {"variant", "correct"} <= set(df.columns):
        return []
    ok = df[df["error"].isna()] if "error" in df else df
    scored = pd.to_numeric(ok["correct"], errors="coerce").notna()
    per = scored.groupby(ok["variant"].astype(str), sort=True).any()
    return [str(v) for v, has in per.items() if not has] if per.any() else []
