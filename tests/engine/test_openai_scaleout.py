"""Several base URLs (a fleet of replicas): round-robin, per-endpoint concurrency, every
replica checked by the probe, `@FILE` lists. Two real scripted servers over HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from llmscope import cli
from llmscope.engine.backend import BackendConfigError
from llmscope.engine.openai import OpenAIBackend, expand_base_urls
from tests.helpers.cli import api_run_args, write_api_suite
from tests.helpers.midrun import release_when_held
from tests.helpers.oai import CANARY_KEY, OAIServer, running_pair

TOP = [["Yes", -0.3], ["No", -1.6]]


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[OAIServer, OAIServer]]:
    with running_pair() as servers:
        yield servers


@pytest.fixture
def pair(
    fleet: tuple[OAIServer, OAIServer], monkeypatch: pytest.MonkeyPatch
) -> tuple[OAIServer, OAIServer]:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for s in fleet:
        s.reset()
    return fleet


async def test_round_robin_with_per_endpoint_concurrency(pair: tuple[OAIServer, OAIServer]) -> None:
    a, b = pair
    # each replica answers its first request, then holds the next ones until both hold as many
    # as the limit allows: the limit is reached on any machine (tests/helpers/midrun.py)
    for s in pair:
        s.script("[fleet]", top=TOP, hold_after=1)

    be = OpenAIBackend("test-model", base_url=[a.base_url, b.base_url], concurrency=2, timeout=300)
    try:
        outs = (
            await asyncio.gather(
                release_when_held((a, "[fleet]", 2), (b, "[fleet]", 2)),
                *(be.next_token(f"[fleet] {i}", ["yes", "no"]) for i in range(12)),
            )
        )[1:]
        st, d = be.stats(), be.describe()
    finally:
        await be.aclose()
    assert len(outs) == 12
    # the first request settles log-prob support; then requests alternate between replicas
    na, nb = len(a.log("[fleet]")), len(b.log("[fleet]"))
    assert na + nb == 12 and abs(na - nb) <= 1
    assert st["requests_per_endpoint"] == [na, nb]
    # each replica had exactly `concurrency` requests at once at its busiest: the limit is per replica
    assert a.server_stats()["max_active"]["[fleet]"] == 2
    assert b.server_stats()["max_active"]["[fleet]"] == 2
    assert d["base_urls"] == [a.base_url, b.base_url]


async def test_probe_checks_every_replica(pair: tuple[OAIServer, OAIServer]) -> None:
    a, _ = pair
    be = OpenAIBackend("test-model", base_url=[a.base_url, "http://127.0.0.1:9/v1"], timeout=2)
    try:
        with pytest.raises(BackendConfigError, match=r"cannot use http://127.0.0.1:9/v1"):
            await be.probe("yesno")
    finally:
        await be.aclose()


def test_base_url_file(tmp_path: Path) -> None:
    f = tmp_path / "urls.txt"
    f.write_text("# replicas\nhttp://10.0.0.1:8000/v1/\n\nhttp://10.0.0.2:8000/v1  # second\n")
    assert expand_base_urls(["@" + str(f)]) == [
        "http://10.0.0.1:8000/v1",
        "http://10.0.0.2:8000/v1",
    ]
    with pytest.raises(BackendConfigError, match="cannot read"):
        expand_base_urls(["@" + str(tmp_path / "missing.txt")])
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(BackendConfigError, match="no URLs"):
        expand_base_urls(["@" + str(tmp_path / "empty.txt")])


def test_cli_run_over_two_replicas(
    pair: tuple[OAIServer, OAIServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = pair
    for s in pair:
        s.script("", top=TOP)
    spec = write_api_suite(tmp_path, [f"s{k}" for k in range(10)], "f")
    urls = tmp_path / "urls.txt"
    urls.write_text(f"{b.base_url}\n")
    db = tmp_path / "r.duckdb"
    rc = cli.main(api_run_args(spec, db, a.base_url, "--base-url", "@" + str(urls), "--no-report"))
    assert rc == 0, capsys.readouterr().err
    con = duckdb.connect(str(db), read_only=True)
    n, scored = con.execute("SELECT count(*), count(p_yes) FROM results").fetchone()
    meta = json.loads(con.execute("SELECT meta FROM runs").fetchone()[0])
    con.close()
    assert n == scored == 10
    assert meta["backend"]["base_urls"] == [a.base_url, b.base_url]
    assert len(a.log()) >= 5 and len(b.log()) >= 5  # items spread over both (probes on both)
