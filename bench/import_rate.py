"""Import rate of `llmscope import worldsense` for a few results files, suite stored first.

    python -m bench.import_rate [--worldsense DIR] [FILE ...]

Prints rows/s (wall and CPU) until the file is closed. To compare with an older llmscope, run
the same script with that version first on PYTHONPATH, e.g. for the code before schema 4:

    git archive 444d340 | tar -x -C /tmp/old/src
    mkdir -p /tmp/old/pkg && cp -r /tmp/old/src/llmscope /tmp/old/pkg/llmscope
    for d in store engine data analysis tui; do cp -r /tmp/old/src/$d /tmp/old/pkg/llmscope/$d; done
    (cd /tmp && PYTHONPATH=/tmp/old/pkg python /path/to/bench/import_rate.py)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "worldsense" / "test_set"
DEFAULT_FILES = ["basic___GPT4___results.jsonl", "basic___GPT3.5___results.jsonl"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worldsense", type=Path, default=DEFAULT_DIR)
    ap.add_argument("files", nargs="*", default=DEFAULT_FILES)
    args = ap.parse_args(argv)
    from llmscope import importers
    from llmscope.data.suites import load_suite
    from llmscope.store.db import SCHEMA_VERSION, Store

    d = Path(tempfile.mkdtemp(prefix="llmscope-import-rate-"))
    (d / "results").mkdir()
    os.symlink(args.worldsense / "trials.jsonl.bz2", d / "trials.jsonl.bz2")
    for f in args.files:
        os.symlink(args.worldsense / "results" / f, d / "results" / f)
    s = Store(str(d / "db.duckdb"))
    importers._store_suite(s, load_suite("worldsense", d))  # not timed: the same bz2 read in every version
    t, c = time.perf_counter(), time.process_time()
    importers.import_worldsense(s, d)
    n = s.execute("SELECT count(*) FROM results").fetchone()[0]
    s.close()
    w, cpu = time.perf_counter() - t, time.process_time() - c
    print(f"schema {SCHEMA_VERSION}: {n} rows in {w:.2f} s wall ({n / w:,.0f} rows/s), "
          f"{cpu:.2f} s CPU ({n / cpu:,.0f} rows/s CPU) (target >= 50,000)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
