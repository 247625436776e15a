"""Text from a server is repaired and redacted before it is shown, stored or cached.

Real `llmscope run` subprocesses against the scripted local server (tests/helpers/oai_server.py):

- a top-logprob token "\\ud83d" and a reply "4\\ud83d" (lone surrogates, valid JSON escapes,
  invalid in UTF-8): the run completes with every row stored, each row says
  `text_repaired`, and a second run served from the same response cache by a clean server
  completes the same way;
- a server that echoes the key in its 200 replies: after the run the key is found nowhere
  (the database by SQL over every text column and by bytes, the live channel, a JSONL and a
  CSV export, the response cache), and the rows say `key_redacted`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.helpers.cli import api_run, cli, cli_env, query, query_dicts, write_yesno_suite
from tests.helpers.oai import CANARY_KEY, oai, oai_server  # noqa: F401

N_ITEMS = 6  # x 2 prompt variants = 12 rows


def _run(spec: Path, db: Path, url: str, cache: Path, *extra: str) -> Any:
    env = cli_env(OPENAI_API_KEY=CANARY_KEY, LLMSCOPE_RESPONSE_CACHE=str(cache))
    return api_run(spec, db, url, "--quiet", "--no-report", *extra, env=env)


def _rows(db: Path) -> list[dict[str, Any]]:
    return query_dicts(
        db, "SELECT item_id, variant, error, extra, top_tokens, prediction FROM results"
    )


@pytest.mark.slow
def test_lone_surrogates_are_repaired_and_the_cache_replays(oai: Any, tmp_path: Path) -> None:  # noqa: F811
    spec = write_yesno_suite(tmp_path / "suite", N_ITEMS)
    cache = tmp_path / "cache.sqlite"
    oai.script("number", top=[["\ud83d", -0.5], ["Yes", -1.6], ["No", -3.0]], content="4\ud83d")
    db = tmp_path / "a.duckdb"
    proc = _run(spec, db, oai.base_url, cache)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = _rows(db)
    assert len(rows) == 2 * N_ITEMS and all(r["error"] is None for r in rows)
    for r in rows:
        extra = json.loads(r["extra"])
        assert extra.get("text_repaired", 0) >= 1, extra
    # the live channel is valid UTF-8 JSON with the replacement character where the half pair was
    live = [p for p in (tmp_path / "a.duckdb.live").rglob("results.jsonl")]
    text = live[0].read_bytes().decode("utf-8")
    lines = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 2 * N_ITEMS
    assert "\ufffd" in json.dumps(lines[0], ensure_ascii=False)

    # A clean server now: a new run of the same questions is served from the cache (no
    # request reaches the server) and completes, its rows flagged the same way.
    oai.reset()
    db2 = tmp_path / "b.duckdb"
    proc = _run(spec, db2, oai.base_url, cache)
    assert proc.returncode == 0, proc.stderr
    rows2 = _rows(db2)
    assert len(rows2) == 2 * N_ITEMS
    assert all(json.loads(r["extra"]).get("text_repaired", 0) >= 1 for r in rows2)
    assert [e for e in oai.log() if "number" in json.dumps(e["body"])] == []  # only the probe asked

    # and without the cache, the clean server's answers carry no repair flag
    db3 = tmp_path / "c.duckdb"
    proc = _run(spec, db3, oai.base_url, cache, "--no-cache")
    assert proc.returncode == 0, proc.stderr
    assert all("text_repaired" not in json.loads(r["extra"]) for r in _rows(db3))


def _text_columns_holding(db: Path, needle: str) -> list[str]:
    """Every table.column of a text-like type whose values contain `needle` (SQL, not bytes:
    DuckDB compresses strings on disk)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        cols = con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE data_type IN ('VARCHAR', 'JSON') OR data_type LIKE '%[]' OR data_type LIKE 'STRUCT%' "
            "OR data_type LIKE 'MAP%'"
        ).fetchall()
        hits = []
        for t, c in cols:
            n = con.execute(
                f'SELECT count(*) FROM "{t}" WHERE CAST("{c}" AS VARCHAR) LIKE ?',  # noqa: S608
                [f"%{needle}%"],
            ).fetchone()[0]
            if n:
                hits.append(f"{t}.{c}")
        return hits
    finally:
        con.close()


