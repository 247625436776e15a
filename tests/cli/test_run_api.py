"""`llmscope run --model openai:...` end to end against the local OpenAI-wire test server."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import duckdb
import pytest

from tests.helpers.cli import api_run, cli_env, write_api_suite
from tests.helpers.oai import CANARY_KEY, start_server, stop_server


def E(x: float) -> float:
    return math.exp(x)


def _run(spec: Path, db: Path, base_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return api_run(spec, db, base_url, *extra, env=cli_env(OPENAI_API_KEY=CANARY_KEY))


def test_three_topk_rules_stored_with_rule_names(tmp_path):
    server = start_server()
    try:
        server.script("[both]", top=[["Yes", -0.7], [" yes", -2.5], ["No", -1.6], ["Maybe", -3.2]])
        server.script("[one]", top=[["Yes", -0.3], ["Sure", -2.0], ["The", -3.0]])
        server.script("[none]", top=[["The", -0.5], ["I", -1.5]])
        server.script("[probe]", top=[["Yes", -0.1], ["No", -2.5]])
        server.script("Answer yes or no: is water wet?", top=[["Yes", -0.1], ["No", -2.5]])
        spec = write_api_suite(tmp_path, ["[both] sky", "[one] sea", "[none] moon"])
        db = tmp_path / "api.duckdb"
        proc = _run(spec, db, server.base_url)
        assert proc.returncode == 0, proc.stderr[-2000:]
    finally:
        stop_server(server)
    con = duckdb.connect(str(db), read_only=True)
    rows = {
        r[0]: r[1:]
        for r in con.execute("SELECT item_id, p_yes, p_no, other, extra FROM results").fetchall()
    }
    run_meta = con.execute("SELECT backend, meta, options FROM runs").fetchone()
    con.close()
    # both present: rescale the top-k to 1
    s = E(-0.7) + E(-2.5) + E(-1.6) + E(-3.2)
    py, pn, po, extra = rows["i0"]
    assert (py, pn, po) == pytest.approx(
        ((E(-0.7) + E(-2.5)) / s, E(-1.6) / s, E(-3.2) / s), abs=1e-9
    )
    assert json.loads(extra)["rule"] == "all-present"
    # only yes: no gets the mass outside the top-k; other is the top-k mass of the rest
    py, pn, po, extra = rows["i1"]
    top = E(-0.3) + E(-2.0) + E(-3.0)
    assert (py, pn, po) == pytest.approx((E(-0.3), 1 - top, E(-2.0) + E(-3.0)), abs=1e-9)
    # neither: the outside mass is split equally
    py, pn, po, extra = rows["i2"]
    top = E(-0.5) + E(-1.5)
    assert (py, pn, po) == pytest.approx(((1 - top) / 2, (1 - top) / 2, top), abs=1e-9)
    rules = {json.loads(rows[k][3])["rule"] for k in ("i1", "i2")}
    assert len(rules) == 2 and "all-present" not in rules
    assert run_meta[0] == "openai"
    assert CANARY_KEY not in (run_meta[1] + run_meta[2])
    assert CANARY_KEY not in db.read_bytes().decode("latin-1")


def test_faulty_server_run_completes_and_reports_retries(tmp_path):
    server = start_server("--fault-rate", "0.2", "--fault-seed", "3")
    try:
        server.faults(rate=0.2, seed=3, kinds=["429", "500"], retry_after="0.05")
        spec = write_api_suite(tmp_path, [f"statement {k}" for k in range(40)])
        db = tmp_path / "faults.duckdb"
        proc = _run(spec, db, server.base_url, "--concurrency", "4", "--max-retries", "8")
        injected = server.server_stats()
    finally:
        stop_server(server)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    n, distinct, scored, errs = con.execute(
        "SELECT count(*), count(DISTINCT item_id), count(p_yes), count(error) FROM results"
    ).fetchone()
    meta = json.loads(con.execute("SELECT meta FROM runs").fetchone()[0])
    con.close()
    assert n == distinct == 40 and scored + errs == 40
    stats = meta["backend_stats"]
    # every injected 429/500 was retried and counted, and none was scored as an answer
    assert injected["injected"].get("429", 0) + injected["injected"].get("500", 0) > 0
    assert stats["rate_limited"] == injected["injected"].get("429", 0)
    assert stats["server_errors"] == injected["injected"].get("500", 0)
    assert stats["retries"] >= stats["rate_limited"] + stats["server_errors"] - errs * 9
    assert "retries" in proc.stderr
