"""llmscope vs lm-evaluation-harness: the same items, model, dtype and device, in one process.

    python -m bench.throughput [--n-yesno 60] [--n-mc 50] [--rounds 2] [--batch-size 16] [--threads N]

Two item sets, run interleaved (llmscope, lm-eval, llmscope, lm-eval, ...):

* yes/no: the built-in `commonsense-sample` suite (chat-rendered prompts). llmscope runs
  its real pipeline (Runner, `yesno` task, DuckDB store); lm-eval scores the loglikelihood
  of the answer tokens "Yes" and "No" after the same rendered prompt. llmscope's
  P(Yes token) / P(No token) (from its stored top tokens) must equal exp(lm-eval loglik).
* multiple choice: 200 generated 4-option questions (bench/mc_items.py) with a shared
  few-shot prefix; each option's loglikelihood through `HFBackend.loglik` and through
  lm-eval's `loglikelihood` must agree.

Prints items/s and tokens/s per system and set, the largest probability differences,
on CUDA the fraction of peak FLOP/s, and last `ratio llmscope/lm-eval: X.XX` (the smaller
of the two sets' ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEAK_FLOPS = {
    "H100": 989e12,
    "H200": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "A10G": 125e12,
    "L4": 121e12,
}


def _peak(device: str) -> float | None:
    import torch

    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_FLOPS.items() if k in name), None)


async def _llmscope_yesno(backend: Any, suite: Any, limit: int) -> tuple[float, int, Any]:
    from llmscope.engine.runner import Runner, RunPlan
    from llmscope.store.db import Store

    d = tempfile.mkdtemp(prefix="llmscope-bench-")
    store = Store(os.path.join(d, "bench.duckdb"))
    plan = RunPlan(suite=suite, model_label="bench", model_arg=None, limit=limit)
    runner = Runner(plan, backend, store)
    t0 = time.perf_counter()
    prog = await runner.run()
    dt = time.perf_counter() - t0
    frame = store.results_frame(runner.run_id, with_items=False)
    store.close()
    return dt, prog.done, frame


async def _llmscope_mc(
    backend: Any, items: list[tuple[str, list[str], int]], window: int = 64
) -> tuple[float, list]:
    sem = asyncio.Semaphore(window)

    async def one(ctx: str, opts: list[str]) -> list[float]:
        async with sem:
            outs = await backend.loglik([(ctx, o) for o in opts])
            return [o.logprob for o in outs]

    t0 = time.perf_counter()
    res = await asyncio.gather(*[one(c, o) for c, o, _ in items])
    return time.perf_counter() - t0, res


def _lmeval_run(lm: Any, reqs: list[tuple[str, str]]) -> tuple[float, list[float]]:
    from lm_eval.api.instance import Instance

    inst = [
        Instance(request_type="loglikelihood", doc={}, arguments=r, idx=i)
        for i, r in enumerate(reqs)
    ]
    t0 = time.perf_counter()
    out = lm.loglikelihood(inst, disable_tqdm=True)
    return time.perf_counter() - t0, [float(ll) for ll, _ in out]


def _lmeval_tokens(
    lm: Any, contexts: list[str], answer_ids: list[int]
) -> tuple[float, list[float]]:
    """lm-eval's own scoring loop on (context tokens, one answer token) requests.

    `lm.loglikelihood` would move the chat prompt's trailing newline into the continuation
    (it strips all whitespace, not only spaces) and score "\nYes", two tokens; the token
    level entry point scores exactly the answer token after the rendered prompt.
    """
    t0 = time.perf_counter()
    reqs = []
    for c in contexts:
        enc = lm.tok_encode(c, add_special_tokens=False)
        reqs.extend(((c, str(a)), enc, [a]) for a in answer_ids)
    out = lm._loglikelihood_tokens(reqs, disable_tqdm=True)
    return time.perf_counter() - t0, [float(ll) for ll, _ in out]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model", default=None, help="model spec (default: the embedded SmolLM2-135M-Instruct)"
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument(
        "--n-yesno",
        type=int,
        default=60,
        help="statements (x3 prompts each) from commonsense-sample",
    )
    ap.add_argument("--n-mc", type=int, default=50, help="4-option questions")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's)"
    )
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args(argv)

    import torch
    import transformers
    from llmscope.data.suites import load_suite
    from llmscope.engine.hf_backend import HFBackend, load_model
    from llmscope.engine.models import parse_model
    from lm_eval.models.huggingface import HFLM

    from bench.mc_items import mc_items

    if args.threads:
        torch.set_num_threads(args.threads)
    spec = parse_model(args.model)
    tok, model, _ = load_model(spec, args.device, args.dtype)
    n_params = sum(p.numel() for p in model.parameters())
    suite = load_suite("commonsense-sample")
    mc = mc_items(args.n_mc)

    def new_backend() -> HFBackend:
        return HFBackend(
            spec,
            model=model,
            tokenizer=tok,
            device=args.device,
            dtype=args.dtype,
            batch_size=args.batch_size,
        )

    probe = new_backend()
    work = suite.work(args.n_yesno)
    rendered = [probe.render(w.prompt) for w in work]
    yes_id = probe._encode_pair(rendered[0], "Yes", False).ids[-1]
    no_id = probe._encode_pair(rendered[0], "No", False).ids[-1]
    yn_tokens = sum(len(probe._encode_prompt(r, True)) for r in rendered)
    mc_reqs = [(c, o) for c, opts, _ in mc for o in opts]
    mc_tokens = sum(len(probe._encode_pair(c, o, False).ids) for c, o in mc_reqs)
    asyncio.run(probe.aclose())

    lm = HFLM(
        pretrained=model,
        tokenizer=tok,
        batch_size=args.batch_size,
        device=args.device,
        dtype=args.dtype,
    )

    times: dict[tuple[str, str], list[float]] = {}
    diffs = {"yesno": 0.0, "mc": 0.0, "mc_rel": 0.0}
    checked = {"yesno": 0, "mc": 0}
    stats: dict[str, Any] = {}
    for rnd in range(args.rounds):
        for system in ("llmscope", "lm-eval"):
            if system == "llmscope":
                backend = new_backend()

                async def go(b: HFBackend = backend) -> tuple[Any, Any]:
                    y = await _llmscope_yesno(b, suite, args.n_yesno)
                    m = await _llmscope_mc(b, mc)
                    await b.aclose()
                    return y, m

                (dt_y, n_done, frame), (dt_m, mc_ll) = asyncio.run(go())
                assert n_done == len(work), (n_done, len(work))
                stats = backend.stats()
                by_key = {(r.item_id, r.variant): r for r in frame.itertuples()}
                p_tok: list[tuple[float | None, float | None]] = []
                for w in work:
                    top = {
                        t["id"]: t["prob"]
                        for t in json.loads(by_key[(w.item.item_id, w.variant)].top_tokens)
                    }
                    p_tok.append((top.get(yes_id), top.get(no_id)))
            else:
                dt_y, yn_ll = _lmeval_tokens(lm, rendered, [yes_id, no_id])
                dt_m, mc_flat = _lmeval_run(lm, mc_reqs)
            times.setdefault((system, "yesno"), []).append(dt_y)
            times.setdefault((system, "mc"), []).append(dt_m)
            print(
                f"round {rnd + 1} {system:8s} yes/no {len(work) / dt_y:7.2f} items/s   "
                f"mc {len(mc) / dt_m:7.2f} items/s",
                flush=True,
            )
        # Same probabilities: P(token) from llmscope's full distribution vs exp(lm-eval loglik).
        for (py, pn), i in zip(p_tok, range(len(work)), strict=True):
            for p, ll in ((py, yn_ll[2 * i]), (pn, yn_ll[2 * i + 1])):
                if p is not None:
                    diffs["yesno"] = max(diffs["yesno"], abs(p - math.exp(ll)))
                    checked["yesno"] += 1
        flat = [x for row in mc_ll for x in row]
        for a, b in zip(flat, mc_flat, strict=True):
            diffs["mc"] = max(diffs["mc"], abs(a - b))
            diffs["mc_rel"] = max(diffs["mc_rel"], abs(a - b) / max(1.0, abs(b)))
            checked["mc"] += 1

    dev = args.device
    print(
        f"\nmodel {spec.display()} ({n_params / 1e6:.0f}M params), {args.dtype} on {dev}, "
        f"batch {args.batch_size}, torch threads {torch.get_num_threads()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, {platform.processor() or platform.machine()}"
    )
    print(
        f"yes/no: {len(work)} prompts, {yn_tokens} prompt tokens; mc: {len(mc)} items, {len(mc_reqs)} options, "
        f"{mc_tokens} tokens; {args.rounds} interleaved rounds"
    )
    print(
        f"llmscope backend: {stats.get('tokens_computed', 0):.0f} tokens computed, "
        f"{stats.get('tokens_prefix_reused', 0):.0f} served from the shared-prefix cache (last round)"
    )
    ratios = {}
    figures: dict[str, Any] = {}
    peak = _peak(dev)
    for name, n, ntok in (("yesno", len(work), yn_tokens), ("mc", len(mc), mc_tokens)):
        rate = {}
        for system in ("llmscope", "lm-eval"):
            t = statistics.median(times[(system, name)])
            rate[system] = n / t
            line = f"{name:6s} {system:8s} {n / t:8.2f} items/s {ntok / t:9.1f} tokens/s"
            if peak:
                line += f"  {2 * n_params * ntok / t / peak:.2%} of peak FLOP/s"
            print(line)
            figures[f"{name}_{system}_items_per_s"] = round(n / t, 3)
        ratios[name] = rate["llmscope"] / rate["lm-eval"]
        what = (
            "P(answer token)"
            if name == "yesno"
            else f"option loglik (relative {diffs['mc_rel']:.1e})"
        )
        print(
            f"{name:6s} max |difference| of {what}: {diffs[name]:.2e} over {checked[name]} values; "
            f"ratio {ratios[name]:.2f}"
        )
    figures.update({f"ratio_{k}": round(v, 3) for k, v in ratios.items()})
    figures.update({f"maxdiff_{k}": v for k, v in diffs.items()})
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    # Summed option logliks of ~-20 carry fp32 rounding of ~1e-6 relative (lm-eval's own batch
    # sizes 1 and 16 differ by as much); so the option check is relative, the probability absolute.
    ok = diffs["yesno"] <= 1e-5 and diffs["mc_rel"] <= 1e-5
    print(
        f"identical within 1e-5 (P absolute, loglik relative): {ok}; the ratio below is the smaller set's"
    )
    print(f"ratio llmscope/lm-eval: {min(ratios.values()):.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
