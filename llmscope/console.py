"""Plain-terminal reporter: a rich progress bar on a TTY, periodic lines elsewhere."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from llmscope.engine.progress import Progress
from llmscope.engine.textsafety import for_terminal
from llmscope.engine.types import Result


def _where(run: dict[str, Any]) -> str:
    """ " on cpu/float32" for local models, " at <endpoint>" for API models (no None/None)."""
    device, dtype = run.get("device"), run.get("dtype")
    if device or dtype:
        return " on " + "/".join(str(x) for x in (device, dtype) if x)
    meta = run.get("meta") if isinstance(run.get("meta"), dict) else {}
    backend = (meta or {}).get("backend") or {}
    url = backend.get("base_url") if isinstance(backend, dict) else None
    return f" at {url}" if url else ""


def _fmt_rate(p: Progress) -> str:
    parts = [f"{p.items_per_s:.1f} it/s", f"{p.tokens_per_s:,.0f} tok/s"]
    if p.accuracy is not None:
        parts.append(f"acc {p.accuracy:.3f}")
    if p.errors:
        parts.append(f"errors {p.errors}")
    retries = int(p.backend.get("retries", 0) or 0)
    if retries:
        parts.append(f"retries {retries}")
    return " · ".join(parts)


class ConsoleReporter:
    """Implements the engine's Reporter protocol on stderr."""

    def __init__(
        self, console: Console | None = None, *, quiet: bool = False, interval_s: float = 10.0
    ) -> None:
        # Not a terminal (a log file, a pipe): no hard wrapping at Rich's default 80 columns
        # (logs read "on cpu/float32, 729⏎prompts"); each message stays one line.
        self.console = console or Console(
            stderr=True, highlight=False, soft_wrap=not sys.stderr.isatty()
        )
        self.quiet = quiet
        self.tty = self.console.is_terminal and sys.stderr.isatty()
        self.interval_s = interval_s
        self._bar: RichProgress | None = None
        self._task_id: Any = None
        self._last_line = 0.0

    def on_start(self, run: dict[str, Any], progress: Progress) -> None:
        if self.quiet:
            return
        resumed = f" (resuming: {progress.skipped} already stored)" if progress.skipped else ""
        self.console.print(
            f"run [bold]{escape(progress.run_id)}[/]: {escape(for_terminal(str(run.get('suite_name'))))} × "
            f"{escape(for_terminal(str(run.get('model'))))}{escape(for_terminal(_where(run)))}, "
            f"{progress.total} prompts{resumed}"
        )
        if self.tty:
            self._bar = RichProgress(
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[rate]}"),
                console=self.console,
                transient=False,
            )
            self._bar.start()
            self._task_id = self._bar.add_task(
                "scoring", total=progress.total, completed=progress.done, rate=""
            )

    def on_results(self, results: list[Result], progress: Progress) -> None:
        pass

    def on_progress(self, progress: Progress) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(self._task_id, completed=progress.done, rate=_fmt_rate(progress))
        else:
            now = time.monotonic()
            if now - self._last_line >= self.interval_s:
                self._last_line = now
                eta = f", eta {progress.eta_s:.0f}s" if progress.eta_s is not None else ""
                self.console.print(f"{progress.done}/{progress.total} · {_fmt_rate(progress)}{eta}")

    def on_message(self, level: str, text: str) -> None:
        if not self.quiet or level in ("warning", "error"):
            style = {"warning": "yellow", "error": "red"}.get(level, "")
            text = for_terminal(text)  # names and server text: shown, never obeyed (ESC, bidi)
            self.console.print(f"[{style}]{escape(text)}[/]" if style else escape(text))

    def on_end(self, progress: Progress) -> None:
        if self._bar is not None:
            self._bar.update(self._task_id, completed=progress.done, rate=_fmt_rate(progress))
            self._bar.stop()
            self._bar = None
        if not self.quiet:
            self.console.print(
                f"{progress.status}: {progress.done}/{progress.total} stored, {progress.errors} errors, "
                f"{progress.elapsed_s:.1f}s this session ({_fmt_rate(progress)})"
            )


class StepProgress:
    """Progress of a long command over a known number of steps (runs of a report, files of an
    import): a rich bar with the current step's name on a terminal, nothing elsewhere (a pipe
    or a log gets the command's usual output only). A context manager; `step(name)` before
    each step, `advance()` after it."""

    def __init__(self, what: str, total: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.total = total
        self.what = what
        self._bar: RichProgress | None = None
        if self.console.is_terminal and sys.stderr.isatty():
            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[step]}"),
                console=self.console,
                transient=True,
            )
            self._task_id = self._bar.add_task(what, total=total, step="")

    def __enter__(self) -> StepProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def step(self, name: str) -> None:
        """Say which step is under way."""
        if self._bar is not None:
            self._bar.update(self._task_id, step=escape(name))

    def set_total(self, total: int) -> None:
        """The number of steps, once known."""
        self.total = total
        if self._bar is not None:
            self._bar.update(self._task_id, total=total)

    def advance(self) -> None:
        """One step done."""
        if self._bar is not None:
            self._bar.advance(self._task_id)
