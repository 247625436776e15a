"""Helpers for the TUI tests: real DuckDB files with suites, runs and results.

Imported by the TUI tests (`from tests.helpers.tui import ...`); tests/tui/test_helpers.py
checks the helper writes what the other tests assume.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from pathlib import Path
from typing import Any

from llmscope.engine.types import Item, Result
from llmscope.store.db import Store

SUITE_ID = "toy@000000000000"
TRICKY = "Tricky [bold]x[/] and \x1b[31mred"
CATEGORIES = ("animals", "food", "weather")
STARTED = dt.datetime(2025, 1, 2, 3, 4, 5)


def toy_items(n: int) -> list[Item]:
    """Statements with a gold answer, a human majority (`human_q1`) and a category."""
    items = []
    for i in range(n):
        text = TRICKY if i == 3 else f"Statement number {i} about {CATEGORIES[i % 3]}."
        gold = "yes" if i % 2 == 0 else "no"
        fields = {
            "id": f"s{i:03d}",
            "statement": text,
            "category": CATEGORIES[i % 3],
            "human_q1": 1 if gold == "yes" else 0,
            "gold": gold,
        }
        items.append(Item(item_id=f"s{i:03d}", fields=fields, gold=gold, text=text))
    return items


def p_yes_for(i: int, shift: int = 0) -> float:
    """A deterministic P(yes) per item (spread over [0.05, 0.85])."""
    return 0.05 + ((i * 37 + shift) % 81) / 100.0


def toy_result(item: Item, i: int, variant: str = "q1", shift: int = 0) -> Result:
    py = p_yes_for(i, shift)
    pn = round(0.9 - py, 6)
    pred = "yes" if py > pn else "no"
    return Result(
        item_id=item.item_id,
        variant=variant,
        prompt=f'Consider the statement, "{item.text}" Do you agree?',
        probs={"yes": py, "no": pn},
        other=round(1 - py - pn, 6),
        top_tokens=[{"token": "Yes", "id": 1, "prob": py}, {"token": "No", "id": 2, "prob": pn}],
        prediction=pred,
        gold=item.gold,
        correct=1.0 if pred == item.gold else 0.0,
        confidence=max(py, pn) / (py + pn),
        n_tokens=20,
        latency_ms=5.0,
    )


def add_suite(store: Store, n_items: int) -> list[Item]:
    items = toy_items(n_items)
    spec = {
        "name": "toy",
        "task": "yesno",
        "group_by": ["category"],
        "cluster_field": "id",
        "answers": ["yes", "no"],
    }
    store.add_suite(SUITE_ID, "toy", "yesno", spec, "tests", items)
    return items


def create_run(
    store: Store,
    run_id: str,
    n_total: int,
    *,
    model: str = "model-A",
    status: str = "completed",
    started: dt.datetime = STARTED,
) -> None:
    store.create_run(
        {
            "run_id": run_id,
            "suite_id": SUITE_ID,
            "suite_name": "toy",
            "task": "yesno",
            "model": model,
            "backend": "test",
            "n_total": n_total,
            "status": status,
            "started_at": started,
            "updated_at": started,
            "options": {},
            "meta": {},
            "versions": {},
            # A running run has a live owner (this process), or it reads as `interrupted`.
            **(
                {
                    "owner_pid": os.getpid(),
                    "owner_host": socket.gethostname(),
                    "heartbeat_at": dt.datetime.now(dt.UTC).replace(tzinfo=None),
                }
                if status == "running"
                else {}
            ),
        }
    )


def make_db(
    path: Path,
    *,
    n_items: int = 12,
    variants: tuple[str, ...] = ("q1", "q2"),
    runs: tuple[tuple[str, str, int], ...] = (("run-a", "model-A", 0),),
    status: str = "completed",
) -> Path:
    """A DB with the toy suite and finished runs (run id, model, P(yes) shift)."""
    with Store(path) as store:
        items = add_suite(store, n_items)
        for k, (rid, model, shift) in enumerate(runs):
            create_run(
                store,
                rid,
                n_items * len(variants),
                model=model,
                status=status,
                started=STARTED + dt.timedelta(minutes=k),
            )
            res = [toy_result(it, i, v, shift) for i, it in enumerate(items) for v in variants]
            store.write_results(rid, res)
    return path


def expected_accuracy(
    n_items: int, variants: tuple[str, ...] = ("q1", "q2"), shift: int = 0
) -> float:
    """Accuracy recomputed by hand from the generating rule."""
    right = 0
    for i in range(n_items):
        py = p_yes_for(i, shift)
        pred = "yes" if py > 0.9 - py else "no"
        right += pred == ("yes" if i % 2 == 0 else "no")
    return right / n_items


def run_info(store: Store, run_id: str) -> dict[str, Any]:
    r = store.get_run(run_id)
    assert r is not None
    return r


async def settle(pilot: Any) -> None:
    """Let pending messages, then every worker, then their messages finish."""
    from textual.worker import WorkerCancelled

    async def wait() -> None:
        # An exclusive worker cancelled by its newer replacement (a screen's refresh tick
        # firing during the wait) is not a failure; the next wait covers the replacement.
        for _ in range(5):
            try:
                await pilot.app.workers.wait_for_complete()
                return
            except WorkerCancelled:
                await pilot.pause()

    await pilot.pause()
    await wait()
    await pilot.pause()
    await wait()
    await pilot.pause()


# The most a condition is waited for: a bound that catches a hang, never one on speed (a run,
# a model load or a redraw on a loaded 2-core machine takes many times its idle time).
HANG_S = 300.0


async def wait_until(pilot: Any, cond: Any, timeout: float = HANG_S, step: float = 0.05) -> bool:
    """Poll a condition while the app runs (bounded; returns whether it became true)."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        await pilot.pause(step)
    return bool(cond())


def screen_text(app: Any) -> str:
    """The app's current screen as plain text lines."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in s) for s in strips)


def fill_form(screen: Any, **values: str) -> None:
    """Fill the home screen's run form by field name (tui/panels/form.py FIELDS), as typing
    into each field would: `fill_form(home, suite="commonsense-sample", limit="4")`."""
    from llmscope.tui.panels.form import RunForm

    form = screen.query_one(RunForm)
    for name, value in values.items():
        form.set_value(name, value)


async def wait_run_completed(app: Any, pilot: Any) -> str:
    """After the form's Start: wait for the run's dashboard, its "completed" and its end, with no
    error notified and the write connection released; returns the run's id."""
    from llmscope.tui.screens import DashboardScreen

    assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen)), [
        n.message for n in app._notifications
    ]
    dash = app.screen
    assert await wait_until(pilot, lambda: "completed" in screen_text(app))
    assert await wait_until(pilot, lambda: not dash.active)
    assert not any(n.severity == "error" for n in app._notifications), [
        n.message for n in app._notifications
    ]
    run_id = dash.run_id
    await settle(pilot)
    assert await wait_until(pilot, lambda: not app.handle.writing)  # no write lock
    return run_id
