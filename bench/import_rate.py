"""Import rate of `llmscope import worldsense`, before and after, in one run.

    python -m bench.import_rate [--worldsense DIR] [--before REF] [--rounds 2] [--fresh] [FILE ...]

The suite is stored first (not timed: the same bz2 read in every version); then the results
files (default: two, 174,096 rows) are imported until the file is closed (final checkpoint
included), by the code of git `--before` (default 69e8d33, before the bulk write path) and by
the working tree, each in a fresh process on its own database, interleaved, best of `--rounds`.
`--fresh`: the way a user arrives instead: the whole `import worldsense` into a new file, the
trials' read and store timed too (files default to all four, 348,192 rows).
Prints rows/s by wall time and per CPU second (user + system of the process, all threads: the
fairer figure on a shared machine), the ratios, and whether both versions stored the same rows
(`EXCEPT ALL` both ways over every results column but `written_at`, the prompt as the readers
return it: the row's own, else its item's text; and the runs' counts).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT.parent / "shared" / "data" / "worldsense" / "test_set"
DEFAULT_FILES = ["basic___GPT4___results.jsonl", "basic___GPT3.5___results.jsonl"]
ALL_FILES = [
    *DEFAULT_FILES,
    "basic___Llama2-chat___results.jsonl",
    "basic___Llama2-FT+1M___results.jsonl",
]
BEFORE_REF = "69e8d33"


def measure(
    directory: Path, files: list[str], work: Path, fresh: bool = False
) -> tuple[int, float, float]:
    """(rows, wall s, CPU s) of importing `files` into a new database under `work` (`fresh`: the
    suite is stored inside the timed import too)."""
    import time

    from llmscope.data.suites import load_suite
    from llmscope.store.db import Store

    from .scale import worldsense_importer

    store_suite, import_worldsense = worldsense_importer()  # this tree's, or an older one's

    (work / "results").mkdir(parents=True)
    os.symlink(directory / "trials.jsonl.bz2", work / "trials.jsonl.bz2")
    for f in files:
        os.symlink(directory / "results" / f, work / "results" / f)
    if not fresh:
        s = Store(str(work / "db.duckdb"))
        store_suite(s, load_suite("worldsense", work))
        s.close()
    t, c = time.perf_counter(), time.process_time()
    s = Store(str(work / "db.duckdb"))
    import_worldsense(s, work)
    n = s.execute("SELECT count(*) FROM results").fetchone()[0]
    s.close()
    return n, time.perf_counter() - t, time.process_time() - c


def _child(
    tree: Path | None, directory: Path, files: list[str], work: Path, fresh: bool = False
) -> tuple[int, float, float]:
    from .scale import call_in_tree

    n, w, c = call_in_tree(
        tree,
        "from pathlib import Path\nfrom bench.import_rate import measure",
        f"measure(Path({str(directory)!r}), {files!r}, Path({str(work)!r}), {fresh!r})",
    )
    return int(n), float(w), float(c)


def same_rows(a: Path, b: Path) -> bool:
    """Whether two imported databases hold the same results rows and run counts."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
    cols = ", ".join(
        "coalesce(r.prompt, i.text)" if r[0] == "prompt" else f"r.{r[0]}"
        for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = 'a' AND table_name = 'results' "
            "AND column_name <> 'written_at' ORDER BY column_index"
        ).fetchall()
    )
    runs = "run_id, suite_id, model, n_total, n_done, n_errors, status"

    def results(
        db: str,
    ) -> str:  # the prompt as every Store reader returns it (store.result_queries.RESULT_COLUMNS)
        return (
            f"SELECT {cols} FROM {db}.results r LEFT JOIN {db}.runs u ON u.run_id = r.run_id "
            f"LEFT JOIN {db}.items i ON i.suite_id = u.suite_id AND i.item_id = r.item_id"
        )

    queries = [f"{results(x)} EXCEPT ALL {results(y)}" for x, y in (("a", "b"), ("b", "a"))]
    queries += [
        f"SELECT {runs} FROM {x}.runs EXCEPT ALL SELECT {runs} FROM {y}.runs"
        for x, y in (("a", "b"), ("b", "a"))
    ]
    return not any(con.execute(f"SELECT count(*) FROM ({q})").fetchall()[0][0] for q in queries)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worldsense", type=Path, default=DEFAULT_DIR)
    ap.add_argument(
        "--before", default=BEFORE_REF, metavar="REF", help=f"git commit (default {BEFORE_REF})"
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="time the whole import into a new file, trials included",
    )
    ap.add_argument("files", nargs="*")
    args = ap.parse_args(argv)
    if not args.files:
        args.files = ALL_FILES if args.fresh else DEFAULT_FILES
    from .scale import extract_tree

    tmp = Path(tempfile.mkdtemp(prefix="llmscope-import-rate-"))
    tree = extract_tree(args.before, tmp / "before-code")
    runs: dict[str, list[tuple[int, float, float]]] = {"before": [], "after": []}
    dbs: dict[str, Path] = {}
    for k in range(args.rounds):
        for name, t in (("before", tree), ("after", None)):
            work = tmp / f"{name}{k}"
            runs[name].append(_child(t, args.worldsense, args.files, work, args.fresh))
            dbs[name] = work / "db.duckdb"
    figures = {}
    for name, rs in runs.items():
        n = rs[0][0]
        figures[name] = (n, n / min(r[1] for r in rs), n / min(r[2] for r in rs))
        print(
            f"{name} ({args.before if name == 'before' else 'working tree'}): {n:,} rows, "
            f"{figures[name][1]:,.0f} rows/s wall, {figures[name][2]:,.0f} rows/CPU-s "
            f"(best of {len(rs)}; seconds wall {', '.join(f'{r[1]:.2f}' for r in rs)}, "
            f"CPU {', '.join(f'{r[2]:.2f}' for r in rs)})"
        )
    b, a = figures["before"], figures["after"]
    print(
        f"ratio after/before: {a[1] / b[1]:.2f}x wall, {a[2] / b[2]:.2f}x CPU (target >= 50,000 rows/s); "
        f"same rows: {same_rows(dbs['before'], dbs['after'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
