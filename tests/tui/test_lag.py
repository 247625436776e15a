"""Event-loop lag while 10,000 results stream into an open dashboard.

A 20 ms interval timer records how late each tick fires; the worst delay is printed
(run with `-s` to see it). Only a generous sanity bound is asserted.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import DashboardScreen
from llmscope.tui.widgets import ItemList
from tests.helpers.tui import add_suite, create_run, screen_text, settle, toy_result, wait_until

N = 10_000
BATCH = 250


@pytest.mark.slow
async def test_event_loop_lag_while_streaming(tmp_path: Path) -> None:
    path = tmp_path / "big.duckdb"
    with Store(path) as s:
        items = add_suite(s, N)
        create_run(s, "run-big", N, status="running")
    results = [toy_result(it, i) for i, it in enumerate(items)]
    app = LlmscopeApp(path)  # the real refresh period (1 s)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DashboardScreen)
        store = app.handle.open_writer()  # as an in-process run does
        assert store is not None

        lags: list[float] = []
        period = 0.02
        last = [time.perf_counter()]

        def probe() -> None:
            now = time.perf_counter()
            lags.append(now - last[0] - period)
            last[0] = now

        timer = app.set_interval(period, probe)

        def writer() -> None:  # as the runner's writer thread: batches through the shared Store
            for k in range(0, N, BATCH):
                store.write_results("run-big", results[k : k + BATCH], start_seq=k)
                time.sleep(0.01)
            store.update_run("run-big", status="completed")

        t = threading.Thread(target=writer)
        t0 = time.perf_counter()
        t.start()
        ok = await wait_until(pilot, lambda: f"{N}/{N} results" in screen_text(app))
        t.join()
        timer.stop()
        took = time.perf_counter() - t0
        worst = max(lags)
        print(
            f"\n[tui lag] {N} results streamed in {took:.1f}s; worst event-loop delay "
            f"{worst * 1000:.0f} ms over {len(lags)} ticks (median "
            f"{sorted(lags)[len(lags) // 2] * 1000:.1f} ms)"
        )
        assert ok
        lst = app.screen.query_one(ItemList)
        wrong = sum(1 for r in results if r.correct == 0.0)
        assert lst.n_total == wrong
        assert len(lags) > 1  # the timer ticked while the rows streamed (the delays are printed)
