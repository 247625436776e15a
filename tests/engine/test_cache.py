"""The response cache shared across runs (engine/cache.py), end to end through the CLI."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.helpers.cli import api_run, cli_env, query, write_api_suite
from tests.helpers.oai import CANARY_KEY, start_server, stop_server


def _suite(tmp: Path) -> Path:
    return write_api_suite(
        tmp, ["[c] sky is blue", "[c] fire is cold", "[c] water is wet"], "cache"
    )


def _run(
    spec: Path, db: Path, url: str, cache: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    env = cli_env(OPENAI_API_KEY=CANARY_KEY, LLMSCOPE_RESPONSE_CACHE=str(cache))
    return api_run(spec, db, url, "--no-report", *extra, env=env)


def _rows(db: Path) -> tuple[list[tuple], dict]:
    rows = query(db, "SELECT item_id, p_yes, p_no, other, prediction FROM results ORDER BY item_id")
    meta = json.loads(query(db, "SELECT meta FROM runs")[0][0])
    return rows, meta


@pytest.mark.slow
def test_second_run_is_answered_from_the_cache_with_identical_numbers(tmp_path: Path):
    spec = _suite(tmp_path)
    cache = tmp_path / "cache" / "responses.sqlite"
    server = start_server()
    try:
        server.script("[c]", top=[["Yes", -0.4], ["No", -1.3], ["Maybe", -3.0]])
        p1 = _run(spec, tmp_path / "one.duckdb", server.base_url, cache)
        assert p1.returncode == 0, p1.stderr[-2000:]
        n_first = len(server.log("[c]"))
        # a second run of the same suite into another database: no request for the items
        p2 = _run(spec, tmp_path / "two.duckdb", server.base_url, cache)
        assert p2.returncode == 0, p2.stderr[-2000:]
        n_second = len(server.log("[c]")) - n_first
        # --no-cache asks again
        p3 = _run(spec, tmp_path / "three.duckdb", server.base_url, cache, "--no-cache")
        assert p3.returncode == 0, p3.stderr[-2000:]
        n_third = len(server.log("[c]")) - n_first - n_second
    finally:
        stop_server(server)
    assert n_first == 3 and n_second == 0 and n_third == 3
    # the start line names the endpoint for an API model (never "on None/None")
    assert (
        "None/None" not in p1.stderr + p1.stdout
        and f"at {server.base_url}" in p1.stderr + p1.stdout
    )
    one, meta1 = _rows(tmp_path / "one.duckdb")
    two, meta2 = _rows(tmp_path / "two.duckdb")
    three, meta3 = _rows(tmp_path / "three.duckdb")
    assert one == two == three
    # by hand: both answers in the top-k, so the top-k is rescaled to 1 (e^-0.4, e^-1.3, e^-3)
    import math

    z = math.exp(-0.4) + math.exp(-1.3) + math.exp(-3.0)
    assert one[0][1] == pytest.approx(math.exp(-0.4) / z, rel=1e-9)
    assert meta1["backend_stats"]["cache_misses"] >= 3 and meta1["backend_stats"]["cache_hits"] == 0
    assert meta2["backend_stats"]["cache_hits"] >= 3
    assert "cache_hits" not in meta3["backend_stats"]
    with sqlite3.connect(str(cache)) as con:
        assert con.execute("SELECT count(*) FROM responses").fetchone()[0] >= 3


def test_another_endpoint_is_another_model(tmp_path: Path):
    spec = _suite(tmp_path)
    cache = tmp_path / "responses.sqlite"
    a, b = start_server(), start_server()
    try:
        a.script("[c]", top=[["Yes", -0.2], ["No", -2.0]])
        b.script("[c]", top=[["No", -0.2], ["Yes", -2.0]])
        assert _run(spec, tmp_path / "a.duckdb", a.base_url, cache).returncode == 0
        assert _run(spec, tmp_path / "b.duckdb", b.base_url, cache).returncode == 0
        assert len(b.log("[c]")) == 3  # nothing reused from the other server
    finally:
        stop_server(a)
        stop_server(b)
    ra, _ = _rows(tmp_path / "a.duckdb")
    rb, _ = _rows(tmp_path / "b.duckdb")
    assert [r[4] for r in ra] == ["yes"] * 3 and [r[4] for r in rb] == ["no"] * 3


def test_unusable_cache_location_warns_and_the_run_goes_on(tmp_path: Path):
    spec = _suite(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    server = start_server()
    try:
        server.script("[c]", top=[["Yes", -0.2], ["No", -2.0]])
        p = _run(spec, tmp_path / "x.duckdb", server.base_url, blocker / "sub" / "responses.sqlite")
    finally:
        stop_server(server)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "response cache disabled" in p.stderr
