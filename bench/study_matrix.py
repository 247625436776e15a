"""How long a study's matrix takes to read: `llmscope.studies.store.study_cells` over big runs.

    python -m bench.study_matrix [--runs 10] [--rows 87048] [--keep DIR] [--before REF]

Builds one database with `--runs` completed yes/no runs of `--rows` results each (a suite of
rows/3 statements x 3 variants, written through `Store.append_results`; no top tokens, which no
headline metric reads), records them as the cells of one study (2 suites' worth of labels x
models), then times `study_cells` in fresh child processes: first with no metrics cache (every
cell's headline computed by the pipeline), then again after every run's full metrics were
computed and cached beside the file (as `llmscope report` leaves them for the TUI or a second
`study status`), and with `metrics=False` (state and counts only).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BUILD = """
import json, random, time
from pathlib import Path
from llmscope.engine.types import Item
from llmscope.store.db import Store
from llmscope.studies.spec import Cell, ModelEntry, Study, SuiteEntry
from llmscope.studies.store import record_cell, record_study, tag_run
db, runs, n = {db!r}, {runs}, {rows}
t0 = time.perf_counter()
s = Store(db); s.execute("SET enable_progress_bar = false")
m = (n + 2) // 3
items = [Item(item_id=f"s{{i:07d}}", fields={{"category": f"c{{i % 7}}"}}, gold="yes" if i % 2 else "no",
              options=["yes", "no"], text=f"Statement number {{i}}.") for i in range(m)]
