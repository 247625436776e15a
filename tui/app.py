"""The llmscope terminal UI: browse runs, start runs, watch them live, drill into items.

Design
------
Screens (tui/screens/, one module each): Home (runs, suites, new-run form) → Dashboard
(one run, live) → Item (drill-down); Home → Compare (two or more runs on one suite) →
Item; `F1`/`?` open Help anywhere, `ctrl+p` the command palette (every action of the
screen). Esc goes back to the list a screen was opened from. Every blocking step (DuckDB
queries, loading a suite, computing metrics) runs in a `@work(thread=True,
exclusive=True, exit_on_error=False)` worker that *returns* a message (tui/messages.py)
and never touches the screen; the one `Worker.StateChanged` handler (BaseScreen) applies
it on the UI thread, and reports failures as notifications.

Database access: one `StoreHandle` per app. `llmscope` (tui mode) opens the file
for writing, since it can start runs; a run started here executes in this
process (a thread with its own asyncio loop running `Runner`), writing through
the same `Store` (its RLock serialises our reads with the run's writer thread),
and also publishes the live channel so other terminals can watch.

Another process writing the file (`llmscope run`, `study run`, `import` in another terminal)
does not stop this window: DuckDB lets one process hold a file, so reads then come from a
private copy taken between two of that writer's commits (`StoreHandle`, store/snapshot.py),
and every screen (runs, dashboards, items, compare, a study's matrix, IRT) shows the stored
rows as of its last commit; the sub-title names the writer. A run's dashboard follows a run
another process writes on its live channel (`<db>.live/<run_id>/`), which that process
publishes with every batch it stores: the same rows, a few seconds sooner. Starting a run
here while another process writes waits as `llmscope run` does, then says who holds the file.
Only a holder that allows no copy (another DuckDB client) leaves the window on the live
channel until the file is free (`set_blocked`). `llmscope view` is the same window,
read-only: it never starts runs (docs/ARCHITECTURE.md "Many processes, one file").

Refresh: dashboards poll at most once a second and redraw only panels whose
numbers changed; the failing-items list is a Line-API widget that renders only
visible rows, so 100,000 rows stay responsive.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from llmscope.engine.config import BackendConfig
from llmscope.tui.data.store import StoreHandle
from llmscope.tui.messages import RunEnded, RunFailed, RunPhase, RunStarted

__all__ = [
    "InProcessRun",
    "LlmscopeApp",
    "RunEnded",
    "RunFailed",
    "RunStarted",
    "TuiReporter",
    "run_app",
]


def screen_commands(screen: Screen[Any]) -> list[tuple[str, str, Callable[[], Any]]]:
    """(title, help, callback) for each enabled binding of `screen`, of the llmscope widgets in
    its focus chain and of the app; Textual's own widget keys (cursor moves, editing) are left out."""
    out: list[tuple[str, str, Callable[[], Any]]] = []
    seen: set[tuple[str, str]] = set()
    chain = [(key, ab.node, ab.binding, ab.enabled) for key, ab in screen.active_bindings.items()]
    if (
        screen.is_modal
    ):  # Textual leaves the app's keys out below a modal screen; F1, ctrl+q still work there
        chain += [(key, screen.app, b, True) for key, b in screen.app._bindings]
    for key, node, b, enabled in chain:
        ours = (
            node is screen or isinstance(node, App) or type(node).__module__.startswith("llmscope")
        )
        ident = (b.description, b.action.removeprefix("app."))
        if not ours or not enabled or not b.description or ident in seen:
            continue
        seen.add(ident)
        keys = b.key_display or screen.app.get_key_display(b)
        where = "app" if isinstance(node, App) else type(node).__name__.removesuffix("Screen")
        # The action runs in the namespace it is bound in, as its key press would run it.
        run = partial(screen.app.run_action, b.action, node)
        out.append((b.description, f"{where} · key {keys or key}", run))
    return out


class TuiReporter:
    """Receives engine events on the run's thread; the UI reads `snapshot()` when it redraws."""

    def __init__(self, app: LlmscopeApp) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._progress: dict[str, Any] | None = None
        self.run_id: str | None = None
        self.ended = False
        self.messages: list[tuple[str, str]] = []

    def on_start(self, run: dict[str, Any], progress: Any) -> None:
        with self._lock:
            self.run_id = progress.run_id
            self._progress = progress.to_dict()
        self.app.post_message(RunStarted(progress.run_id, self))

    def on_results(self, results: list[Any], progress: Any) -> None:
        with self._lock:
            self._progress = progress.to_dict()

    def on_progress(self, progress: Any) -> None:
        with self._lock:
            self._progress = progress.to_dict()

    def on_message(self, level: str, text: str) -> None:
        with self._lock:
            self.messages.append((level, text))
        self.app.post_message(RunPhase(self, text, level))

    def phase(self, text: str) -> None:
        """Say what the run is doing before its first result (the starting screen shows it)."""
        self.app.post_message(RunPhase(self, text))

    def on_end(self, progress: Any) -> None:
        with self._lock:
            self._progress = progress.to_dict()
            self.ended = True
        self.app.post_message(RunEnded(progress.run_id, progress.status))

    def snapshot(self) -> dict[str, Any] | None:
        with self._lock:
            return dict(self._progress) if self._progress else None


