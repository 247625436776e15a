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
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import duckdb

from llmscope.store.codec import decode_json

SUITES = ["commonsense-sample", "mc-sample", "pragmatics-choice", "rating-sample", "generation-sample",
          "minimal-pairs", "syntax-sample", "contamination-sample"]


def ranking(r: dict[str, Any]) -> list[str]:
    """Options from most to least preferred: stored log-likelihoods, else probabilities."""
    os_ = r["option_scores"] or {}
    if os_ and all("logprob" in v for v in os_.values()):
        return sorted(os_, key=lambda o: -os_[o]["logprob"])
    return sorted(r["probs"], key=lambda o: -r["probs"][o])


def start_server(gguf: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fh = open(log, "wb")  # noqa: SIM115 - kept open for the server's lifetime
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--logits_all",
                             "true", "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
                             "--n_ctx", "2048", "--seed", "0", "--verbose", "false"], stdout=fh, stderr=fh)
    base = f"http://127.0.0.1:{port}/v1"
    for _ in range(360):
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {log.read_text()[-1500:]}")
        try:
            with urllib.request.urlopen(f"{base}/models", timeout=5):
                return proc, base
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise SystemExit("server did not start in 180 s")


def run(db: Path, suite: str, limit: int, base: str | None) -> tuple[int, str]:
    env = {**os.environ, "OPENAI_API_KEY": "sk-local", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env.pop("OPENAI_BASE_URL", None)
    model = ["--model", "openai:smollm2", "--base-url", base, "--concurrency", "2"] if base else ["--threads", "1"]
    p = subprocess.run([sys.executable, "-m", "llmscope", "--db", str(db), "run", "--suite", suite, "--limit",
                        str(limit), *model, "--quiet", "--no-report"], capture_output=True, text=True, env=env)
    return p.returncode, (p.stderr.strip().splitlines() or [""])[-1]


def load(db: Path, suite: str, backend: str) -> dict[tuple[str, str], dict[str, Any]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute(
            "select r.item_id, r.variant, r.probs, r.prediction, r.correct, r.error, r.extra, r.option_scores "
            "from results r join runs using (run_id) where runs.suite_name = ? and runs.backend = ? "
            "and runs.run_id = (select run_id from runs where suite_name = ? and backend = ? "
            "order by started_at desc limit 1)", [suite, backend, suite, backend])
        cols = [d[0] for d in cur.description]
        out = {}
        for row in cur.fetchall():
            r = dict(zip(cols, row, strict=True))
            for k in ("probs", "extra", "option_scores"):
                r[k] = decode_json(r[k]) if isinstance(r[k], str) else (r[k] or {})
            out[(r["item_id"], r["variant"])] = r
        return out
    finally:
        con.close()


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
        d = [abs(loc[k]["probs"][o] - rem[k]["probs"].get(o, 0.0)) for k in keys for o in loc[k]["probs"]]
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
    ap.add_argument("--base-url", help="a llama.cpp server already running with the command line above "
                    "(default: start one)")
    a = ap.parse_args()
    from llmscope.data.suites import load_suite
    from llmscope.engine.models import embedded_model_path

    db = Path(a.db)
    proc: subprocess.Popen[bytes] | None = None
    if a.base_url:
        base = a.base_url
    else:
        proc, base = start_server(embedded_model_path(), db.with_suffix(".server.log"))
    rows = []
    try:
        for suite in a.suite or SUITES:
            t0 = time.monotonic()
            rc_l, err_l = run(db, suite, a.limit, None)
            t1 = time.monotonic()
            rc_r, err_r = run(db, suite, a.limit, base)
            t2 = time.monotonic()
            res: dict[str, Any] = {"suite": suite, "local_rc": rc_l, "server_rc": rc_r,
                                   "local_s": round(t1 - t0), "server_s": round(t2 - t1)}
            if rc_r:
                res["server_stop"] = err_r
            if rc_l:
                res["local_stop"] = err_l
            if rc_l == 0:
                res.update(compare(load_suite(suite).task, load(db, suite, "hf"), load(db, suite, "openai")))
            rows.append(res)
            print(json.dumps(res), flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    print()
    print("| suite | n | same prediction | agreement | accuracy local / server | server |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        agree = ", ".join(f"{k} {v:.3f}" for k, v in r.items()
                          if (k.startswith(("mean_abs", "max_abs")) or k in ("same_ranking", "same_preference", "same_verdict"))
                          and isinstance(v, float))
        acc = f"{r['acc_local']:.3f} / {r['acc_server']:.3f}" if "acc_local" in r else "-"
        same = f"{r['same_prediction']:.1%}" if "same_prediction" in r else "-"
        srv = r.get("server_stop") or (f"errors {r.get('remote_errors')}" if r.get("remote_errors") else "ok")
        if r.get("remote_method"):
            srv += f" (choice method: {r['remote_method']})"
        print(f"| {r['suite']} | {r.get('n', 0)} | {same} | {agree or '-'} | {acc} | {srv} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
