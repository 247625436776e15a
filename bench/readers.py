"""A writer's rows/s with and without a reader polling `llmscope report` every second, and the
reader's latency, in one run (store/snapshot.py: readers copy the file between two commits).

    python -m bench.readers [--seconds 20] [--batch 1024] [--poll 1.0]

The writer is a process writing yes/no-shaped rows (bench/store_bench.py's, 20 top tokens) in
commits of `--batch` rows as fast as the store allows: a store-bound writer, the worst case for
a reader's copy (a real run commits about once a second). Two phases of `--seconds` each, on
fresh files: the writer alone, then the writer with `llmscope report --json` started every
`--poll` seconds (when the previous one has finished) from another process. Printed: the
writer's rows/s in each phase, the time its commits waited for a reader's copy, and each
report's wall time (process start included) with its copy's size.
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
rows, seq, t0 = 0, 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    seq += st.write_results("bench", _rows(batch, seq), seq)
    rows += batch
    st._maybe_checkpoint()
dt = time.perf_counter() - t0
waited = st._lock.waited_s
st.update_run("bench", status="completed")
st.checkpoint()
st.close()
print(json.dumps({{"rows": rows, "seconds": dt, "waited_s": waited}}), flush=True)
"""


def phase(seconds: float, batch: int, poll: float | None) -> dict[str, object]:
    folder = tempfile.mkdtemp(prefix="llmscope-readers-bench-")
    db = os.path.join(folder, "w.duckdb")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}
    w = subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT)), db, str(seconds), str(batch)],
                         stdout=subprocess.PIPE, text=True, env=env)
    assert w.stdout is not None and w.stdout.readline().strip() == "ready"
    latencies: list[float] = []
    sizes: list[int] = []
    failed = 0
    while poll is not None and w.poll() is None:
        t = time.perf_counter()
        sizes.append(sum(os.path.getsize(db + s) for s in ("", ".wal") if os.path.exists(db + s)))
        r = subprocess.run([sys.executable, "-m", "llmscope", "report", "--db", db, "--json"],
                           capture_output=True, text=True, env=env)
        latencies.append(time.perf_counter() - t)
        failed += r.returncode != 0
        time.sleep(max(0.0, poll - (time.perf_counter() - t)))
    out = json.loads(w.communicate()[0].strip().splitlines()[-1])
    return {**out, "rows_s": out["rows"] / out["seconds"], "latencies": latencies, "sizes": sizes,
            "failed": failed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--poll", type=float, default=1.0)
    a = ap.parse_args(argv)
    alone = phase(a.seconds, a.batch, None)
    read = phase(a.seconds, a.batch, a.poll)
    lat = read["latencies"]
    assert isinstance(lat, list) and isinstance(read["sizes"], list)
    print(f"writer alone:        {alone['rows_s']:,.0f} rows/s ({alone['rows']:,} rows in {alone['seconds']:.1f} s)")
    print(f"writer with reader:  {read['rows_s']:,.0f} rows/s ({read['rows']:,} rows in {read['seconds']:.1f} s), "
          f"{100 * (1 - read['rows_s'] / alone['rows_s']):+.1f}% slower; its commits waited "  # type: ignore[operator]
          f"{read['waited_s']:.2f} s for readers' copies")
    if lat:
        print(f"reader (`report --json` every {a.poll:g} s): {len(lat)} reports, {read['failed']} failed; "
              f"latency median {statistics.median(lat):.2f} s, max {max(lat):.2f} s; "
              f"file + wal up to {max(read['sizes']) / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
