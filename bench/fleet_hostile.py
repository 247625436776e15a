"""Hostile fleet replicas, measured: one bad replica beside a healthy one, both scripted servers
(tests/helpers/oai_server.py), a yes/no suite of `--n-items` items answered "yes" by the run's model.

    python -m bench.fleet_hostile [--n-items 150] [--timeout 8] [--json FILE]

Cases (the second replica is the bad one, except `other_model`, where it is the first URL):

* `other_model`: it serves `other-model-70b` (answering "no") from the start;
* `swap_mid_run`: it answers as `other-model-70b` ("no") from its 20th request on;
* `hang`: it answers the probe, then never answers an item (sleeps 600 s);
* `error_body`: HTTP 200 with `{"error": ...}` for every item;
* `topk_above_one`: top-k probabilities summing to 1.72.

For each: exit code, status, rows stored, distinct items, error rows, rows whose stored model is
not the run's, accuracy recomputed from the stored p_yes/p_no, requests each replica got for
items, the run's timeouts and the replica events, and wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb

from llmscope.store.codec import decode_json
from tests.helpers.cli import write_api_suite
from tests.helpers.oai import CANARY_KEY, OAIServer, start_server, stop_server

YES = [["Yes", -0.3], ["No", -1.6]]
NO = [["No", -0.2], ["Yes", -1.9]]
MARK = "[hostile]"


def _suite(folder: Path, n: int) -> Path:
    texts = [f"s{k}" for k in range(n)]
    template = f"{MARK} {{text}} Answer yes or no."
    return write_api_suite(folder, texts, "hostile", ids="i{k:04d}", template=template)


def _marked(server: OAIServer) -> int:
    return sum(MARK in json.dumps(e["body"]) for e in server.log())


def measure(case: str, n: int, timeout: float) -> dict[str, Any]:
    good, bad = start_server(), start_server()
    try:
        good.script(MARK, top=YES)
        if case == "other_model":
            bad.script("", model="other-model-70b", top=NO)
        elif case == "swap_mid_run":
            bad.script("", top=YES, model_after=[20, "other-model-70b", {"top": NO}])
        elif case == "hang":
            bad.script(MARK, top=YES, delay=600)
        elif case == "error_body":
            bad.script(MARK, error_body=True)
        else:
            bad.script(MARK, top=[["Yes", -0.1], ["No", -0.2]])
        urls = (
            [bad.base_url, good.base_url]
            if case == "other_model"
            else [good.base_url, bad.base_url]
        )
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            db = folder / "r.duckdb"
            env = {**os.environ, "OPENAI_API_KEY": CANARY_KEY, "HOME": tmp, "OMP_NUM_THREADS": "1"}
            env.pop("OPENAI_BASE_URL", None)
            cmd = [
                sys.executable,
                "-m",
                "llmscope",
                "run",
                "--suite",
                str(_suite(folder, n)),
                "--db",
                str(db),
                "--model",
                "openai:test-model",
                "--base-url",
                urls[0],
                "--base-url",
                urls[1],
                "--concurrency",
                "4",
                "--timeout",
                str(timeout),
                "--quiet",
                "--no-report",
                "--no-cache",
            ]
            t0 = time.monotonic()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
            wall = time.monotonic() - t0
            con = duckdb.connect(str(db), read_only=True)
            rows = con.execute("select item_id, p_yes, p_no, error, extra from results").fetchall()
            status, meta = con.execute("select status, meta from runs").fetchone()  # type: ignore[misc]
            con.close()
        st = decode_json(meta)["backend_stats"]
        scored = [r for r in rows if r[3] is None]
        models = [(decode_json(r[4]) or {}).get("model") for r in scored]
        return {
            "exit": p.returncode,
            "status": status,
            "rows": len(rows),
            "distinct": len({r[0] for r in rows}),
            "errors": len(rows) - len(scored),
            "rows_not_run_model": sum(m != "test-model" for m in models),
            "accuracy": round(sum(r[1] > r[2] for r in scored) / max(1, len(scored)), 4),
            "item_requests": {"good": _marked(good), "bad": _marked(bad)},
            "timeouts": st.get("timeouts"),
            "events": [e["event"] for e in st.get("endpoint_events") or []],
            "stderr_lines_naming_bad": sum(bad.base_url in ln for ln in p.stderr.splitlines()),
            "wall_s": round(wall, 1),
        }
    finally:
        stop_server(good)
        stop_server(bad)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-items", type=int, default=150)
    ap.add_argument("--timeout", type=float, default=8.0)
    ap.add_argument("--cases", default="other_model,swap_mid_run,hang,error_body,topk_above_one")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    out = {c: measure(c, a.n_items, a.timeout) for c in a.cases.split(",")}
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text)


if __name__ == "__main__":
    main()
