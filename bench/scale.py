"""Big runs: import rate, report time and memory, dashboard first frame, list scrolling.

    python -m bench.scale [--worldsense DIR] [--synthetic N] [--skip-before] [--scrolls 40]

Data: the WorldSense import (4 runs x 87,048 results; `--worldsense`, default the shared
test set beside the repository), or with `--synthetic N` one yes/no run of N results
written through `Store.append_results` (20 top tokens per row, like a real run).

Every measurement runs in a fresh child process (so peak memory is that step's own) and
prints wall seconds, CPU seconds (user+system of the child, all threads: the fairer figure
on a shared machine) and peak resident memory. "before" is the code path as it was before
issue 17, kept callable in `bench/_before.py`; where this branch did not change a path
(the report, the dashboard) one figure is printed and labelled so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_PRELUDE = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
_t0, _c0 = time.perf_counter(), time.process_time()
def _done(**extra):
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out = dict(wall=time.perf_counter() - _t0, cpu=time.process_time() - _c0,
               peak_mb=ru.ru_maxrss / 1024, **extra)
    with open({out!r}, "w") as f:  # not stdout: the Textual harness may hold it
        json.dump(out, f)
"""


def _child(body: str, timeout: float = 1800) -> dict[str, Any]:
    """Run `body` in a fresh interpreter; it calls `_done(**figures)` at the end."""
    out = Path(tempfile.mkdtemp(prefix="llmscope-scale-step-")) / "out.json"
    code = _PRELUDE.format(root=str(ROOT), out=str(out)) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.is_file():
        return dict(json.loads(out.read_text()))
    raise RuntimeError(f"bench step failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def import_step(db: Path, directory: Path, before: bool) -> dict[str, Any]:
    """`llmscope import worldsense` into a new file, through the old or the current path."""
    if before:
        body = f"""
        import bench._before as b
        import llmscope.data.worldsense as ws
        ws.load_worldsense = b.load_worldsense_before   # the readline-per-trial reader
        from llmscope.store.db import Store
        from pathlib import Path
        s = Store({str(db)!r}); s.execute("SET enable_progress_bar = false")
        b.import_worldsense(s, Path({str(directory)!r}))
        n = s.execute("SELECT count(*) FROM results").fetchone()[0]; s.close()
        _done(rows=n)
        """
    else:
        body = f"""
        from llmscope import importers
        from llmscope.store.db import Store
        from pathlib import Path
        s = Store({str(db)!r}); s.execute("SET enable_progress_bar = false")
        importers.import_worldsense(s, Path({str(directory)!r}))
        n = s.execute("SELECT count(*) FROM results").fetchone()[0]; s.close()
        _done(rows=n)
        """
    return _child(body)


def synthetic_step(db: Path, n: int) -> dict[str, Any]:
    """One completed yes/no run of `n` results (suite of n/3 statements x 3 variants)."""
    body = f"""
    import datetime as dt, random
    from llmscope.engine.types import Item
    from llmscope.store.db import Store
    n = {n}
    s = Store({str(db)!r}); s.execute("SET enable_progress_bar = false")
    m = (n + 2) // 3
    items = [Item(item_id=f"s{{i:07d}}", fields={{"category": f"c{{i % 7}}"}}, gold="yes" if i % 2 else "no",
                  options=["yes", "no"], text=f"Statement number {{i}}.") for i in range(m)]
    spec = {{"name": "synthetic", "task": "yesno", "templates": {{"q1": "{{text}}", "q2": "{{text}}", "q3": "{{text}}"}}}}
    s.add_suite("synthetic@1", "synthetic", "yesno", spec, "bench.scale", items)
    s.create_run({{"run_id": "synthetic", "suite_id": "synthetic@1", "suite_name": "synthetic", "task": "yesno",
                   "model": "synthetic", "backend": "bench", "n_total": n, "status": "running"}})
    rng = random.Random(0)
    CH = 65536
    for k in range(0, n, CH):
        rows = range(k, min(n, k + CH))
        py = [rng.random() for _ in rows]
        gold = ["yes" if (i // 3) % 2 else "no" for i in rows]
        pred = ["yes" if p > 0.5 else "no" for p in py]
        top = [json.dumps([{{"token": f" t{{j}}", "id": 100 + j, "prob": p / (j + 2)}} for j in range(20)]) for p in py]
        s.append_results("synthetic", {{
            "item_id": [f"s{{i // 3:07d}}" for i in rows], "variant": [f"q{{i % 3 + 1}}" for i in rows],
            "prompt": [f"Consider the statement number {{i // 3}}. Do you agree?" for i in rows],
            "probs": [json.dumps({{"yes": p * 0.9, "no": (1 - p) * 0.9}}) for p in py],
            "p_yes": [p * 0.9 for p in py], "p_no": [(1 - p) * 0.9 for p in py], "other": [0.1] * len(py),
            "top_tokens": top, "prediction": pred, "gold": gold,
            "correct": [float(a == b) for a, b in zip(pred, gold)], "confidence": [max(p, 1 - p) for p in py],
            "n_tokens": [60] * len(py), "latency_ms": [12.5] * len(py),
        }}, start_seq=k)
    s.update_run("synthetic", status="completed", n_done=n)
    s.close()
    _done(rows=n)
    """
    return _child(body)


def report_step(db: Path) -> dict[str, Any]:
    """`llmscope report` over every run of the file (output discarded)."""
    body = f"""
    import contextlib, io
    from llmscope.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["report", "--db", {str(db)!r}])
    _done(rc=rc, chars=len(buf.getvalue()))
    """
    return _child(body)


def dashboard_step(db: Path, run_id: str, scrolls: int, before: bool) -> dict[str, Any]:
    """Open a run's dashboard headless: first frame, numbers shown, list scroll latency.
    before: the failing-items list held in memory (as before issue 17) instead of paged."""
    body = f"""
    import asyncio, statistics
    from llmscope.tui.app import LlmscopeApp
    from llmscope.tui.screens import DashboardScreen
    from llmscope.tui.widgets import ItemList
    DashboardScreen.PAGED_LIST = {not before!r}

    def text(app):
        return "\\n".join("".join(seg.text for seg in s) for s in app.screen._compositor.render_strips())

    async def go():
        app = LlmscopeApp({str(db)!r})
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.pause()
            t0 = time.perf_counter()
            app.push_screen(DashboardScreen({run_id!r}))
            first = None
            while time.perf_counter() - t0 < 600:
                await pilot.pause(0.005)
                if isinstance(app.screen, DashboardScreen):
                    txt = text(app)
                    if first is None and ("loading" in txt or "results" in txt):
                        first = time.perf_counter() - t0
                    if app.screen.query_one(ItemList).n_total and "accuracy" in txt:
                        break
            numbers = time.perf_counter() - t0
            lst = app.screen.query_one(ItemList)
            lst.focus()
            lat = []
            for k in range({scrolls}):
                t = time.perf_counter()
                await pilot.press("pagedown" if k % 10 != 9 else "end")
                await pilot.pause()
                while getattr(lst, "_loading", None):  # paged list: until the rows are drawn
                    await pilot.pause(0.002)
                lat.append(time.perf_counter() - t)
            t = time.perf_counter(); await pilot.press("s"); await pilot.pause()
            while getattr(lst, "_loading", None):
                await pilot.pause(0.002)
            resort = time.perf_counter() - t
            return dict(first_frame=first, numbers=numbers, listed=lst.n_total,
                        scroll_median_ms=1000 * statistics.median(lat), scroll_max_ms=1000 * max(lat),
                        resort_ms=1000 * resort)
    _done(**asyncio.run(go()))
    """
    return _child(body)


def _fmt(m: dict[str, Any] | None, key: str, unit: str = "", digits: int = 2) -> str:
    if m is None or m.get(key) is None:
        return "-"
    return f"{m[key]:,.{digits}f}{unit}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worldsense", type=Path, default=ROOT.parent / "shared" / "data" / "worldsense" / "test_set",
                    help="WorldSense test_set folder (trials.jsonl.bz2 and results/)")
    ap.add_argument("--synthetic", type=int, default=0, metavar="N",
                    help="use one synthetic yes/no run of N results instead of the WorldSense import")
    ap.add_argument("--skip-before", action="store_true", help="measure the current code only")
    ap.add_argument("--scrolls", type=int, default=40, help="list key presses timed (pagedown, every 10th end)")
    ap.add_argument("--keep", type=Path, help="keep the database(s) in this folder")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="llmscope-scale-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, str]] = []
    if args.synthetic:
        db = work / "synthetic.duckdb"
        db.unlink(missing_ok=True)
        m = synthetic_step(db, args.synthetic)
        print(f"synthetic run: {m['rows']:,} results written in {m['wall']:.1f} s "
              f"({m['rows'] / m['wall']:,.0f} rows/s wall, {m['rows'] / m['cpu']:,.0f} rows/s CPU)")
        run_id = "synthetic"
    else:
        if not (args.worldsense / "trials.jsonl.bz2").is_file():
            print(f"no WorldSense test set at {args.worldsense} (pass --worldsense DIR or --synthetic N)")
            return 2
        db = work / "after.duckdb"
        db.unlink(missing_ok=True)
        before = None
        if not args.skip_before:
            old = work / "before.duckdb"
            old.unlink(missing_ok=True)
            before = import_step(old, args.worldsense, before=True)
        after = import_step(db, args.worldsense, before=False)
        for label, key in (("import rows/s (wall)", "wall"), ("import rows/s (CPU)", "cpu")):
            b = f"{before['rows'] / before[key]:,.0f}" if before else "-"
            rows.append((label, b, f"{after['rows'] / after[key]:,.0f}"))
        rows.append(("import seconds (wall / CPU)",
                     f"{before['wall']:.1f} / {before['cpu']:.1f}" if before else "-",
                     f"{after['wall']:.1f} / {after['cpu']:.1f}"))
        rows.append(("import peak memory MB", _fmt(before, "peak_mb", digits=0), _fmt(after, "peak_mb", digits=0)))
        if before:
            (work / "before.duckdb").unlink(missing_ok=True)
        from llmscope.store.db import Store

        with Store(db, read_only=True) as s:
            r = s.execute("SELECT run_id FROM runs ORDER BY model LIMIT 1").fetchone()
        run_id = str(r[0]) if r else ""
    rep = report_step(db)
    rows.append(("report over all runs, s (wall / CPU)", "(not changed here)",
                 f"{rep['wall']:.1f} / {rep['cpu']:.1f}"))
    rows.append(("report peak memory MB", "(not changed here)", f"{rep['peak_mb']:,.0f}"))
    dash_b = None if args.skip_before else dashboard_step(db, run_id, args.scrolls, before=True)
    dash = dashboard_step(db, run_id, args.scrolls, before=False)
    rows.append(("dashboard first frame s", _fmt(dash_b, "first_frame"), _fmt(dash, "first_frame")))
    rows.append(("dashboard numbers shown s", _fmt(dash_b, "numbers"), _fmt(dash, "numbers")))
    rows.append(("dashboard peak memory MB", _fmt(dash_b, "peak_mb", digits=0), _fmt(dash, "peak_mb", digits=0)))
    rows.append((f"list scroll per key, ms median ({dash['listed']:,} rows)", _fmt(dash_b, "scroll_median_ms", digits=0),
                 _fmt(dash, "scroll_median_ms", digits=0)))
    rows.append(("list scroll per key, ms max", _fmt(dash_b, "scroll_max_ms", digits=0),
                 _fmt(dash, "scroll_max_ms", digits=0)))
    rows.append(("list re-sort ms", _fmt(dash_b, "resort_ms", digits=0), _fmt(dash, "resort_ms", digits=0)))
    w = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{w}}  {'before':>20}  {'after':>20}")
    for label, b, a in rows:
        print(f"{label:<{w}}  {b:>20}  {a:>20}")
    print(f"(database: {db})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