spec = {{"name": "synthetic", "task": "yesno", "templates": {{"q1": "{{text}}", "q2": "{{text}}", "q3": "{{text}}"}}}}
s.add_suite("synthetic@1", "synthetic", "yesno", spec, "bench", items)
suite = SuiteEntry("synthetic", "synthetic")
models = [ModelEntry(f"model{{k}}", f"hf:model{{k}}") for k in range(runs)]
cells = [Cell(f"synthetic | {{me.label}}", k, suite, me, {{}}, {{}}, {{}}) for k, me in enumerate(models)]
study = Study("bench", Path("bench.yaml"), None, [suite], models, [], cells)
record_study(s, study)
for k in range(runs):
    rid = f"run{{k:02d}}"
    s.create_run({{"run_id": rid, "suite_id": "synthetic@1", "suite_name": "synthetic", "task": "yesno",
                   "model": f"model{{k}}", "backend": "bench", "n_total": n, "status": "running"}})
    rng = random.Random(k)
    CH = 65536
    for j in range(0, n, CH):
        rows = range(j, min(n, j + CH))
        py = [rng.random() for _ in rows]
        gold = ["yes" if (i // 3) % 2 else "no" for i in rows]
        pred = ["yes" if p > 0.5 else "no" for p in py]
        s.append_results(rid, {{
            "item_id": [f"s{{i // 3:07d}}" for i in rows], "variant": [f"q{{i % 3 + 1}}" for i in rows],
            "prompt": [f"Statement number {{i // 3}}." for i in rows],
            "probs": [json.dumps({{"yes": p * 0.9, "no": (1 - p) * 0.9}}) for p in py],
            "p_yes": [p * 0.9 for p in py], "p_no": [(1 - p) * 0.9 for p in py], "other": [0.1] * len(py),
            "prediction": pred, "gold": gold, "correct": [float(a == b) for a, b in zip(pred, gold)],
            "confidence": [max(p, 1 - p) for p in py],
        }}, start_seq=j)
    s.update_run(rid, status="completed", n_done=n, n_errors=0)
    tag_run(s, rid, "bench", cells[k].key)
    record_cell(s, "bench", cells[k].key, "done", rid)
s.checkpoint(); s.close()
print(json.dumps({{"build_s": time.perf_counter() - t0}}))
"""

READ = """
import json, time
from llmscope.store.db import Store
from llmscope.studies.store import study_cells
t0, c0 = time.perf_counter(), time.process_time()
s = Store({db!r}, read_only=True)
rows = study_cells(s, "bench", metrics={metrics})
s.close()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({{"wall_s": wall, "cpu_s": cpu, "cells": len(rows),
                  "with_metric": sum(r.value is not None for r in rows), "first": rows[0].to_dict()}}))
"""

# What `llmscope report` leaves beside the file: every run's full metrics in the metrics cache
# (the cold read computes headlines only and stores nothing).
FILL = """
import json, time
from llmscope.analysis.metrics import run_metrics
from llmscope.store.db import Store
t0 = time.perf_counter()
s = Store({db!r}, read_only=True)
for (rid,) in s.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall():
    run_metrics(s, s.get_run(rid))
s.close()
print(json.dumps({{"fill_s": time.perf_counter() - t0}}))
"""

# target: the study matrix over 10 runs of 87k rows renders in under 2 s
TARGET_S = 2.0


def _child(code: str, tree: Path | None = None) -> dict:
    """Run `code` in a fresh interpreter: with `tree` (an older package extracted from git,
    bench.scale.extract_tree) first on sys.path, else the working tree's code."""
    head = ""
    if tree is not None:
        head = (
            f"import sys; sys.path.insert(0, {str(tree)!r}); import llmscope\n"
            f"assert llmscope.__file__.startswith({str(tree)!r}), llmscope.__file__\n"
        )
    out = subprocess.run(
        [sys.executable, "-c", head + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def measure(runs: int, rows: int, folder: Path, before: Path | None = None) -> dict[str, dict]:
    """Build the study's database in ``folder`` and time `study_cells` cold, warm and without
    metrics, each in a fresh process (figures: wall_s, cpu_s, cells, with_metric, first).
    With ``before`` (an extracted older package) its cold read is timed first ("cold_before")
    on the same file, and its metrics cache removed again."""
    folder.mkdir(parents=True, exist_ok=True)
    db = str(folder / "study.duckdb")
    for suffix in ("", ".wal", ".metrics.sqlite"):
        Path(db + suffix).unlink(missing_ok=True)
    out: dict[str, dict] = {"build": _child(BUILD.format(db=db, runs=runs, rows=rows))}
    if before is not None:
        out["cold_before"] = _child(READ.format(db=db, metrics=True), before)
        Path(db + ".metrics.sqlite").unlink(missing_ok=True)
    out["cold"] = _child(READ.format(db=db, metrics=True))
    out["fill"] = _child(FILL.format(db=db))
    for key, metrics in (("warm", True), ("counts", False)):
        out[key] = _child(READ.format(db=db, metrics=metrics))
    return out


def target_line(figs: dict[str, dict], runs: int, rows: int) -> str:
    """Whether the matrix renders within TARGET_S (warm: the metrics cache filled; cold: none)."""
    warm, cold = figs["warm"]["wall_s"], figs["cold"]["wall_s"]
    return (
        f"target: study matrix ({runs} runs x {rows:,} rows) < {TARGET_S:g} s: "
        f"warm {warm:.2f} s {'met' if warm < TARGET_S else 'NOT met'}; "
        f"cold {cold:.2f} s {'met' if cold < TARGET_S else 'NOT met'}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rows", type=int, default=87048)
    ap.add_argument("--keep", help="build the database in this folder and keep it")
    ap.add_argument(
        "--before", metavar="REF", help="also time the cold read with the code of git REF"
    )
    args = ap.parse_args(argv)
    folder = (
        Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="llmscope-study-bench-"))
    )
    t = time.perf_counter()
    tree = None
    if args.before:
        from .scale import extract_tree

        tree = extract_tree(args.before, Path(tempfile.mkdtemp(prefix="llmscope-study-before-")))
    figs = measure(args.runs, args.rows, folder, tree)
    print(
        f"built {args.runs} runs x {args.rows} rows in {figs['build']['build_s']:.1f} s ({folder}); "
        f"every run's full metrics cached in {figs['fill']['fill_s']:.1f} s"
    )
    for label, key in (
        *([(f"cold with {args.before} (no metrics cache)", "cold_before")] if args.before else []),
        ("cold (no metrics cache)", "cold"),
        ("warm (metrics cache)", "warm"),
        ("state and counts only", "counts"),
    ):
        r = figs[key]
        print(
            f"study_cells {label}: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU for {r['cells']} cells "
            f"({r['with_metric']} with a headline metric); first: {r['first']['metric']} "
            f"{r['first']['value']} {r['first']['ci95']}"
        )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(target_line(figs, args.runs, args.rows))
    print(f"total {time.perf_counter() - t:.1f} s")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
