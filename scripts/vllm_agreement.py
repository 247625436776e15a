"""Agreement between a real vLLM (CPU) server and the local backend, per built-in suite.

    .venv/bin/python scripts/vllm_agreement.py --limit 10 --db /tmp/vllm-agree.duckdb
    .venv/bin/python scripts/vllm_agreement.py --base-url http://127.0.0.1:PORT/v1 ...   # a running server

Starts one vLLM server (bench/vllm_server.py: the transformers folder llmscope caches for the
embedded SmolLM2 GGUF, fp32, one thread; needs `bash scripts/setup.sh vllm`) unless --base-url
is given, runs each built-in suite twice with `llmscope run` (locally, then through the server)
and prints a Markdown table from the stored rows of both runs, paired by item and variant. The
numbers in docs/scale-out.md come from this script. Rating runs ask for the top-100 log-probs
(`--top-logprobs 100 --opt top_k=100`; the server allows 100) so every label is seen.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import server_harness as sh  # noqa: E402
from bench import vllm_server as vs  # noqa: E402
from llmscope.data.suites import BUILTIN_DIR  # noqa: E402

# every built-in suite
SUITES = sorted(p.parent.name for p in BUILTIN_DIR.glob("*/suite.yaml"))
EXTRA = {
    "rating-sample": ["--top-logprobs", "100", "--opt", "top_k=100"],
    "pragmatics-choice": ["--opt", 'schemes=["labels"]'],
    "probeval-oneshot": ["--opt", "n=5"],
}


def order(d: dict[str, float]) -> list[str]:
    return sorted(d, key=lambda o: -d[o])


def compare(suite: str, loc: dict, rem: dict) -> dict[str, Any]:
    keys = [k for k in loc if k in rem and not loc[k]["error"] and not rem[k]["error"]]
    out: dict[str, Any] = {
        "n": len(keys),
        "server_errors": sum(1 for r in rem.values() if r["error"]),
    }
    if not keys:
        return out
    out["same_prediction"] = sum(loc[k]["prediction"] == rem[k]["prediction"] for k in keys) / len(
        keys
    )
    if suite == "minimal-pairs":
        d = [
            abs(sc["logprob"] - loc[k]["option_scores"][s]["logprob"])
            for k in keys
            for s, sc in rem[k]["option_scores"].items()
        ]
        out.update(max_abs_d_sentence_logprob=max(d), sentences=len(d))
    elif suite == "syntax-sample":
        d = [
            abs(sum(a["logprobs"]) - sum(b["logprobs"]))
            for k in keys
            for a, b in zip(rem[k]["extra"]["per_token"], loc[k]["extra"]["per_token"], strict=True)
        ]
        out.update(
            max_abs_d_sentence_logprob=max(d),
            sentences=len(d),
            same_verdict=sum(loc[k]["correct"] == rem[k]["correct"] for k in keys) / len(keys),
        )
    elif suite == "contamination-sample":
        d = [abs(rem[k]["extra"]["mean_logprob"] - loc[k]["extra"]["mean_logprob"]) for k in keys]
        m = [abs(rem[k]["extra"]["min_k_prob"] - loc[k]["extra"]["min_k_prob"]) for k in keys]
        out.update(max_abs_d_mean_token_logprob=max(d), max_abs_d_min_k_prob=max(m))
    elif suite == "commonsense-sample":
        seen = [abs(rem[k]["extra"]["raw_probs"]["yes"] - loc[k]["probs"]["yes"]) for k in keys]
        ruled = [abs(rem[k]["probs"]["yes"] - loc[k]["probs"]["yes"]) for k in keys]
        out.update(
            max_abs_d_p_yes_seen=max(seen),
            mean_abs_d_p_yes_seen=sum(seen) / len(seen),
            mean_abs_d_p_yes_stored=sum(ruled) / len(ruled),
        )
    elif suite == "rating-sample":
        out["same_ranking"] = sum(
            order(rem[k]["probs"]) == order(loc[k]["probs"]) for k in keys
        ) / len(keys)
        d = [
            abs(p - loc[k]["extra"]["raw_probs"][lab])
            for k in keys
            for lab, p in rem[k]["extra"]["meta"]["raw_probs"].items()
        ]
        out["max_abs_d_label_prob_seen"] = max(d)
    elif suite in ("mc-sample", "pragmatics-choice"):
        out["server_method"] = ",".join(
            sorted({str(rem[k]["extra"].get("choice_method")) for k in keys})
        )
        out["same_ranking"] = sum(
            order(rem[k]["probs"]) == order(loc[k]["probs"]) for k in keys
        ) / len(keys)
        d = [
            abs(sc["logprob"] - loc[k]["option_scores"][o]["logprob"])
            for k in keys
            for o, sc in rem[k]["option_scores"].items()
        ]
        out["max_abs_d_option_logprob"] = max(d)
    elif suite == "generation-sample":
        out["same_text"] = out["same_prediction"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--db", default="vllm-agreement.duckdb")
    ap.add_argument("--suite", action="append", help=f"suites (default: {', '.join(SUITES)})")
    ap.add_argument(
        "--base-url", help="a vLLM server started with bench/vllm_server.py's command line"
    )
    a = ap.parse_args()
    db = Path(a.db)
    server = None
    if a.base_url:
        base = a.base_url
    else:
        why = vs.missing()
        if why:
            raise SystemExit(f"vLLM: {why}")
        server = vs.start(vs.hf_folder(), db.with_suffix(".vllm.log"))
        base = server.base_url
        print(json.dumps({"server_start_s": round(server.started_s, 1)}), flush=True)
    env = sh.client_env("sk-local", LLMSCOPE_RESPONSE_CACHE="off")
    rows = []
    try:
        for suite in a.suite or SUITES:
            res = sh.run_both(
                db, suite, base, "--limit", str(a.limit), *EXTRA.get(suite, []), env=env
            )
            if res["local_rc"] == 0 and res["server_rc"] == 0:
                loc, rem = sh.latest_rows(db, suite, "hf"), sh.latest_rows(db, suite, "openai")
                res.update(compare(suite, loc, rem))
                be = sh.run_meta(db, "openai", suite).get("backend") or {}
                res["loglik"] = be.get("loglik")
                res["context"] = next(
                    (
                        r["extra"].get("context", {}).get("text")
                        for r in rem.values()
                        if isinstance(r["extra"].get("context"), dict)
                    ),
                    None,
                )
            rows.append(res)
            print(json.dumps(res), flush=True)
    finally:
        if server is not None:
            vs.stop(server)
    print()
    print("| suite | n | same prediction | agreement | server |")
    print("|---|---|---|---|---|")
    for r in rows:
        agree = ", ".join(
            f"{k} {v:.2g}" if k.startswith("max") or k.startswith("mean") else f"{k} {v:.0%}"
            for k, v in r.items()
            if k.startswith(("max_abs", "mean_abs", "same_ranking", "same_verdict"))
            and isinstance(v, float)
        )
        same = f"{r['same_prediction']:.0%}" if "same_prediction" in r else "-"
        srv = r.get("server_stop") or (
            f"errors {r['server_errors']}" if r.get("server_errors") else "ok"
        )
        if r.get("server_method"):
            srv += f" ({r['server_method']})"
        print(f"| {r['suite']} | {r.get('n', 0)} | {same} | {agree or '-'} | {srv} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