class InProcessRun:
    """A run executing in this process: its reporter and how to stop it."""

    def __init__(self, reporter: TuiReporter) -> None:
        self.reporter = reporter
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None
        self.thread: threading.Thread | None = None

    def stop(self) -> None:
        if self.loop is not None and self.task is not None and not self.task.done():
            self.loop.call_soon_threadsafe(self.task.cancel)


def _starting_title(params: dict[str, Any]) -> str:
    if params.get("resume"):
        return f"resuming run {params['resume']}"
    cfg = params.get("config")
    model = getattr(cfg, "model", None) or params.get("model") or "the default model"
    return f"starting {params.get('suite')} with {model}"


def _untrusted_stored_endpoint(prep: Any, db: str) -> str | None:
    """Why a resume may not send $OPENAI_API_KEY to the run's stored base URL, or None.

    As `llmscope run --resume` without a terminal: a URL none of the user's environment, own
    config or earlier choices names is someone else's file's choice (llmscope/runs/settings.py)."""
    from llmscope.engine.openai import expand_base_urls, public_url
    from llmscope.runs.settings import (
        SettingsError,
        load_settings,
        trusted_endpoints,
        untrusted_endpoints,
    )

    rid = (prep.existing or {}).get("run_id") or prep.request.resume
    if getattr(
        prep.config, "trust_remote_code", False
    ):  # the stored run would run the model's code
        return (
            f"run {rid} in {db} was made with --trust-remote-code (it runs {prep.config.model}'s own "
            f"Python code); nothing was started. Resume it from a shell: llmscope run --resume {rid} "
            f"--db {db} --trust-remote-code"
        )
    if getattr(prep.config, "kind", None) != "openai":
        return None
    urls = expand_base_urls(prep.config.base_url)
    try:
        settings = load_settings()
    except SettingsError:
        settings = None
    untrusted = untrusted_endpoints(urls, trusted_endpoints(settings))
    if not untrusted:
        return None
    return (
        f"run {rid} in {db} sends requests (and $OPENAI_API_KEY) to "
        f"{', '.join(public_url(u) for u in untrusted)}, which none of your environment or config "
        f"names; nothing was sent. Resume it from a shell: llmscope run --resume {rid} --db {db} "
        "--trust-db (or --base-url URL)"
    )


def run_params_config(params: dict[str, Any]) -> BackendConfig:
    """The backend config of the new-run form (the same dataclass the CLI fills)."""
    cfg = BackendConfig(model=params.get("model") or None, base_url=params.get("base_url") or None)
    for k in (
        "concurrency",
        "batch_size",
        "seed",
        "top_logprobs",
        "threads",
        "timeout",
        "max_retries",
        "samples",
    ):
        if params.get(k) is not None:
            setattr(cfg, k, params[k])
    for k in ("device", "dtype", "system_prompt", "revision", "adapter"):
        if params.get(k):
            setattr(cfg, k, params[k])
    cfg.sp_prefix = bool(params.get("sp_prefix"))
    cfg.reasoning = bool(params.get("reasoning"))
    return cfg


