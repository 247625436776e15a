"""Big runs: import/write rate, report time and memory, dashboard first frame, list scrolling.

    python -m bench.scale [--n 1000000] [--worldsense [DIR]] [--before a2b14b8] [--skip-before]
        [--scrolls 40] [--keep DIR] [--flush-rows 100000] [--study] [--report-only] [--report-rounds N]

Data: one synthetic yes/no run of `--n` results (default 1,000,000; 20 top tokens per row,
like a real run) written through the store's public bulk API (`Store.append_results`, or
`Store.write_results` where a version has no bulk path), or with `--worldsense` the WorldSense
import (4 runs x 87,048 results, `llmscope.io.importers.published.import_worldsense`).

"before" is real code: the package as it was at `--before` (default a2b14b8, the commit the
baseline figures were measured on) is extracted from git into a temporary folder, and every
step runs twice, once with that tree first on `sys.path` and once with the working tree, each
on a database its own code wrote. Every step runs in a fresh child process (peak memory is the
step's own) and reports the wall and CPU seconds (user+system, all threads: the fairer figure on
a shared machine) of the measured call, and the step's peak resident memory. The steps call
public APIs only (Store, importers, `llmscope report`, the TUI app headless), so other work
on those paths shows here.

`--report-only` writes the data and times the report only (no flush-size or dashboard step);
`--report-rounds N` times it N times per version (the table shows the round of median CPU
time). The report is timed as the call (`call_*`) and as the whole child process
(interpreter start and imports included: what `llmscope report` costs at a shell).

The last lines check the targets with the working tree's figures: the report over 1M
rows cold (no metrics cache) under 3 s, `write_results` at the run loop's flush size at 150,000
rows/s or more (`--flush-rows` rows, bench.store_bench's measurement), and with `--study` the
study matrix (bench.study_matrix, 10 runs x 87,048 rows) under 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import tomllib
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# the baseline: the code behind the figures 33 s import, 21.8 s report, 8 s dashboard
BEFORE_REF = "a2b14b8"

_PRELUDE = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
sys.path.insert(0, {tree!r})
import llmscope
assert llmscope.__file__.startswith({tree!r}), llmscope.__file__  # the intended version of the code
_t0, _c0 = time.perf_counter(), time.process_time()
def _done(**extra):
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out = dict(wall=time.perf_counter() - _t0, cpu=time.process_time() - _c0,
               peak_mb=ru.ru_maxrss / 1024, **extra)
    with open({out!r}, "w") as f:  # not stdout: the Textual harness may hold it
        json.dump(out, f)
"""


def extract_tree(ref: str, dest: Path) -> Path:
    """The package at git `ref`, laid out as an importable `llmscope` folder under `dest`."""

    def show(path: str) -> bytes:
        return subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{ref}:{path}"], capture_output=True, check=True
        ).stdout

    mapping = tomllib.loads(show("pyproject.toml").decode())["tool"]["setuptools"]["package-dir"]
    src = dest / "src"
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, *sorted(set(mapping.values()))],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    pkg = dest / "pkg"
    for name, folder in sorted(mapping.items(), key=lambda kv: kv[0].count(".")):
        target = pkg.joinpath(*name.split("."))
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(src / folder, target)
    shutil.rmtree(src)
    return pkg


def worldsense_importer() -> tuple[Any, Any]:
    """(store_suite, import_worldsense) of the llmscope imported: the importers package's, or,
    in a tree extracted from before that package, the single `llmscope.io.importers` module's."""
    try:
        from llmscope.io.importers.published import import_worldsense
        from llmscope.io.importers.runs import store_suite
    except ImportError:
        from llmscope.io import importers

        return importers._store_suite, importers.import_worldsense
    return store_suite, import_worldsense


