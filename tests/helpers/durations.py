"""Sum the per-test times that tests/conftest.py writes with LLMSCOPE_TEST_TIMES=FILE.

    LLMSCOPE_TEST_TIMES=/tmp/t.jsonl python -m pytest -q -p no:cacheprovider
    python -m tests.helpers.durations /tmp/t.jsonl [--top 30]

CPU seconds (this process plus waited-for subprocesses) compare across runs on a loaded
machine; wall seconds only on an idle one.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    recs = [json.loads(line) for line in args.file.read_text().splitlines() if line.strip()]
    per_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in recs:
        acc = per_file[r["test"].split("::")[0]]
        acc[0] += r["wall_s"]
        acc[1] += r["cpu_s"] + r["child_cpu_s"]
        acc[2] += 1

    def cpu(r: dict) -> float:
        return float(r["cpu_s"] + r["child_cpu_s"])

    tot_w, tot_c = sum(r["wall_s"] for r in recs), sum(cpu(r) for r in recs)
    n_tests = sum("::(fixtures torn down" not in r["test"] for r in recs)
    print(f"{n_tests} tests: wall {tot_w:.0f} s, cpu {tot_c:.0f} s")
    print(f"\n{'cpu_s':>8} {'wall_s':>8}  test (heaviest {args.top})")
    for r in sorted(recs, key=cpu, reverse=True)[: args.top]:
        print(f"{cpu(r):8.1f} {r['wall_s']:8.1f}  {r['test']}")
    print(f"\n{'cpu_s':>8} {'wall_s':>8} {'n':>4}  file")
    for f, (w, c, n) in sorted(per_file.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{c:8.1f} {w:8.1f} {int(n):4d}  {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