class LlmscopeApp(App[int]):
    """The llmscope TUI."""

    CSS_PATH = "app.tcss"
    TITLE = "llmscope"
    BINDINGS = [
        # F1 works even while a text field has focus; `?` wherever it is not typed into a field.
        Binding("f1", "help", "Help", show=False, priority=True),
        Binding("question_mark", "help", "Help"),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
    ]
    # Screens get the class -narrow / -normal / -wide by terminal width (app.tcss lays them out).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-normal"), (160, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (30, "-tall")]

    def __init__(
        self,
        db: str | Path,
        run: str | None = None,
        watch: bool = False,
        refresh_s: float = 1.0,
        study: str | None = None,
    ) -> None:
        super().__init__()
        self.db_path = str(db)
        self.initial_run = run
        self.initial_study = study  # `--study NAME`: its matrix opens over the home screen
        # Not `self.watch`: that would shadow Textual's `DOMNode.watch` method.
        self.watch_mode = watch
        self.refresh_s = refresh_s
        self.handle = StoreHandle(self.db_path, read_only=watch)
        self.running: dict[str, InProcessRun] = {}
        self._starting: dict[int, InProcessRun] = {}
        self.notice = ""
        # Set while another process holds the file (a run, a migration): screens then show its
        # live channel and poll until the file is free (set_blocked).
        self.blocked: str | None = None
        self.sub_title = self._title()

    def _title(self) -> str:
        """The file, and how this window reads it: read-only (`llmscope view`), from copies
        while another llmscope process writes it, or not at all while a process that allows no
        copy holds it."""
        notes = []
        if self.watch_mode:
            notes.append("read-only")
        if self.blocked:
            notes.append("in use by another process: showing its live channel")
        else:
            who = self.handle.written_by
            if who is not None:
                pid = f"process {who.pid}" if who.pid else "another process"
                notes.append(f"written by {pid}: its rows as of the last commit")
        return self.db_path + (f"  ({'; '.join(notes)})" if notes else "")

    def _refresh_title(self) -> None:
        title = self._title()
        if title != self.sub_title:
            self.sub_title = title

    def set_blocked(self, reason: str | None) -> None:
        """Whether another process holds the file right now (UI thread).

        Never sticky: every read tries the file again (screens poll while it is held), and the
        first read that succeeds clears it, says so, and this window reads and starts runs as
        before. Only `llmscope view` watches for good (`watch_mode`)."""
        if reason == self.blocked:
            return
        was, self.blocked = self.blocked, reason
        self._refresh_title()
        if not reason:
            if was:
                self.notify(
                    f"{self.db_path} is free again: this window reads it and starts runs as before",
                    title="database free",
                )

    def on_mount(self) -> None:
        from llmscope.tui.screens import HomeScreen

        self.set_interval(self.refresh_s, self._refresh_title)
        self.push_screen(HomeScreen())
        if self.initial_study:
            from llmscope.tui.screens.study import StudyScreen

            self.push_screen(StudyScreen(self.initial_study))

    def action_help(self) -> None:
        from llmscope.tui.screens import HelpScreen

        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss()  # F1 again closes it
        else:
            from llmscope.tui.screens.base import BaseScreen

            below = self.screen
            names = below.shown_metric_names() if isinstance(below, BaseScreen) else []
            self.push_screen(HelpScreen(names))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The command palette (ctrl+p): every action of the screen it was opened on (hidden
        keys included) and of the app, then Textual's own (theme, keys, screenshot)."""
        for title, help_text, callback in screen_commands(screen):
            yield SystemCommand(title, help_text, callback)
        yield from super().get_system_commands(screen)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            err = event.worker.error
            self.notify(f"{type(err).__name__}: {err}", title="error", severity="error", timeout=8)

    # -- in-process runs --------------------------------------------------------------------
    def start_run(self, params: dict[str, Any]) -> None:
        """Start a run in this process without blocking the interface."""
        if self.watch_mode:
            self.notify(
                "this window is read-only (`llmscope view`); start runs from `llmscope`",
                severity="warning",
            )
            return
        reporter = TuiReporter(self)
        handle = InProcessRun(reporter)
        t = threading.Thread(
            target=self._run_thread, args=(params, handle), name="llmscope-tui-run", daemon=True
        )
        handle.thread = t
        self._starting[id(reporter)] = handle
        from llmscope.tui.screens.starting import RunStartingScreen

        # from the first moment: what the run is doing until it scores (the model's load can
        # take a minute), then its dashboard
        self.push_screen(RunStartingScreen(_starting_title(params), reporter))
        t.start()

    def resume_run(self, run_id: str) -> None:
        """Continue an interrupted or failed run with the config stored with it."""
        self.start_run({"resume": run_id})

    def _run_thread(self, params: dict[str, Any], handle: InProcessRun) -> None:
        from llmscope.engine.runner import RunInterrupted
        from llmscope.runs.start import RunComplete, RunRequest, execute, prepare_run, start_run

        # The same path as `llmscope run` (llmscope/runs/start.py): checks before any model loads,
        # the response cache, the run's identity and an appended session record.
        if params.get("resume"):
            req = RunRequest(resume=str(params["resume"]))
        else:  # the new-run form fills a BackendConfig (tui/panels/form.py), as the CLI does
            cfg = (
                params["config"] if params.get("config") is not None else run_params_config(params)
            )
            req = RunRequest(
                suite_name=params.get("suite"),
                suite_path=params.get("suite_path") or None,
                config=cfg,
                task_options=dict(params.get("options") or {}),
                limit=params.get("limit"),
            )
            if cfg.base_url:  # typed into the form: the user's own choice, as --base-url is
                from llmscope.engine.openai import expand_base_urls
                from llmscope.runs.settings import remember_endpoints

                remember_endpoints(expand_base_urls(cfg.base_url))
        opened = False
        written: list[Any] = []

        def writer() -> Any:
            nonlocal opened
            store = self.handle.open_writer_waiting()
            opened = True
            written.append(store)
            return store

        reporter = handle.reporter
        try:
            try:
                with self.handle.use() as reader:  # read-only: no lock while checking
                    prep = prepare_run(reader, req)
            except RunComplete as e:
                self._starting.pop(id(handle.reporter), None)
                self.post_message(
                    RunFailed(
                        str(e), title="nothing to run", severity="information", reporter=reporter
                    )
                )
                return
            refused = (
                _untrusted_stored_endpoint(prep, self.db_path) if params.get("resume") else None
            )
            if refused:  # someone else's database: its stored URL is not the user's choice
                self._starting.pop(id(handle.reporter), None)
                self.post_message(
                    RunFailed(refused, title="endpoint not trusted", reporter=reporter)
                )
                return
            model = prep.config.model or "SmolLM2-135M-Instruct (embedded default)"
            if model.startswith("openai:"):
                reporter.phase(f"loading model {model}: asking the server what it offers ...")
            else:  # seconds to a minute; a GGUF file's first load converts it
                reporter.phase(
                    f"loading model {model} (a GGUF file is converted the first time, then cached) ..."
                )
            # the write connection opens once the model is loaded
            started = start_run(
                writer,
                prep,
                [handle.reporter],
                db=self.db_path,
                warn=lambda m: handle.reporter.on_message("warning", m),
            )
            runner = started.runner

            reporter.phase("warming up: opening the database and sending the first items ...")

            async def main() -> Any:
                handle.loop = asyncio.get_running_loop()
                handle.task = asyncio.current_task()
                return await execute(started, lambda m: handle.reporter.on_message("info", m))

            try:
                asyncio.run(main())
            except (RunInterrupted, asyncio.CancelledError):
                self.post_message(RunEnded(runner.run_id, "interrupted"))
            for store in written:  # the checked close, as `llmscope run` does (Store.checkpoint)
                store.checkpoint()
        except Exception as e:  # shown to the user; the app keeps running
            self._starting.pop(id(handle.reporter), None)
            self.post_message(RunFailed(f"{type(e).__name__}: {e}", reporter=reporter))
        finally:
            if opened:
                self.handle.release_writer()  # idle again: no lock held between runs

    def on_run_started(self, msg: RunStarted) -> None:
        started = self._starting.pop(id(msg.reporter), None)
        self.running[msg.run_id] = started if started is not None else InProcessRun(msg.reporter)
        self.notify(f"run {msg.run_id} started")
        from llmscope.tui.screens import HomeScreen

        self._close_starting(msg.reporter)

        if isinstance(self.screen, HomeScreen):
            self.screen.reload()
            self.screen.open_run(msg.run_id)  # Esc then comes back to the runs list, not the form

    def on_run_ended(self, msg: RunEnded) -> None:
        self.notify(f"run {msg.run_id} {msg.status}")
        from llmscope.tui.screens import HomeScreen

        for s in self.screen_stack:
            if isinstance(s, HomeScreen):
                s.reload()

    def on_run_failed(self, msg: RunFailed) -> None:
        self._close_starting(msg.reporter)
        self.notify(msg.text, title=msg.title, severity=msg.severity, timeout=10)

    def on_run_phase(self, msg: RunPhase) -> None:
        from llmscope.tui.screens.starting import RunStartingScreen

        for s in self.screen_stack:
            if isinstance(s, RunStartingScreen) and s.reporter is msg.reporter:
                if msg.level is None:
                    s.set_phase(msg.text)
                else:
                    s.add_line(msg.level, msg.text)

    def _close_starting(self, reporter: Any) -> None:
        """The starting screen of this run, if it is on top, gives way (to its dashboard or,
        when it failed, to the form it came from, with the reason)."""
        from llmscope.tui.screens.starting import RunStartingScreen

        if (
            reporter is not None
            and isinstance(self.screen, RunStartingScreen)
            and self.screen.reporter is reporter
        ):
            self.pop_screen()

    def stop_runs(self, wait_s: float = 10.0) -> None:
        for h in self.running.values():
            h.stop()
        for h in self.running.values():
            if h.thread is not None:
                h.thread.join(timeout=wait_s)

    def on_unmount(self) -> None:
        self.stop_runs()
        self.handle.close()


def run_app(
    db: str | Path = "llmscope.duckdb",
    run: str | None = None,
    watch: bool = False,
    study: str | None = None,
) -> int:
    """Run the TUI (`llmscope`, `llmscope view`); returns the exit status."""
    app = LlmscopeApp(db, run=run, watch=watch, study=study)
    rc = app.run()
    return int(rc or 0)
