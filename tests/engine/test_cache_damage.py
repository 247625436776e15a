"""A damaged response or embedding cache costs speed, never the run.

The cache file is damaged the way disks and people do it: one page of a real cache overwritten
in the middle, a SQLite file of another schema, a file that is not SQLite at all. Each time a
real `llmscope run` against the scripted OpenAI-wire server must complete every item, warn
once naming the cache file, keep the damaged file beside it (`*.damaged-<time>`), and leave a
working cache behind (a later run is answered from it).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pytest

from tests.helpers.cli import api_run, cli_env, record
from tests.helpers.oai import OAIServer, running_server

N = 90  # items; one template each


@pytest.fixture(scope="module")
def server() -> Iterator[OAIServer]:
    with running_server() as s:
        s.script("[d]", top=[["Yes", -0.3], ["No", -1.5]])
        yield s


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("suite")
    # long texts: the cache spans many pages, so a damaged page is met by the lookups
    (d / "items.jsonl").write_text(
        "".join(
            json.dumps(
                {"id": f"i{k}", "text": f"[d] statement {k} " + "padding " * 60, "gold": "yes"}
            )
            + "\n"
            for k in range(N)
        )
    )
    (d / "suite.yaml").write_text(
        "name: dmg\ntask: yesno\nitems: items.jsonl\n"
        "templates:\n  plain: '{text} Answer yes or no.'\n"
    )
    return d / "suite.yaml"


def _run(spec: Path, db: Path, server: OAIServer, cache: Path) -> subprocess.CompletedProcess[str]:
    env = cli_env(OPENAI_API_KEY="sk-test", LLMSCOPE_RESPONSE_CACHE=str(cache))
    return api_run(spec, db, server.base_url, "--no-report", env=env)


def _stored(db: Path) -> tuple[int, int, dict]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        n, err = con.execute("SELECT count(*), count(error) FROM results").fetchone()
        meta = json.loads(con.execute("SELECT meta FROM runs").fetchone()[0])
        return int(n), int(err), meta
    finally:
        con.close()


def _check_survived(tmp_path: Path, spec: Path, server: OAIServer, cache: Path, case: str) -> None:
    before = len(server.log("[d]"))
    p = _run(spec, tmp_path / f"{case}.duckdb", server, cache)
    assert p.returncode == 0, p.stderr[-3000:]
    n, err, meta = _stored(tmp_path / f"{case}.duckdb")
    assert (n, err) == (N, 0), p.stderr[-3000:]
    warnings = [ln for ln in p.stderr.splitlines() if "response cache" in ln and "unusable" in ln]
    assert len(warnings) == 1 and str(cache) in warnings[0], p.stderr[-3000:]
    aside = [
        f
        for f in cache.parent.iterdir()
        if f.name.startswith(cache.name + ".damaged-") and not f.name.endswith(("-wal", "-shm"))
    ]
    assert len(aside) == 1 and aside[0].name in warnings[0]
    assert meta["backend_stats"]["cache_rebuilt"] == 1  # recorded with the run
    asked = len(server.log("[d]")) - before
    assert asked >= 1
    # The new cache works: the next run is answered from it, but for the answers the damaged
    # run took from the old file before it met the damage (those are not in the new one).
    again = len(server.log("[d]"))
    p2 = _run(spec, tmp_path / f"{case}-again.duckdb", server, cache)
    assert p2.returncode == 0 and "unusable" not in p2.stderr, p2.stderr[-2000:]
    assert len(server.log("[d]")) - again == meta["backend_stats"]["cache_hits"]
    assert _stored(tmp_path / f"{case}-again.duckdb")[:2] == (N, 0)
    record(
        "response_cache",
        merge=True,
        **{case: f"{N}/{N} items, 0 errors, one warning naming the file"},
    )


@pytest.mark.slow
def test_a_corrupted_page(tmp_path: Path, spec: Path, server: OAIServer) -> None:
    cache = tmp_path / "c" / "responses.sqlite"
    first = _run(spec, tmp_path / "first.duckdb", server, cache)
    assert first.returncode == 0, first.stderr[-2000:]
    assert not Path(f"{cache}-wal").exists() or Path(f"{cache}-wal").stat().st_size == 0
    size = cache.stat().st_size
    pages = size // 4096
    assert pages >= 8, size
    with open(cache, "r+b") as f:  # one page in the middle: garbage
        f.seek((pages // 2) * 4096)
        f.write(bytes((i * 37 + 11) % 256 for i in range(4096)))
    with sqlite3.connect(cache) as con, pytest.raises(sqlite3.DatabaseError, match="malformed"):
        con.execute("SELECT count(*), max(length(value)) FROM responses").fetchall()
    _check_survived(tmp_path, spec, server, cache, "corrupted_page")


def test_another_schema(tmp_path: Path, spec: Path, server: OAIServer) -> None:
    cache = tmp_path / "c" / "responses.sqlite"
    cache.parent.mkdir()
    with sqlite3.connect(cache) as con:
        con.execute("CREATE TABLE responses (k TEXT PRIMARY KEY, v BLOB)")
        con.execute("INSERT INTO responses VALUES ('x', 'y')")
    _check_survived(tmp_path, spec, server, cache, "other_schema")


def test_not_sqlite(tmp_path: Path, spec: Path, server: OAIServer) -> None:
    cache = tmp_path / "c" / "responses.sqlite"
    cache.parent.mkdir()
    cache.write_bytes(b"this is not a database\n" * 400)
    _check_survived(tmp_path, spec, server, cache, "not_sqlite")


def test_stored_value_of_another_shape(tmp_path: Path) -> None:
    """A readable cache whose value is not an answer: a miss (asked again), never an item error."""
    import asyncio

    from llmscope.engine.cache import CachedBackend, ResponseCache
    from llmscope.engine.types import NextTokenOut

    class Inner:
        kind = "fake"
        capabilities = None

        def describe(self) -> dict:
            return {"model": "m"}

        async def next_token(
            self, prompt: str, answers: list[str], *, chat: bool = True, top_k: int = 20
        ) -> NextTokenOut:
            return NextTokenOut(
                prompt=prompt, probs={"yes": 0.7, "no": 0.3}, other=0.0, top=[], n_tokens=3
            )

    rc = ResponseCache(tmp_path / "r.sqlite")
    be = CachedBackend(Inner(), rc)  # type: ignore[arg-type]
    first = asyncio.run(be.next_token("p", ["yes", "no"]))
    rc.close()
    with sqlite3.connect(tmp_path / "r.sqlite") as con:
        con.execute("UPDATE responses SET value = '{\"unexpected\": 1}'")
    rc = ResponseCache(tmp_path / "r.sqlite")
    be = CachedBackend(Inner(), rc)  # type: ignore[arg-type]
    again = asyncio.run(be.next_token("p", ["yes", "no"]))
    assert again.probs == first.probs and be.misses == 1 and be.hits == 0
    rc.close()


def test_embedding_cache_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The embedding cache: a file that is not SQLite is set aside with a warning, and a new
    one stores and returns the vectors."""
    from llmscope.engine.embed import _DiskCache

    monkeypatch.setenv("LLMSCOPE_CACHE", str(tmp_path / "cache"))
    dc = _DiskCache(tmp_path / "model")
    assert dc.path is not None
    dc.path.parent.mkdir(parents=True)
    dc.path.write_bytes(b"garbage" * 1000)
    with caplog.at_level("WARNING"):
        assert dc.get(["a"]) == {}
    assert any(str(dc.path) in r.getMessage() for r in caplog.records)
    assert [f for f in dc.path.parent.iterdir() if ".damaged-" in f.name]
    dc.put({"a": np.array([1.0, 2.0], dtype=np.float32)})
    got = dc.get(["a"])
    assert got["a"].tolist() == [1.0, 2.0]
