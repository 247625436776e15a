"""API faults under load: `llmscope run` against the OpenAI-wire test server in fault mode.

A seeded 18% of requests fail: 10% HTTP 429 (with Retry-After), 5% HTTP 500, 2% a
stuck connection (the server sleeps 30 s; the client times out and retries) and 1% a
truncated JSON body. A few items always get HTTP 500, so they must end as recorded
errors. The run must finish (a stuck connection never hangs it), store every
(item, variant) exactly once with either the right numbers or an error, and report
its retries. The CI variant sends ~350 requests; the full one (`pytest -m load`) ~2,400.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import duckdb
import pytest

from llmscope.engine.openai.client import DETERMINISTIC_REPEATS
from tests.helpers.cli import api_run, record
from tests.helpers.oai import start_server, stop_server

# the server's default top-5 at the first generated token (tests/oai_server.py DEFAULT_TOP)
TOP = {"Yes": -0.2, "No": -1.9, "yes": -4.0, "The": -5.0}
MIX = ["429"] * 10 + ["500"] * 5 + ["timeout"] * 2 + ["malformed"]  # drawn uniformly at rate 18%
RATE = 0.18
MAX_RETRIES = 4
ALWAYS_500 = "[always-500]"


def _expected_probs() -> tuple[float, float, float]:
    s = sum(math.exp(v) for v in TOP.values())
    yes = (math.exp(TOP["Yes"]) + math.exp(TOP["yes"])) / s
    no = math.exp(TOP["No"]) / s
    return yes, no, math.exp(TOP["The"]) / s


def _suite(folder: Path, n_items: int, n_always: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "items.jsonl", "w") as f:
        for i in range(n_items):
            tag = f" {ALWAYS_500}" if i < n_always else ""
            f.write(
                json.dumps({"id": f"f{i}", "text": f"Is statement {i} true?{tag}", "gold": "yes"})
                + "\n"
            )
    (folder / "suite.yaml").write_text(
        "name: faults\ntask: yesno\nitems: items.jsonl\n"
        "templates:\n  a: 'Q: {text}'\n  b: 'Answer yes or no. {text}'\n"
    )
    return folder / "suite.yaml"


def _fault_run(tmp_path: Path, n_items: int, retry_after: str, section: str) -> None:
    n_always = 3
    spec = _suite(tmp_path / "suite", n_items, n_always)
    db = tmp_path / "faults.duckdb"
    server = start_server("--fault-sleep", "30", "--retry-after", retry_after)
    try:
        server.script(ALWAYS_500, faults=[{"status": 500, "message": "scripted outage"}] * 1000)
        server.faults(rate=RATE, seed=8, kinds=MIX, sleep=30.0, retry_after=retry_after)
        proc = api_run(
            spec,
            db,
            server.base_url,
            "--concurrency",
            "16",
            "--timeout",
            "2",
            "--max-retries",
            str(MAX_RETRIES),
            "--no-report",
            timeout=900,
        )
        stats = server.server_stats()
    finally:
        stop_server(server)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 1, proc.stderr  # 1: completed, some items errored
    n_prompts = 2 * n_items
    con = duckdb.connect(str(db), read_only=True)
    total, distinct = con.execute(
        "SELECT count(*), count(DISTINCT (item_id, variant)) FROM results"
    ).fetchone()
    rows = con.execute("SELECT item_id, p_yes, p_no, other, error FROM results").fetchall()
    status, n_errors, meta = con.execute("SELECT status, n_errors, meta FROM runs").fetchone()
    con.close()
    assert total == distinct == n_prompts
    yes, no, other = _expected_probs()
    errors = [r for r in rows if r[4] is not None]
    for _item_id, p_yes, p_no, p_other, err in rows:
        if err is None:
            assert (p_yes, p_no, p_other) == pytest.approx((yes, no, other), abs=1e-9)
        else:
            # retries exhausted, or the always-500 items: the same body 3 times is deterministic
            assert p_yes is None and (
                "giving up after" in err or "deterministic server error" in err
            )
    always = {f"f{i}" for i in range(n_always)}
    assert always <= {r[0] for r in errors}
    assert status == "completed_with_errors" and n_errors == len(errors)
    bs = json.loads(meta)["backend_stats"]
    injected = stats["injected"]
    scripted = 2 * n_always * min(MAX_RETRIES + 1, DETERMINISTIC_REPEATS)
    assert stats["requests"] >= (2000 if section == "faults_load" else 300)
    assert bs["requests"] == stats["requests"]
    assert bs["rate_limited"] == injected["429"]
    assert bs["server_errors"] == injected["500"] + scripted
    assert bs["malformed"] == injected["malformed"]
    assert bs["timeouts"] >= injected["timeout"]  # a slow normal answer may also time out
    faults_seen = (
        bs["rate_limited"]
        + bs["server_errors"]
        + bs["malformed"]
        + bs["timeouts"]
        + bs["connection_errors"]
    )
    assert bs["retries"] + len(errors) == faults_seen
    assert f"retries {bs['retries']}" in proc.stderr  # the final status line reports them
    record(
        section,
        requests=stats["requests"],
        prompts=n_prompts,
        faults_injected=sum(injected.values()),
        injected_429=injected["429"],
        injected_500=injected["500"],
        injected_timeouts=injected["timeout"],
        injected_malformed=injected["malformed"],
        scripted_500=scripted,
        retries=bs["retries"],
        items_with_recorded_error=len(errors),
        rows_stored=total,
        double_counted=total - distinct,
        items_lost=n_prompts - total,
    )


@pytest.mark.reliability
def test_faults_ci(tmp_path: Path) -> None:
    _fault_run(tmp_path, n_items=150, retry_after="0.02", section="faults_ci")


@pytest.mark.load
@pytest.mark.slow
def test_faults_load(tmp_path: Path) -> None:
    _fault_run(tmp_path, n_items=1000, retry_after="0.1", section="faults_load")
