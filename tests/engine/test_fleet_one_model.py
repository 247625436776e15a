"""A fleet measures one model, and a bad replica leaves the rotation: real `llmscope run`
subprocesses over two scripted servers (tests/helpers/oai_server.py), counts recomputed from
the stored rows and from each server's own request log.

- a replica serving another model is left out at the start with one line naming it; none of
  the stored rows comes from it, and `report` says so;
- replicas that disagree, none serving the `--model` name: the run refuses, naming each;
- a replica whose model is swapped mid-run is taken out; its answers after the swap are not
  stored (their items are scored on the other replica), and `report` says so;
- a replica that hangs keeps only the requests already on its slots; the rest go to the
  healthy one;
- a replica answering HTTP 200 with error bodies, or with top-k probabilities summing above 1,
  leaves the rotation: every item is stored without error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.helpers.cli import api_run_args, write_api_suite
from tests.helpers.oai import CANARY_KEY, OAIServer, running_pair

YES = [["Yes", -0.3], ["No", -1.6]]  # the run's model: answers yes
NO = [["No", -0.2], ["Yes", -1.9]]  # the other model: answers no
MARK = "[fleet1]"
N = 30


@pytest.fixture
def pair() -> Iterator[tuple[OAIServer, OAIServer]]:
    with running_pair() as servers:
        yield servers


def _suite(tmp_path: Path, n: int = N) -> Path:
    texts = [f"s{k}" for k in range(n)]
    template = f"{MARK} {{text}} Answer yes or no."
    return write_api_suite(tmp_path, texts, "f1", ids="i{k:03d}", template=template)


def _run(tmp_path: Path, urls: list[str], *extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "OPENAI_API_KEY": CANARY_KEY,
        "OMP_NUM_THREADS": "1",
        "HOME": str(tmp_path),
    }
    env.pop("OPENAI_BASE_URL", None)
    more = [x for u in urls[1:] for x in ("--base-url", u)]
    args = api_run_args(
        _suite(tmp_path),
        tmp_path / "r.duckdb",
        urls[0],
        *more,
        "--concurrency",
        "2",
        "--quiet",
        "--no-report",
        *extra,
    )
    return subprocess.run(
        [sys.executable, "-m", "llmscope", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _stored(tmp_path: Path) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
    con = duckdb.connect(str(tmp_path / "r.duckdb"), read_only=True)
    rows = [
        {
            "item_id": r[0],
            "p_yes": r[1],
            "p_no": r[2],
            "error": r[3],
            "extra": json.loads(r[4] or "{}"),
        }
        for r in con.execute("select item_id, p_yes, p_no, error, extra from results").fetchall()
    ]
    status, meta = con.execute("select status, meta from runs").fetchone()  # type: ignore[misc]
    con.close()
    return rows, status, json.loads(meta)


def _completed(
    tmp_path: Path, urls: list[str], *extra: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], dict[str, Any]]:
    """Run on `urls`; the run exits 0, is stored completed, and stores each item exactly once."""
    p = _run(tmp_path, urls, *extra)
    assert p.returncode == 0, p.stderr[-2000:]
    rows, status, meta = _stored(tmp_path)
    assert status == "completed"
    assert sorted(r["item_id"] for r in rows) == [f"i{k:03d}" for k in range(N)]
    return p, rows, meta


def _report_err(tmp_path: Path) -> str:
    env = {**os.environ, "HOME": str(tmp_path)}
    p = subprocess.run(
        [sys.executable, "-m", "llmscope", "report", "--db", str(tmp_path / "r.duckdb")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return p.stderr


def _marked(server: OAIServer) -> list[dict[str, Any]]:
    """The server's requests for the suite's items (not the probe's)."""
    return [e for e in server.log() if MARK in json.dumps(e["body"])]


def test_a_replica_serving_another_model_is_left_out_by_name(pair: Any, tmp_path: Path) -> None:
    a, b = pair
    # the other model is the FIRST URL: the capabilities are learned from the one kept
    b.script("", model="other-model-70b", top=NO)
    a.script(MARK, top=YES)
    p, rows, meta = _completed(tmp_path, [b.base_url, a.base_url])
    said = [ln for ln in p.stderr.splitlines() if b.base_url in ln]
    assert len(said) == 1 and "left out" in said[0] and "other-model-70b" in said[0], p.stderr
    # recomputed from the rows: every answer from the run's model, every item answered yes
    assert {r["extra"].get("model") for r in rows} == {"test-model"}
    assert sum(r["p_yes"] > r["p_no"] for r in rows) == N
    assert _marked(b) == []  # the other model was asked nothing but the probe
    assert len(_marked(a)) == N
    be = meta["backend"]
    assert be["served_models"] == ["test-model"] and be["expected_model"] == "test-model"
    assert [(e["event"], e["url"]) for e in meta["backend_stats"]["endpoint_events"]] == [
        ("left_out", b.base_url)
    ]
    err = _report_err(tmp_path)
    assert f"{b.base_url} left out at the start" in err and "other-model-70b" in err


def test_replicas_that_disagree_without_the_run_model_are_refused(
    pair: Any, tmp_path: Path
) -> None:
    a, b = pair
    a.script("", model="model-x")
    b.script("", model="model-y")
    p = _run(tmp_path, [a.base_url, b.base_url])
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "do not serve one model" in p.stderr
    assert "'model-x'" in p.stderr and "'model-y'" in p.stderr
    assert _marked(a) == [] and _marked(b) == []


def test_a_replica_swapped_mid_run_is_taken_out_and_its_later_answers_are_not_stored(
    pair: Any, tmp_path: Path
) -> None:
    a, b = pair
    switch_at = 8  # b's 8th request on (its probe is the first): another model, answering no
    a.script(MARK, top=YES)
    b.script("", top=YES, model_after=[switch_at, "other-model-70b"])
    _, rows, meta = _completed(tmp_path, [a.base_url, b.base_url])
    assert all(r["error"] is None for r in rows)
    assert {r["extra"].get("model") for r in rows} == {"test-model"}
    # b's own log: answers before the swap were used, every one after it was sent again to a
    b_log = _marked(b)
    before = [e for e in b_log if e["attempt"] < switch_at]
    after = [e for e in b_log if e["attempt"] >= switch_at]
    assert after, "the swap happened during the run"
    a_prompts = [json.dumps(e["body"]["messages"]) for e in _marked(a)]
    assert len(before) + len(a_prompts) == N  # each item answered once by the run's model
    assert all(json.dumps(e["body"]["messages"]) in a_prompts for e in after)
    st = meta["backend_stats"]
    assert st["model_changed"] == len(after)
    assert [(e["event"], e["url"]) for e in st["endpoint_events"]] == [
        ("model_changed", b.base_url)
    ]
    assert st["endpoints_excluded"][0] is None and "other-model-70b" in st["endpoints_excluded"][1]
    err = _report_err(tmp_path)
    assert f"{b.base_url} taken out mid-run" in err and "not used" in err


def test_a_hanging_replica_keeps_only_the_requests_on_its_slots(pair: Any, tmp_path: Path) -> None:
    a, b = pair
    a.script(MARK, top=YES)
    b.script(MARK, top=YES, delay=600)  # answers the probe, then hangs on every item
    # a timeout long enough that the healthy replica never reaches it on a loaded machine
    _, rows, meta = _completed(tmp_path, [a.base_url, b.base_url], "--timeout", "10")
    assert all(r["error"] is None for r in rows)
    st = meta["backend_stats"]
    hung = _marked(b)
    # only what was on its 2 slots when it hung, plus one trial per cool-off, ever reached it
    assert len(hung) == 2 + st["endpoint_trials"][1]
    assert st["timeouts"] == len(hung)
    assert len(_marked(a)) == N  # every item answered by a (the hung ones sent again)


@pytest.mark.parametrize("fault", ["error_body", "topk_above_one"])
def test_a_replica_with_impossible_200_answers_leaves_the_rotation(
    pair: Any, tmp_path: Path, fault: str
) -> None:
    a, b = pair
    a.script(MARK, top=YES)
    if fault == "error_body":
        b.script(MARK, error_body=True)
    else:
        b.script(MARK, top=[["Yes", -0.1], ["No", -0.2]])  # 0.905 + 0.819 > 1
    _, rows, meta = _completed(tmp_path, [a.base_url, b.base_url])
    assert all(r["error"] is None for r in rows)
    st = meta["backend_stats"]
    bad = _marked(b)
    # every answer b gave counted against it; it was asked again only for its trials
    assert st["endpoint_failures"][1] == len(bad)
    assert len(bad) <= 2 + st["endpoint_trials"][1]
    assert ("down", b.base_url) in [(e["event"], e["url"]) for e in st["endpoint_events"]]
    assert len(_marked(a)) == N


def test_resume_refuses_a_server_that_now_serves_another_model(pair: Any, tmp_path: Path) -> None:
    a, _ = pair
    a.script(MARK, top=YES)
    p = _run(tmp_path, [a.base_url], "--limit", "5")
    assert p.returncode == 0, p.stderr[-2000:]
    a.reset()
    a.script("", model="other-model-70b", top=NO)  # one URL: its own name would be accepted
    p = _run(tmp_path, [a.base_url])
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "measured model 'test-model'" in p.stderr and "'other-model-70b'" in p.stderr
    rows, _, _ = _stored(tmp_path)
    assert len(rows) == 5 and _marked(a) == []  # nothing asked, nothing stored


def test_the_dashboard_banner_and_report_lines_name_the_replica() -> None:
    from llmscope.analysis.api_method import fleet_notes, method_banner

    events = [
        {"event": "down", "url": "http://c/v1", "at": 1.0, "reason": "timed out"},
        {"event": "left_out", "url": "http://a/v1", "at": 2.0, "reason": "it serves 'm2', not 'm'"},
        {"event": "model_changed", "url": "http://b/v1", "at": 3.0, "reason": "now serves 'm3'"},
    ]
    run = {
        "meta": {
            "backend": {"method_choice": {"method": "chat top-k log-probs", "reason": "r"}},
            # the same events in the session list and the latest stats: each said once
            "sessions": [{"backend_stats": {"endpoint_events": events}}],
            "backend_stats": {"endpoint_events": events},
        }
    }
    assert fleet_notes(run) == [
        "fleet: http://a/v1 left out at the start: it serves 'm2', not 'm'",
        "fleet: http://b/v1 taken out mid-run: now serves 'm3'; its answers since were not used "
        "(scored again on the other replicas)",
    ]
    banner = method_banner(run)
    assert (
        banner is not None
        and "http://a/v1 left out" in banner
        and "http://b/v1 taken out" in banner
    )
    # a run still going: the start's decision is in the backend record
    live = {
        "meta": {"backend": {"replicas": [{"url": "http://a/v1", "excluded": "it serves 'm2'"}]}}
    }
    assert fleet_notes(live) == ["fleet: http://a/v1 left out at the start: it serves 'm2'"]


async def test_one_url_that_changes_model_pauses_the_run(
    pair: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmscope.engine.backend import BackendUnavailable
    from llmscope.engine.openai import OpenAIBackend

    a, _ = pair
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    a.script("", top=YES, model_after=[6, "other-model-70b"])
    be = OpenAIBackend("test-model", base_url=a.base_url, timeout=60)
    try:
        await be.probe("yesno")
        done = len(a.log())
        assert done < 6
        outs = [await be.next_token(f"q{i}", ["yes", "no"]) for i in range(6 - done)]
        assert all(o.meta["model"] == "test-model" for o in outs)
        with pytest.raises(BackendUnavailable, match="no replica serves 'test-model'"):
            await be.next_token("after the swap", ["yes", "no"])
        st = be.stats()
        assert st["model_changed"] == 1 and st["breaker"] is not None
        assert [e["event"] for e in st["endpoint_events"]] == ["model_changed"]
    finally:
        await be.aclose()