def call_in_tree(tree: Path | None, imports: str, call: str) -> list[str]:
    """The fields `print(*call)` prints in a fresh interpreter (one torch thread) with `tree`
    (an extracted older package, `extract_tree`) first on sys.path, else the working tree's code."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        + (f"sys.path.insert(0, {str(tree)!r})\n" if tree else "")
        + "import llmscope\n"
        + (
            f"assert llmscope.__file__.startswith({str(tree)!r}), llmscope.__file__\n"
            if tree
            else ""
        )
        + f"{imports}\nprint(*{call})\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        cwd=tempfile.gettempdir(),
    )
    if proc.returncode:
        raise RuntimeError(f"bench child failed:\n{proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1].split()


def _child(body: str, tree: Path, timeout: float = 3600) -> dict[str, Any]:
    """Run `body` in a fresh interpreter with `tree` first on sys.path; it calls `_done(**figures)`."""
    out = Path(tempfile.mkdtemp(prefix="llmscope-scale-step-")) / "out.json"
    code = _PRELUDE.format(root=str(ROOT), tree=str(tree), out=str(out)) + textwrap.dedent(body)
    ru0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    ru1, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - t0
    if out.is_file():
        # the whole child process too: interpreter start and imports included
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        return {**json.loads(out.read_text()), "proc_wall": wall, "proc_cpu": cpu}
    raise RuntimeError(f"bench step failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def import_step(db: Path, directory: Path, tree: Path) -> dict[str, Any]:
    """`llmscope import worldsense` into a new file."""
    body = f"""
    from bench.scale import worldsense_importer
    from llmscope.store.db import Store
    from pathlib import Path
    _, import_worldsense = worldsense_importer()
    s = Store({str(db)!r}); s.execute("SET enable_progress_bar = false")
    t, c = time.perf_counter(), time.process_time()
    import_worldsense(s, Path({str(directory)!r}))
    call_wall, call_cpu = time.perf_counter() - t, time.process_time() - c
    n = s.execute("SELECT count(*) FROM results").fetchone()[0]; s.close()
    _done(rows=n, call_wall=call_wall, call_cpu=call_cpu)
    """
    return _child(body, tree)


def synthetic_step(db: Path, n: int, tree: Path) -> dict[str, Any]:
    """One completed yes/no run of `n` results (suite of n/3 statements x 3 variants), written
    through `Store.append_results` in chunks of 65,536 rows, or `write_results` without it."""
    body = f"""
    import json, random
    from llmscope.engine.types import Item, Result
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
    bulk = hasattr(s, "append_results")
    rng = random.Random(0)
    CH = 65536
    call_wall = call_cpu = 0.0
    for k in range(0, n, CH):
        rows = range(k, min(n, k + CH))
        py = [rng.random() for _ in rows]
        gold = ["yes" if (i // 3) % 2 else "no" for i in rows]
        pred = ["yes" if p > 0.5 else "no" for p in py]
        top = [[{{"token": f" t{{j}}", "id": 100 + j, "prob": p / (j + 2)}} for j in range(20)] for p in py]
        t, c = time.perf_counter(), time.process_time()
        if bulk:
            s.append_results("synthetic", {{
                "item_id": [f"s{{i // 3:07d}}" for i in rows], "variant": [f"q{{i % 3 + 1}}" for i in rows],
                "prompt": [f"Consider the statement number {{i // 3}}. Do you agree?" for i in rows],
                "probs": [json.dumps({{"yes": p * 0.9, "no": (1 - p) * 0.9}}) for p in py],
                "p_yes": [p * 0.9 for p in py], "p_no": [(1 - p) * 0.9 for p in py], "other": [0.1] * len(py),
                "top_tokens": [json.dumps(x) for x in top], "prediction": pred, "gold": gold,
                "correct": [float(a == b) for a, b in zip(pred, gold)], "confidence": [max(p, 1 - p) for p in py],
                "n_tokens": [60] * len(py), "latency_ms": [12.5] * len(py),
            }}, start_seq=k)
        else:
            s.write_results("synthetic", [
                Result(item_id=f"s{{i // 3:07d}}", variant=f"q{{i % 3 + 1}}",
                       prompt=f"Consider the statement number {{i // 3}}. Do you agree?",
                       probs={{"yes": p * 0.9, "no": (1 - p) * 0.9}}, other=0.1, top_tokens=tt,
                       prediction=pr, gold=g, correct=float(pr == g), confidence=max(p, 1 - p),
                       n_tokens=60, latency_ms=12.5)
                for i, p, tt, pr, g in zip(rows, py, top, pred, gold)], start_seq=k)
        call_wall += time.perf_counter() - t
        call_cpu += time.process_time() - c
    s.update_run("synthetic", status="completed", n_done=n)
    s.close()
    _done(rows=n, call_wall=call_wall, call_cpu=call_cpu, api="append_results" if bulk else "write_results")
    """
    return _child(body, tree)


def report_step(db: Path, tree: Path) -> dict[str, Any]:
    """`llmscope report` over every run of the file (output discarded), cold: the metrics
    cache beside the file (`<db>.metrics.sqlite`) is deleted first."""
    Path(str(db) + ".metrics.sqlite").unlink(missing_ok=True)
    body = f"""
    import contextlib, io
    from llmscope.cli import main
    buf = io.StringIO()
    t, c = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(buf):
        rc = main(["report", "--db", {str(db)!r}])
    _done(rc=rc, chars=len(buf.getvalue()), call_wall=time.perf_counter() - t, call_cpu=time.process_time() - c)
    """
    return _child(body, tree)


def flush_step(tree: Path, rows: int) -> dict[str, Any]:
    """`Store.write_results` in batches of the run loop's flush size (bench.store_bench's
    `write_rate`: yes/no rows with 20 top tokens, until the file is closed)."""
    from llmscope.engine.runner import FLUSH_ROWS

    from .store_bench import _child_rate

    wall, cpu = _child_rate(None if tree == ROOT else tree, rows, FLUSH_ROWS)
    return {"rows_s": wall, "rows_cpu_s": cpu, "batch": FLUSH_ROWS, "rows": rows}


def dashboard_step(db: Path, run_id: str, scrolls: int, tree: Path) -> dict[str, Any]:
    """Open a run's dashboard headless: first frame, numbers shown, list scroll latency."""
    body = f"""
    import asyncio, statistics
    from llmscope.tui.app import LlmscopeApp
    try:
        from llmscope.tui.screens import DashboardScreen
    except ImportError:  # one module per screen
        from llmscope.tui.screens.dashboard import DashboardScreen
    from llmscope.tui.widgets import ItemList

    def text(app):
        return "\\n".join("".join(seg.text for seg in s) for s in app.screen._compositor.render_strips())

    async def go():
        app = LlmscopeApp({str(db)!r})
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.pause()
            t0 = time.perf_counter()
            app.push_screen(DashboardScreen({run_id!r}))
            first = listed = None
            while time.perf_counter() - t0 < 900:
                await pilot.pause(0.005)
                if isinstance(app.screen, DashboardScreen):
                    txt = text(app)
                    # the first frame with data: the run's row counts ("87048/87048 results")
                    if first is None and "results" in txt:
                        first = time.perf_counter() - t0
                    if listed is None and app.screen.query_one(ItemList).n_total:
                        listed = time.perf_counter() - t0
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
            return dict(first_frame=first, list_shown=listed, numbers=numbers, listed=lst.n_total,
                        scroll_median_ms=1000 * statistics.median(lat), scroll_max_ms=1000 * max(lat),
                        resort_ms=1000 * resort)
    _done(**asyncio.run(go()))
    """
    return _child(body, tree)


def _fmt(m: dict[str, Any] | None, key: str, unit: str = "", digits: int = 2) -> str:
    if m is None or m.get(key) is None:
        return "-"
    return f"{m[key]:,.{digits}f}{unit}"


def _safe(step: Any, *args: Any) -> dict[str, Any] | None:
    """A step of the old code may not run against this machine's data; say so, keep going."""
    try:
        return dict(step(*args))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"  ({step.__name__} failed: {str(e).strip().splitlines()[-1][:200]})", flush=True)
        return None


