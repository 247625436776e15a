"""Tree attention mask vs padded path: `HFBackend.loglik` on the same MC items, interleaved.

    python -m bench.tree_vs_padded [N_ITEMS=50] [ROUNDS=4]

A fresh backend per round and path (embedded SmolLM2, fp32, batch 16, 1 torch thread);
prints wall and CPU seconds, batches and the largest per-token difference from an unpadded
single-sequence forward per round, then the medians.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    import torch

    from bench.mc_items import mc_items
    from bench.throughput import _reference_mc
    from llmscope.engine.hf import HFBackend, load_model
    from llmscope.engine.models import parse_model

    args = sys.argv[1:] if argv is None else argv
    n_items = int(args[0]) if args else 50
    rounds = int(args[1]) if len(args) > 1 else 4
    torch.set_num_threads(1)
    spec = parse_model(None)
    tok, model, _ = load_model(spec, "cpu", "float32")
    mc = mc_items(n_items)
    reqs = [(c, o) for c, opts, _ in mc for o in opts]

    def run(tree: bool) -> tuple[float, float, list[Any], dict[str, Any]]:
        b = HFBackend(
            spec,
            model=model,
            tokenizer=tok,
            device="cpu",
            dtype="float32",
            batch_size=16,
            threads=1,
        )
        b.tree_mask = tree

        async def go() -> tuple[float, float, list[Any]]:
            sem = asyncio.Semaphore(64)

            async def one(c: str, opts: list[str]) -> list[Any]:
                async with sem:
                    return await b.loglik([(c, o) for o in opts])

            t0, c0 = time.perf_counter(), time.process_time()
            res = await asyncio.gather(*[one(c, o) for c, o, _ in mc])
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            await b.aclose()
            return dt, dc, [x for r in res for x in r]

        dt, dc, out = asyncio.run(go())
        return dt, dc, out, b.stats()

    probe = HFBackend(spec, model=model, tokenizer=tok, device="cpu", dtype="float32", threads=1)
    encs = [probe._encode_pair(c, o, False) for c, o in reqs]
    asyncio.run(probe.aclose())
    ref = _reference_mc(model, encs)
    res: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for rnd in range(rounds):
        for tree in (True, False):
            dt, dc, out, st = run(tree)
            d = max(
                abs(a - b)
                for o, r in zip(out, ref, strict=True)
                for a, b in zip(o.token_logprobs, r, strict=True)
            )
            res[tree].append((dt, dc))
            print(
                f"round {rnd} {'tree  ' if tree else 'padded'} wall {dt:6.2f}s cpu {dc:6.2f}s "
                f"items/cpu-s {len(mc) / dc:6.2f} batches {st['batches']:.0f} maxdiff {d:.2e} "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    med = {
        t: (statistics.median(x[0] for x in res[t]), statistics.median(x[1] for x in res[t]))
        for t in res
    }
    for t in (True, False):
        print(f"{'tree  ' if t else 'padded'} median wall {med[t][0]:.2f} s, CPU {med[t][1]:.2f} s")
    print(
        f"tree mask speed-up: {med[False][0] / med[True][0]:.2f}x wall, {med[False][1] / med[True][1]:.2f}x CPU"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
