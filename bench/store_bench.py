"""Store write throughput and the store's share of a run's wall time.

    python -m bench.store_bench [--rows 100000] [--batch 4096] [--run-limit 243] [--before REF]

1. Rows per second through `Store.write_results`, in the run loop's batch size, with
   yes/no-shaped rows (probabilities, 20 top tokens, prompt, extra): the code of git `--before`
   (default 69e8d33, the store before the bulk write path; `schema3` for fecc4dd~1, the
   store's last schema-3 writer) and the working tree, each in fresh processes, interleaved;
   with `--without-top-tokens`, also the working tree on the same rows without top tokens
   (the ceiling of the rest of a write).
2. A real run (`commonsense-sample`, yesno task, Runner) on the tiny random-weight model
   from tests/helpers/tinymodel.py, so the model is as fast as it gets and the store's share is an
   upper bound; time inside `write_results` (writer thread) over the run's wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# target: the store keeps up with big runs at the run loop's flush size (engine/runner.py)
TARGET_ROWS_S = 150_000


def _rows(n: int, offset: int = 0) -> list[Any]:
    from llmscope.engine.types import Result

    rng = random.Random(offset)
    out = []
    for i in range(offset, offset + n):
        py = rng.random()
        top = [{"token": f" tok{j}", "id": 1000 + j, "prob": rng.random() / 20} for j in range(20)]
        out.append(
            Result(
                item_id=f"item{i // 3:06d}",
                variant=f"q{i % 3 + 1}",
                prompt=f'<|im_start|>user\nConsider the statement, "Statement number {i}." Do you agree?<|im_end|>',
                probs={"yes": py * 0.9, "no": (1 - py) * 0.9},
                other=0.1,
                top_tokens=top,
                prediction="yes" if py > 0.5 else "no",
                gold="yes",
                correct=float(py > 0.5),
                confidence=max(py, 1 - py),
                n_tokens=60,
                latency_ms=12.5,
                extra={"answer_token_counts": {"yes": 8, "no": 6}},
            )
        )
    return out


def write_rate(rows: int, batch: int, top_tokens: bool = True) -> tuple[float, float]:
    """Rows per second through `write_results` (rows prepared beforehand) until the file is
    closed (its final checkpoint included): by wall time and by this process's CPU time (all
    threads; the fairer figure on a shared machine), with the store of the llmscope imported
    (the working tree's, or an older tree's: `_child_rate`). `top_tokens=False`: the same rows
    without top tokens (what the rest of a write costs)."""
    from llmscope.store.db import Store

    d = tempfile.mkdtemp(prefix="llmscope-store-bench-")
    path = os.path.join(d, "s.duckdb")
    store = Store(path)
    data = _rows(rows)
    if not top_tokens:
        for r in data:
            r.top_tokens = None
    chunks = [data[i : i + batch] for i in range(0, rows, batch)]
    t0, c0 = time.perf_counter(), time.process_time()
    seq = 0
    for c in chunks:
        seq += store.write_results("bench-run", c, seq)
    n = store.count_results("bench-run")[0]
    store.close()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    assert n == rows, (n, rows)
    return rows / dt, rows / dc


def run_share(limit: int | None) -> tuple[float, float, int]:
    """(store seconds, run wall seconds, rows) of a tiny-model run of commonsense-sample."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from llmscope.data.suites import load_suite
    from llmscope.engine.hf import HFBackend
    from llmscope.engine.runner import Runner, RunPlan
    from llmscope.store.db import Store
    from tests.helpers.tinymodel import make_tiny_model, tiny_spec

    d = tempfile.mkdtemp(prefix="llmscope-store-bench-")
    model, tok = make_tiny_model(d, vocab="trained")
    backend = HFBackend(
        tiny_spec(d), model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=16
    )
    store = Store(os.path.join(d, "run.duckdb"))
    spent = [0.0]
    inner = store.write_results

    def timed(*a: Any, **k: Any) -> int:
        t = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t

    store.write_results = timed  # type: ignore[method-assign]
    plan = RunPlan(
        suite=load_suite("commonsense-sample"), model_label="tiny", model_arg=None, limit=limit
    )

    async def go() -> tuple[float, int]:
        runner = Runner(plan, backend, store)
        t = time.perf_counter()
        prog = await runner.run()
        wall = time.perf_counter() - t
        await backend.aclose()
        return wall, prog.done

    wall, done = asyncio.run(go())
    store.close()
    return spent[0], wall, done