def measure(version: str, tree: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Every step on one version of the code, on a database that version wrote."""
    db = work / f"{version}.duckdb"
    db.unlink(missing_ok=True)
    figs: dict[str, Any] = {}
    if args.worldsense:
        figs["write"] = _safe(import_step, db, args.worldsense, tree)
    else:
        figs["write"] = _safe(synthetic_step, db, args.n, tree)
    print(f"{version}: data written {_fmt(figs['write'], 'call_wall')} s", flush=True)
    run_id = "synthetic"
    if args.worldsense and figs["write"]:
        import duckdb

        con = duckdb.connect(str(db), read_only=True)
        r = con.execute("SELECT run_id FROM runs ORDER BY model LIMIT 1").fetchone()
        con.close()
        run_id = str(r[0]) if r else ""
    if args.flush_rows and not args.report_only:
        figs["flush"] = _safe(flush_step, tree, args.flush_rows)
        print(
            f"{version}: write_results at the flush size {_fmt(figs['flush'], 'rows_s', digits=0)} rows/s",
            flush=True,
        )
    if figs["write"]:
        reps = []
        for _ in range(args.report_rounds):
            r = _safe(report_step, db, tree)
            print(
                f"{version}: report {_fmt(r, 'call_wall')} s wall, {_fmt(r, 'call_cpu')} s CPU "
                f"(whole process {_fmt(r, 'proc_wall')} s wall, {_fmt(r, 'proc_cpu')} s CPU; "
                f"load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
            if r:
                reps.append(r)
        # the round with the median CPU time (the wall time follows the machine's load)
        figs["report"] = (
            sorted(reps, key=lambda r: r["call_cpu"])[(len(reps) - 1) // 2] if reps else None
        )
    if figs["write"] and not args.report_only:
        figs["dash"] = _safe(dashboard_step, db, run_id, args.scrolls, tree)
        print(f"{version}: dashboard {_fmt(figs['dash'], 'numbers')} s", flush=True)
    if not args.keep:
        db.unlink(missing_ok=True)
        Path(str(db) + ".wal").unlink(missing_ok=True)
    return figs


def table(
    before: dict[str, Any] | None, after: dict[str, Any], worldsense: bool
) -> list[tuple[str, str, str]]:
    b = before or {}
    rows: list[tuple[str, str, str]] = []

    def rate(m: dict[str, Any] | None, key: str) -> str:
        if not m or not m.get(key):
            return "-"
        return f"{m['rows'] / m[key]:,.0f}"

    w_b, w_a = b.get("write"), after.get("write")
    what = "import" if worldsense else "write (store bulk API)"
    n_rows = (w_a or w_b or {}).get("rows", 0)
    rows.append(
        (f"{what}: {n_rows:,} rows, rows/s wall", rate(w_b, "call_wall"), rate(w_a, "call_wall"))
    )
    rows.append((f"{what}: rows/s CPU", rate(w_b, "call_cpu"), rate(w_a, "call_cpu")))
    rows.append(
        (f"{what}: peak memory MB", _fmt(w_b, "peak_mb", digits=0), _fmt(w_a, "peak_mb", digits=0))
    )

    def add(label: str, section: str, key: str, digits: int = 2) -> None:
        """A row of `section`'s `key`, before and after."""
        rows.append(
            (
                label,
                _fmt(b.get(section), key, digits=digits),
                _fmt(after.get(section), key, digits=digits),
            )
        )

    flush = after.get("flush") or b.get("flush")
    if flush:
        add(
            f"write_results, batches of {flush.get('batch', 0):,} (flush size): rows/s wall",
            "flush",
            "rows_s",
            0,
        )
        add("write_results at the flush size: rows/CPU-s", "flush", "rows_cpu_s", 0)
    add("report over all runs (cold), s wall", "report", "call_wall")
    add("report, s CPU", "report", "call_cpu")
    add("report, whole process (start-up too), s wall", "report", "proc_wall")
    add("report, whole process, s CPU", "report", "proc_cpu")
    add("report peak memory MB", "report", "peak_mb", 0)
    add("dashboard first frame s", "dash", "first_frame")
    add("dashboard failing list shown s", "dash", "list_shown")
    add("dashboard numbers shown s", "dash", "numbers")
    add("dashboard peak memory MB", "dash", "peak_mb", 0)
    listed = (after.get("dash") or b.get("dash") or {}).get("listed") or 0
    add(f"list scroll per key, ms median ({listed:,} rows)", "dash", "scroll_median_ms", 0)
    add("list scroll per key, ms max", "dash", "scroll_max_ms", 0)
    add("list re-sort ms", "dash", "resort_ms", 0)
    return rows


# the scale targets for studies this bench checks, on this machine as it is
REPORT_TARGET_S = 3.0  # `llmscope report` over 1M yes/no rows, cold
STORE_TARGET_ROWS_S = 150_000  # write_results at the run loop's flush size


def target_lines(after: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """One line per target: the figure of the working tree and whether it is met."""
    out = ["targets (working tree):"]
    rep = after.get("report")
    if rep and not args.worldsense:
        verdict = (
            ("met" if rep["call_wall"] < REPORT_TARGET_S else "NOT met")
            if args.n == 1_000_000
            else f"not judged: this run has {args.n:,} rows"
        )
        out.append(
            f"  report over 1M yes/no rows, cold < {REPORT_TARGET_S:g} s: {rep['call_wall']:.2f} s wall "
            f"({rep['call_cpu']:.2f} s CPU; whole process {rep['proc_wall']:.2f} s wall, "
            f"{rep['proc_cpu']:.2f} s CPU) {verdict}"
        )
    fl = after.get("flush")
    if fl:
        ok = fl["rows_s"] >= STORE_TARGET_ROWS_S
        out.append(
            f"  store >= {STORE_TARGET_ROWS_S:,} rows/s at the flush size ({fl['batch']:,}): "
            f"{fl['rows_s']:,.0f} rows/s wall ({fl['rows_cpu_s']:,.0f} rows/CPU-s) {'met' if ok else 'NOT met'}"
        )
    st = after.get("study")
    if st:
        from .study_matrix import target_line

        out.append(
            "  "
            + target_line(st, args.study_runs, args.study_rows)
            + f" (CPU: warm {st['warm']['cpu_s']:.2f} s, cold {st['cold']['cpu_s']:.2f} s)"
        )
        if "cold_before" in st:
            cb = st["cold_before"]
            out.append(
                f"    study matrix cold with {args.before}: {cb['wall_s']:.2f} s wall, {cb['cpu_s']:.2f} s CPU"
            )
    elif not args.study:
        out.append(
            "  study matrix < 2 s: not measured here (--study, or python -m bench.study_matrix)"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument(
        "--n", type=int, default=1_000_000, help="results in the synthetic run (default 1,000,000)"
    )
    ap.add_argument(
        "--worldsense",
        type=Path,
        nargs="?",
        metavar="DIR",
        const=ROOT.parent / "shared" / "data" / "worldsense" / "test_set",
        help="use the WorldSense import instead (default DIR: the shared test set)",
    )
    ap.add_argument(
        "--before",
        default=BEFORE_REF,
        metavar="REF",
        help=f"git commit whose code is 'before' (default {BEFORE_REF})",
    )
    ap.add_argument("--skip-before", action="store_true", help="measure the current code only")
    ap.add_argument(
        "--scrolls", type=int, default=40, help="list key presses timed (pagedown, every 10th end)"
    )
    ap.add_argument("--keep", type=Path, help="keep the databases in this folder")
    ap.add_argument("--json", type=Path, help="also write every figure to this file")
    ap.add_argument(
        "--flush-rows",
        type=int,
        default=100_000,
        metavar="N",
        help="rows written through write_results at the run loop's flush size (0: skip)",
    )
    ap.add_argument(
        "--study",
        action="store_true",
        help="also time the study matrix (bench.study_matrix): cold with --before's code and the "
        "working tree, warm with the working tree",
    )
    ap.add_argument("--study-runs", type=int, default=10)
    ap.add_argument("--study-rows", type=int, default=87_048)
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="write the data and time the report only (no flush-size or dashboard step)",
    )
    ap.add_argument(
        "--report-rounds",
        type=int,
        default=1,
        metavar="N",
        help="time the report N times per version; the table shows the median-CPU round",
    )
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("--n must be at least 1")
    if args.worldsense and not (args.worldsense / "trials.jsonl.bz2").is_file():
        print(
            f"no WorldSense test set at {args.worldsense} (trials.jsonl.bz2); omit --worldsense for a synthetic run",
            file=sys.stderr,
        )
        return 2
    work = Path(tempfile.mkdtemp(prefix="llmscope-scale-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    before, old = None, None
    if not args.skip_before:
        try:
            old = extract_tree(args.before, work / "before-code")
        except subprocess.CalledProcessError as e:
            print(
                f"--before {args.before}: cannot read that commit from git ({e.stderr.decode().strip()[:200]})",
                file=sys.stderr,
            )
            return 2
        before = measure("before", old, work, args)
    after = measure("after", ROOT, work, args)
    if args.study:
        from .study_matrix import measure as study_measure

        after["study"] = study_measure(args.study_runs, args.study_rows, work / "study", old)
        print(
            f"after: study matrix cold {after['study']['cold']['wall_s']:.2f} s, "
            f"warm {after['study']['warm']['wall_s']:.2f} s",
            flush=True,
        )
    load = os.getloadavg()
    print(
        f"\n{'WorldSense import' if args.worldsense else f'synthetic run of {args.n:,} results'}; "
        f"before = {'-' if before is None else args.before}, after = working tree; "
        f"load average {load[0]:.1f} on {os.cpu_count()} CPUs"
    )
    rows = table(before, after, bool(args.worldsense))
    w = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{w}}  {'before':>12}  {'after':>12}")
    for label, b, a in rows:
        print(f"{label:<{w}}  {b:>12}  {a:>12}")
    for line in target_lines(after, args):
        print(line)
    if args.keep:
        print(f"(databases in {work})")
    else:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(
            json.dumps({"before_ref": args.before, "before": before, "after": after}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
