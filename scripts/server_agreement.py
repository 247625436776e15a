"""Agreement between a llama.cpp server and the local backend on the same GGUF, per task type.

    .venv/bin/python scripts/server_agreement.py --limit 30 --db /tmp/agree.duckdb

Starts `python -m llama_cpp.server` on the embedded SmolLM2 GGUF (needs `bash scripts/setup.sh
server`), runs each built-in suite twice with `llmscope run` (local `--model` default, then
`--model openai:smollm2 --base-url ...`), and prints a Markdown table computed from the stored
per-item rows of both runs (paired by item and variant). The numbers in docs/scale-out.md
come from this script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import server_harness as sh  # noqa: E402

SUITES = [
    "commonsense-sample",
    "mc-sample",
    "pragmatics-choice",
    "rating-sample",
    "generation-sample",
    "minimal-pairs",
    "syntax-sample",
    "contamination-sample",
]


def ranking(r: dict[str, Any]) -> list[str]:
    """Options from most to least preferred: stored log-likelihoods, else probabilities."""
    os_ = r["option_scores"] or {}
    if os_ and all("logprob" in v for v in os_.values()):
        return sorted(os_, key=lambda o: -os_[o]["logprob"])
    return sorted(r["probs"], key=lambda o: -r["probs"][o])


def compare(task: str, loc: dict, rem: dict) -> dict[str, Any]:
    keys = [k for k in loc if k in rem and not loc[k]["error"] and not rem[k]["error"]]
    errors = sum(1 for r in rem.values() if r["error"])
    out: dict[str, Any] = {"n": len(keys), "remote_errors": errors}
    if not keys:
        return out
    same = sum(1 for k in keys if loc[k]["prediction"] == rem[k]["prediction"]) / len(keys)
    out["same_prediction"] = same
    if task == "yesno":
        d = [abs(loc[k]["probs"]["yes"] - rem[k]["probs"]["yes"]) for k in keys]
        out.update(mean_abs_dp_yes=sum(d) / len(d), max_abs_dp_yes=max(d))
    elif task == "rating":
        d = [abs(loc[k]["extra"]["expected"] - rem[k]["extra"]["expected"]) for k in keys]
        out.update(mean_abs_d_expected=sum(d) / len(d))
    elif task == "choice":
        methods = sorted({str(rem[k]["extra"].get("choice_method")) for k in keys})
        out["remote_method"] = ",".join(methods)
        d = [
            abs(loc[k]["probs"][o] - rem[k]["probs"].get(o, 0.0))
            for k in keys
            for o in loc[k]["probs"]
        ]
        out["mean_abs_d_option_prob"] = sum(d) / len(d)
        # option-ranking agreement: the full order of the options is the same
        out["same_ranking"] = sum(ranking(loc[k]) == ranking(rem[k]) for k in keys) / len(keys)
    elif task == "minpairs":
        # preference agreement: the same sentence of the pair preferred
        out["same_preference"] = same
    elif task == "syntaxgym":
        out["same_verdict"] = sum(loc[k]["correct"] == rem[k]["correct"] for k in keys) / len(keys)
    elif task == "contamination":
        d = [abs(loc[k]["extra"]["min_k_prob"] - rem[k]["extra"]["min_k_prob"]) for k in keys]
        out.update(mean_abs_d_min_k_prob=sum(d) / len(d))
    acc_l = [loc[k]["correct"] for k in keys if loc[k]["correct"] is not None]
    acc_r = [rem[k]["correct"] for k in keys if rem[k]["correct"] is not None]
    if acc_l and acc_r:
        out.update(acc_local=sum(acc_l) / len(acc_l), acc_server=sum(acc_r) / len(acc_r))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=30)
    ap.add_argument("--db", default="server-agreement.duckdb")
    ap.add_argument("--suite", action="append", help=f"suites (default: {', '.join(SUITES)})")
    ap.add_argument(
        "--base-url",
        help="a llama.cpp server already running with the command line above (default: start one)",
    )
    a = ap.parse_args()
    from llmscope.data.suites import load_suite
    from llmscope.engine.models import embedded_model_path

    db = Path(a.db)
    proc: subprocess.Popen[bytes] | None = None
    if a.base_url:
        base = a.base_url
    else:
        try:
            proc, base = sh.start_llama(embedded_model_path(), db.with_suffix(".server.log"))
        except RuntimeError as e:
            raise SystemExit(str(e)) from None
    env = sh.client_env("sk-local", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    rows = []
    try:
        for suite in a.suite or SUITES:
            res = sh.run_both(db, suite, base, "--limit", str(a.limit), env=env)
            if res["local_rc"] == 0:
                res.update(
                    compare(
                        load_suite(suite).task,
                        sh.latest_rows(db, suite, "hf"),
                        sh.latest_rows(db, suite, "openai"),
                    )
                )
            rows.append(res)
            print(json.dumps(res), flush=True)
    finally:
        if proc is not None:
            sh.stop_llama(proc)
    print()
    print("| suite | n | same prediction | agreement | accuracy local / server | server |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        agree = ", ".join(
            f"{k} {v:.3f}"
            for k, v in r.items()
            if (
                k.startswith(("mean_abs", "max_abs"))
                or k in ("same_ranking", "same_preference", "same_verdict")
            )
            and isinstance(v, float)
        )
        acc = f"{r['acc_local']:.3f} / {r['acc_server']:.3f}" if "acc_local" in r else "-"
        same = f"{r['same_prediction']:.1%}" if "same_prediction" in r else "-"
        srv = r.get("server_stop") or (
            f"errors {r.get('remote_errors')}" if r.get("remote_errors") else "ok"
        )
        if r.get("remote_method"):
            srv += f" (choice method: {r['remote_method']})"
        print(f"| {r['suite']} | {r.get('n', 0)} | {same} | {agree or '-'} | {acc} | {srv} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
