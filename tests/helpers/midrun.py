"""Signals that land mid-run on any machine: wait for what the run publishes, with its work held.

A test that signals a run after a fixed sleep, or after counting some rows, fails on a loaded
machine (the run is already done) or proves nothing on a fast one. Here the test waits for an
event the run publishes on its live channel (`<db>.live/<run>/progress.json`: `stored`, results
committed to the database), and the run cannot finish meanwhile: an API run's requests are held
by the scripted server (`hold_after`, tests/helpers/oai_server.py); a local run is frozen
(SIGSTOP) once the event is seen, signalled, then let go (SIGCONT), so the signal is the next
thing it sees. The waits are bounded conditions, never sleeps that stand for one.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WAIT_S = (
    600.0  # the most a condition is waited for (a loaded 2-core machine takes long to start a run)
)


def live_progress(db: str | Path) -> dict[str, Any] | None:
    """The `progress` object the (one) live run of `db` last published, or None."""
    for p in Path(f"{db}.live").glob("*/progress.json"):
        try:
            progress = json.loads(p.read_text(encoding="utf-8"))["progress"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # replaced while read, or not written yet
        if isinstance(progress, dict):
            return progress
    return None


def wait_until(
    cond: Callable[[], Any],
    what: str,
    proc: subprocess.Popen[Any] | None = None,
    limit: float = WAIT_S,
) -> Any:
    """Poll `cond` until it returns something true (returned); fail naming `what` if `proc`
    exits first or `limit` seconds pass."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            got = cond()
            if got:
                return got
            raise AssertionError(f"the run exited ({proc.returncode}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {limit:.0f} s")


def wait_stored(db: str | Path, proc: subprocess.Popen[Any], at_least: int = 1) -> dict[str, Any]:
    """Wait until the run reports `at_least` results committed to `db` (kept even by kill -9)."""

    def stored() -> dict[str, Any] | None:
        p = live_progress(db)
        return p if p is not None and int(p.get("stored") or 0) >= at_least else None

    result: dict[str, Any] = wait_until(stored, f"{at_least} results were stored", proc)
    return result


def signal_frozen(proc: subprocess.Popen[Any], db: str | Path, sig: int) -> None:
    """Freeze a local run (SIGSTOP), check it has not ended, send `sig`, let it go on.

    While stopped the run does no work, so however slow this process is, `sig` is handled
    before the run can score anything more than the batch it is in."""
    proc.send_signal(signal.SIGSTOP)
    try:
        ended = list(Path(f"{db}.live").glob("*/ended"))
        assert not ended, f"the run ended before it was stopped: {ended}"
        proc.send_signal(sig)
    finally:
        if proc.poll() is None and sig != signal.SIGKILL:
            proc.send_signal(signal.SIGCONT)


async def release_when_held(*holds: tuple[Any, str, int], limit: float = WAIT_S) -> None:
    """For calls gathered in this event loop: wait until each scripted server holds exactly `n`
    requests for `marker` ((server, marker, n) per server, tests/helpers/oai.py), then let them
    all go. Run it beside the calls (asyncio.gather): they reach the limit on any machine."""
    end = time.monotonic() + limit
    while not all(server.held(marker) == n for server, marker, n in holds):
        if time.monotonic() > end:
            raise AssertionError(f"not held as expected within {limit:.0f} s: {holds}")
        await asyncio.sleep(0.05)
    for server, marker, _ in holds:
        server.release(marker)