@pytest.mark.parametrize("where", ["content", "top_token"])
def test_key_echoed_in_a_200_reply_is_stored_nowhere(oai: Any, tmp_path: Path, where: str) -> None:  # noqa: F811
    spec = write_yesno_suite(tmp_path / "suite", N_ITEMS)
    cache = tmp_path / "cache.sqlite"
    if where == "content":
        oai.script("number", content=f"{CANARY_KEY} is your key")
    else:
        oai.script("number", top=[[CANARY_KEY, -0.4], ["Yes", -1.9], ["No", -3.0]])
    db = tmp_path / "r.duckdb"
    proc = _run(spec, db, oai.base_url, cache)
    assert proc.returncode in (0, 1), proc.stderr
    assert CANARY_KEY not in proc.stdout + proc.stderr
    assert "sent the API key back" in proc.stderr
    rows = _rows(db)
    assert len(rows) == 2 * N_ITEMS
    assert all(json.loads(r["extra"]).get("key_redacted") is True for r in rows)
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"export.{fmt}"
        p = cli("export", "--run", "last", "--db", str(db), "--format", fmt, "-o", str(out))
        assert p.returncode == 0, p.stderr
        assert "key_redacted" in out.read_text()
    assert _text_columns_holding(db, CANARY_KEY) == []
    assert _text_columns_holding(db, "[redacted: API key]")  # the redaction is there to see
    # every byte under the test folder: database, WAL, live channel, exports, response cache
    leaks = [
        str(p) for p in tmp_path.rglob("*") if p.is_file() and CANARY_KEY.encode() in p.read_bytes()
    ]
    assert leaks == []
    assert cache.exists()


def test_lone_surrogate_in_the_model_name_and_fingerprint(oai: Any, tmp_path: Path) -> None:  # noqa: F811
    """Every reply, the probe's included, names its model and fingerprint with a lone surrogate
    (and the key): before, creating the run failed ("database error while creating the run:
    cannot encode str as UTF-8"), exit 2, nothing stored. Now the run record keeps them repaired
    and redacted, and every row is stored."""
    spec = write_yesno_suite(tmp_path / "suite", N_ITEMS)
    oai.script("", system_fingerprint="fp\ud83d", model=f"m\ud83d {CANARY_KEY}")
    db = tmp_path / "m.duckdb"
    proc = _run(spec, db, oai.base_url, tmp_path / "cache.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert len(_rows(db)) == 2 * N_ITEMS
    ((meta,),) = query(db, "SELECT meta FROM runs")
    backend = json.loads(meta)["backend"]
    assert backend["system_fingerprints"] == ["fp\ufffd"]
    assert backend["served_models"] == ["m\ufffd [redacted: API key]"]
    assert CANARY_KEY not in meta


def test_a_failed_response_is_never_cached(oai: Any, tmp_path: Path) -> None:  # noqa: F811
    """A reply refused by the checks (top-k probabilities summing above 1) is an item error, and
    is not put in the response cache: the next run from the same cache, against a clean server,
    asks that item again and stores it."""
    spec = write_yesno_suite(tmp_path / "suite", N_ITEMS)
    cache = tmp_path / "cache.sqlite"
    oai.script("number 1 ", top=[["Yes", -0.01], ["No", -0.01]])
    db = tmp_path / "f.duckdb"
    proc = _run(spec, db, oai.base_url, cache, "--max-retries", "0")
    assert proc.returncode == 1, proc.stderr
    failed = {r["item_id"] for r in _rows(db) if r["error"]}
    assert failed == {"q1"}
    oai.reset()
    db2 = tmp_path / "g.duckdb"
    proc = _run(spec, db2, oai.base_url, cache)
    assert proc.returncode == 0, proc.stderr
    rows = _rows(db2)
    assert len(rows) == 2 * N_ITEMS and all(r["error"] is None for r in rows)
    asked = [e for e in oai.log() if "number" in json.dumps(e["body"])]
    assert asked and all("number 1 " in json.dumps(e["body"]) for e in asked)  # only q1 again