ROOT = Path(__file__).resolve().parents[1]
BEFORE_REF = "69e8d33"  # schema 4, before the bulk write path
SCHEMA3_REF = "fecc4dd~1"  # the last commit whose store wrote schema 3 (`--before schema3`)


def _child_rate(
    tree: Path | None, rows: int, batch: int, top_tokens: bool = True
) -> tuple[float, float]:
    """`write_rate` in a fresh interpreter: with `tree` (an extracted older package) first on
    sys.path, else the working tree's code."""
    from .scale import call_in_tree

    call = f"write_rate({rows}, {batch}{'' if top_tokens else ', top_tokens=False'})"
    w, c = call_in_tree(tree, "from bench.store_bench import write_rate", call)
    return float(w), float(c)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument(
        "--batch",
        type=int,
        nargs="+",
        default=[4096, 32768],
        help="rows per write (the run loop flushes 4,096 rows or 1 s; imports write a run per transaction)",
    )
    ap.add_argument(
        "--rounds", type=int, default=2, help="before/after pairs per batch size (best kept)"
    )
    ap.add_argument(
        "--before",
        default=BEFORE_REF,
        metavar="REF",
        help=f"git commit whose store is 'before' (default {BEFORE_REF}), or 'schema3' "
        f"({SCHEMA3_REF}, the last schema-3 writer)",
    )
    ap.add_argument(
        "--run-limit", type=int, default=None, help="statements of commonsense-sample (default all)"
    )
    ap.add_argument("--skip-run", action="store_true", help="skip the tiny-model run")
    ap.add_argument(
        "--without-top-tokens",
        action="store_true",
        help="also write the same rows without top tokens (working tree): the rest of a write's cost",
    )
    args = ap.parse_args(argv)
    from llmscope.engine.runner import FLUSH_ROWS

    from .scale import extract_tree

    ref = SCHEMA3_REF if args.before == "schema3" else args.before
    tree = extract_tree(ref, Path(tempfile.mkdtemp(prefix="llmscope-store-before-")))
    label = f"schema-3 writer, {ref}" if args.before == "schema3" else ref
    for b in args.batch:
        # before and after interleaved, each in a fresh process, best of `rounds` (machine load
        # hits both alike; CPU seconds of the process, all threads, are the fairer figure)
        runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for _ in range(args.rounds):
            runs[True].append(_child_rate(tree, args.rows, b))
            runs[False].append(_child_rate(None, args.rows, b))
        w0, w1 = max(r[0] for r in runs[True]), max(r[0] for r in runs[False])
        c0, c1 = max(r[1] for r in runs[True]), max(r[1] for r in runs[False])
        load = os.getloadavg()[0]
        print(
            f"write_results, {args.rows:,} rows in batches of {b:,} (until closed): "
            f"before ({label}) {w0:,.0f} rows/s wall, {c0:,.0f} rows/CPU-s; "
            f"now {w1:,.0f} rows/s wall, {c1:,.0f} rows/CPU-s; ratio {w1 / w0:.2f}x wall, {c1 / c0:.2f}x CPU; "
            f"load average {load:.1f} on {os.cpu_count()} CPUs",
            flush=True,
        )
        if args.without_top_tokens:
            bare = [_child_rate(None, args.rows, b, top_tokens=False) for _ in range(args.rounds)]
            print(
                f"  the same rows without top tokens (now): {max(r[0] for r in bare):,.0f} rows/s wall, "
                f"{max(r[1] for r in bare):,.0f} rows/CPU-s",
                flush=True,
            )
        print(
            f"  target: >= {TARGET_ROWS_S:,} rows/s wall at the run loop's flush size "
            f"({FLUSH_ROWS:,} rows): {'met' if w1 >= TARGET_ROWS_S else 'NOT met'} "
            f"({w1:,.0f} rows/s{'' if b == FLUSH_ROWS else '; this batch size is not the flush size'})",
            flush=True,
        )
    if not args.skip_run:
        spent, wall, done = run_share(args.run_limit)
        print(
            f"tiny-model run: {done} results in {wall:.2f} s ({done / wall:.0f} items/s); "
            f"store {spent:.3f} s = {spent / wall:.2%} of wall time (target < 2%)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
