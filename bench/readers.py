"""A writer's rows/s with and without a reader polling `llmscope report` every second, and the
reader's latency, in one run (store/snapshot.py: readers copy the file between two commits).

    python -m bench.readers [--seconds 20] [--batch 1024] [--poll 1.0]

The writer is a process writing yes/no-shaped rows (bench/store_bench.py's, 20 top tokens) in
commits of `--batch` rows as fast as the store allows: a store-bound writer, the worst case for
a reader's copy (a real run commits about once a second). Two phases of `--seconds` each, on
fresh files: the writer alone, then the writer with `llmscope report --json` started every
`--poll` seconds (when the previous one has finished) from another process, then the writer with
a reader that only takes the copy and counts the rows, every `--copy-poll` seconds (the
mechanism's own cost, without the report's CPU). Printed: the writer's rows/s in each phase (wall
and per CPU second: on a small shared machine the report's CPU competes with the writer's), the
time its commits waited for a reader's copy, and the readers' latencies.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WRITER = """
import json, os, sys, time
sys.path.insert(0, {root!r})
from bench.store_bench import _rows
from llmscope.store.db import Store
path, seconds, batch = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
st = Store(path)
st.create_run({{"run_id": "bench", "suite_id": "bench", "suite_name": "bench", "task": "yesno",
               "model": "bench-model", "backend": "bench", "n_total": 10**8, "owner_pid": os.getpid()}})
st.checkpoint()
print("ready", flush=True)
rows, seq, t0, c0 = 0, 0, time.perf_counter(), time.process_time()
while time.perf_counter() - t0 < seconds:
    seq += st.write_results("bench", _rows(batch, seq), seq)
    rows += batch
    st._maybe_checkpoint()
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
waited = st._lock.waited_s
st.update_run("bench", status="completed")
st.checkpoint()
st.close()
print(json.dumps({{"rows": rows, "seconds": dt, "cpu_s": cpu, "waited_s": waited}}), flush=True)
"""


# The copy alone: a snapshot read of the stored count (no metrics), as often as asked.
COPIER = """
import sys, time
from llmscope.store.db import Store
db, poll = sys.argv[1], float(sys.argv[2])
while True:
    t = time.perf_counter()
    st = Store(db, read_only=True, snapshot=True)
    n = st.execute("SELECT count(*) FROM results").fetchone()[0]
    free = st.snapshot_of is None
    st.close()
    print(time.perf_counter() - t, n, flush=True)
    if free:
        break
    time.sleep(max(0.0, poll - (time.perf_counter() - t)))
"""


def phase(
    seconds: float, batch: int, poll: float | None, reader: str = "report"
) -> dict[str, object]:
    folder = tempfile.mkdtemp(prefix="llmscope-readers-bench-")
    db = os.path.join(folder, "w.duckdb")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}
    w = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(root=str(ROOT)), db, str(seconds), str(batch)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert w.stdout is not None and w.stdout.readline().strip() == "ready"
    latencies: list[float] = []
    sizes: list[int] = []
    failed = 0
    if reader == "copy" and poll is not None:
        c = subprocess.run(
            [sys.executable, "-c", COPIER, db, str(poll)], capture_output=True, text=True, env=env
        )
        latencies = [float(line.split()[0]) for line in c.stdout.splitlines() if line.strip()]
        failed = int(c.returncode != 0)
        poll = None
    while poll is not None and w.poll() is None:
        t = time.perf_counter()
        sizes.append(sum(os.path.getsize(db + s) for s in ("", ".wal") if os.path.exists(db + s)))
        r = subprocess.run(
            [sys.executable, "-m", "llmscope", "report", "--db", db, "--json"],
            capture_output=True,
            text=True,
            env=env,
        )
        latencies.append(time.perf_counter() - t)
        failed += r.returncode != 0
        time.sleep(max(0.0, poll - (time.perf_counter() - t)))
    out = json.loads(w.communicate()[0].strip().splitlines()[-1])
    return {
        **out,
        "rows_s": out["rows"] / out["seconds"],
        "cpu_rows_s": out["rows"] / out["cpu_s"],
        "latencies": latencies,
        "sizes": sizes,
        "failed": failed,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--poll", type=float, default=1.0)
    ap.add_argument("--copy-poll", type=float, default=0.1, help="the copy-only reader's interval")
    a = ap.parse_args(argv)
    alone = phase(a.seconds, a.batch, None)
    read = phase(a.seconds, a.batch, a.poll)
    copy = phase(a.seconds, a.batch, a.copy_poll, "copy")

    def writer(label: str, p: dict[str, object]) -> None:
        slower = 100 * (1 - float(p["rows_s"]) / float(alone["rows_s"]))  # type: ignore[arg-type]
        print(
            f"writer {label:<24} {p['rows_s']:>9,.0f} rows/s wall ({slower:+.1f}% vs alone), "
            f"{p['cpu_rows_s']:,.0f} per CPU s; {p['rows']:,} rows in {p['seconds']:.1f} s; "
            f"commits waited {p['waited_s']:.3f} s for copies"
        )

    writer("alone:", alone)
    writer(f"+ report every {a.poll:g} s:", read)
    writer(f"+ copy every {a.copy_poll:g} s:", copy)
    for label, p in (
        (f"report --json (process start included), every {a.poll:g} s", read),
        (f"snapshot read of the count, every {a.copy_poll:g} s", copy),
    ):
        lat = p["latencies"]
        assert isinstance(lat, list)
        if lat:
            print(
                f"reader {label}: {len(lat)} reads, {p['failed']} failed; latency median "
                f"{statistics.median(lat):.3f} s, max {max(lat):.3f} s"
            )
    sizes = read["sizes"]
    assert isinstance(sizes, list)
    if sizes:
        print(f"file + wal up to {max(sizes) / 2**20:.0f} MiB; {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
