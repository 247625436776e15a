"""The API fault matrix: `llmscope run` against the scripted server
with one fault each, and the outcome the user must get.

Every case checks: every item accounted for (a result or an error row with the reason),
nothing duplicated, the run's status, the exit code and no traceback. Runs go through the
real CLI entry point in-process (real HTTP, real DuckDB); expected numbers are computed
here from the scripted log-probs.
"""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any

import duckdb
import pytest

from llmscope import cli
from tests.helpers import oai as oai_fixtures
from tests.helpers.cli import api_run_args, write_api_suite
from tests.helpers.oai import CANARY_KEY, OAIServer, note_fault_outcome

oai_server = oai_fixtures.oai_server
oai = oai_fixtures.oai

E = math.exp
TOP = [["Yes", -0.3], ["No", -1.6], ["The", -3.0]]  # mass 0.993
PROBE = "Answer yes or no: is water wet?"


_note = note_fault_outcome


def _yesno_suite(tmp: Path, texts: list[str]) -> Path:
    return write_api_suite(tmp, texts, "faults")


def _run(
    capsys: pytest.CaptureFixture[str], spec: Path, db: Path, base_url: str, *extra: str
) -> tuple[int, str]:
    rc = cli.main(
        api_run_args(
            spec, db, base_url, "--max-retries", "2", "--timeout", "30", "--no-report", *extra
        )
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def _rows(db: Path) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT item_id, variant, p_yes, p_no, other, correct, error, extra FROM results ORDER BY item_id"
        ).fetchall()
        run = con.execute("SELECT status, meta, n_done, n_errors FROM runs").fetchall()
    finally:
        con.close()
    assert len(run) == 1
    status, meta, n_done, n_errors = run[0]
    keys = [(r[0], r[1]) for r in rows]
    assert len(keys) == len(set(keys)), "duplicated rows"
    return rows, {
        "status": status,
        "meta": json.loads(meta),
        "n_done": n_done,
        "n_errors": n_errors,
    }


def _no_run_stored(db: Path) -> None:
    if not db.exists():
        return
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = {
            r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        }
        if "runs" in tables:
            assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
        if "results" in tables:
            assert con.execute("SELECT count(*) FROM results").fetchone() == (0,)
    finally:
        con.close()


def _setup(oai: OAIServer, tmp: Path, fault: dict[str, Any] | None = None, **spec: Any) -> Path:
    oai.script(PROBE, top=TOP)
    oai.script("[ok]", top=TOP)
    oai.script("[hit]", **{"top": TOP, **({"faults": [fault] * 2} if fault else {}), **spec})
    return _yesno_suite(tmp, ["[ok] sky", "[hit] sea", "[ok] moon"])


def _run_three(
    capsys: pytest.CaptureFixture[str],
    oai: OAIServer,
    tmp: Path,
    want_rc: int,
    fault: dict[str, Any] | None = None,
    extra: tuple[str, ...] = (),
    **spec: Any,
) -> tuple[int, list[tuple[Any, ...]], dict[str, Any]]:
    """Run the three-item suite of `_setup` with `fault` on its middle item; every item stored once."""
    db = tmp / "r.duckdb"
    rc, err = _run(capsys, _setup(oai, tmp, fault, **spec), db, oai.base_url, *extra)
    assert rc == want_rc, err
    rows, run = _rows(db)
    assert [r[0] for r in rows] == ["i0", "i1", "i2"]
    return rc, rows, run


def _expected_yes() -> float:
    s = E(-0.3) + E(-1.6) + E(-3.0)
    return E(-0.3) / s


# ------------------------------------------------------------ transient faults: recovered

TRANSIENT = {
    "429": ({"status": 429, "headers": {"Retry-After": "0.05"}}, "rate_limited"),
    "500": ({"status": 500}, "server_errors"),
    "503+Retry-After": ({"status": 503, "headers": {"Retry-After": "0.1"}}, "server_errors"),
    "reset mid-body": ({"reset": True}, "connection_errors"),
    # held far past the request timeout (5 s here; 30 s in the other cases, so that a slow answer
    # from a loaded machine is never taken for a fault)
    "hang past timeout": ({"sleep": 300}, "timeouts"),
    "malformed JSON": ({"malformed": True}, "malformed"),
    "200 empty choices": (
        {"json": {"id": "x", "object": "chat.completion", "choices": []}},
        "malformed",
    ),
    "null logprobs (once)": ({"spec": {"no_logprobs": True}}, "invalid"),
    "NaN logprobs (once)": ({"spec": {"top": [["Yes", float("nan")], ["No", -1.0]]}}, "invalid"),
}


@pytest.mark.parametrize("case", list(TRANSIENT))
def test_transient_fault_is_retried_and_scored(
    case: str, oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fault, counter = TRANSIENT[case]
    extra = ("--timeout", "5") if counter == "timeouts" else ()
    rc, rows, run = _run_three(capsys, oai, tmp_path, 0, fault, extra)
    assert run["status"] == "completed" and run["n_errors"] == 0
    for r in rows:  # every item scored from log-probs, with the hand-computed numbers
        assert r[6] is None
        assert r[2] == pytest.approx(_expected_yes(), abs=1e-9)
        assert json.loads(r[7])["method"] == "logprobs"
    stats = run["meta"]["backend_stats"]
    assert stats[counter] >= 2, stats  # both scripted faults seen and retried
    assert stats["failed"] == 0
    # the run was scored by log-probs throughout: one transient answer did not switch methods
    assert run["meta"]["backend"]["method_choice"]["method"] == "chat top-k log-probs"
    assert [e["outcome"].startswith("fault") for e in oai.log("[hit]")] == [True, True, False]
    _note(
        case,
        f"2 faults, 3 requests, scored; status {run['status']}, exit {rc}, {counter}={stats[counter]}",
    )


# ------------------------------------------------------------ persistent faults: item errors

PERSISTENT = {
    "NaN logprobs": ({"top": [["Yes", float("nan")], ["No", -1.0]]}, "not finite"),
    "+Infinity logprobs": ({"top": [["Yes", float("inf")], ["No", -1.0]]}, "not finite"),
    "positive logprobs": ({"top": [["Yes", 0.5], ["No", -1.0]]}, "above 0"),
    "null logprobs after the probe had them": ({"no_logprobs": True}, "without logprobs"),
    "500 with the same body every time": (
        {"error": {"status": 500, "message": "kv cache full"}},
        "HTTP 500",
    ),
}


@pytest.mark.parametrize("case", list(PERSISTENT))
def test_persistent_fault_is_an_item_error_never_a_score(
    case: str, oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_kw, reason = PERSISTENT[case]
    rc, rows, run = _run_three(capsys, oai, tmp_path, 1, None, **spec_kw)
    assert run["status"] == "completed_with_errors" and run["n_errors"] == 1
    bad = rows[1]
    assert bad[2] is None and bad[5] is None  # no probabilities, no correctness
    assert reason in bad[6]
    for r in (rows[0], rows[2]):
        assert r[6] is None and r[2] == pytest.approx(_expected_yes(), abs=1e-9)
    n_hit = len(oai.log("[hit]"))
    if case.startswith("500"):
        assert n_hit == 3  # classified as deterministic after 3 identical answers, not 6 retries
    else:
        assert n_hit == 3  # 1 + --max-retries 2
    _note(
        case,
        f"item error after {n_hit} requests ({bad[6][:70]}...); others scored; "
        f"status {run['status']}, exit {rc}",
    )


# ------------------------------------------------------------ configuration: fail fast


def test_unreachable_server_fails_fast_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    spec = _yesno_suite(tmp_path, ["a", "b"])
    db = tmp_path / "r.duckdb"
    rc, err = _run(capsys, spec, db, "http://127.0.0.1:9/v1")
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.startswith("llmscope: error:")]
    assert len(lines) == 1 and "cannot use http://127.0.0.1:9/v1" in lines[0]
    assert "connection" in lines[0].lower()
    _no_run_stored(db)
    _note("unreachable base URL", f"exit {rc}, one line, no run stored: {lines[0][17:100]}...")


def test_missing_key_for_default_endpoint_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    spec = _yesno_suite(tmp_path, ["a"])
    db = tmp_path / "r.duckdb"
    rc = cli.main(["run", "--suite", str(spec), "--db", str(db), "--model", "openai:gpt-4o-mini"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("llmscope: error: OPENAI_API_KEY is not set")
    _no_run_stored(db)


def test_401_fails_fast_with_one_line(
    oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oai.script("", error={"status": 401, "message": f"Incorrect API key provided: {CANARY_KEY}"})
    spec = _yesno_suite(tmp_path, ["a", "b"])
    db = tmp_path / "r.duckdb"
    rc, err = _run(capsys, spec, db, oai.base_url)
    assert rc == 2
    assert "API key was rejected (HTTP 401" in err and CANARY_KEY not in err
    assert len(oai.log()) == 1  # a 401 is not retried
    _no_run_stored(db)
    _note("401", f"exit {rc} after 1 request, one line (API key was rejected), no run stored")


@pytest.mark.parametrize(
    ("status", "message", "shown", "case"),
    [
        (
            404,
            "The model `test-model` does not exist",
            "model 'test-model' or the endpoint was not found",
            None,
        ),
        (
            400,
            "logprobs is not supported",
            "rejects the probe request (HTTP 400: logprobs is not supported)",
            "400 on every request",
        ),
    ],
    ids=["404-model", "400-every-request"],
)
def test_an_error_status_on_every_request_fails_fast(
    oai: OAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    status: int,
    message: str,
    shown: str,
    case: str | None,
) -> None:
    oai.script("", error={"status": status, "message": message})
    spec = _yesno_suite(tmp_path, ["a"])
    db = tmp_path / "r.duckdb"
    rc, err = _run(capsys, spec, db, oai.base_url)
    assert rc == 2 and shown in err
    _no_run_stored(db)
    if case:
        _note(case, f"exit {rc}, one line, no run stored")


def test_400_logprobs_not_supported_uses_sampled_estimate(
    oai: OAIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 400 'logprobs is not supported' on every request with logprobs."""
    reject = [
        {
            "param": "logprobs",
            "present": True,
            "message": "logprobs is not supported",
            "hide_param": True,
        }
    ]
    oai.script("", reject=reject, samples=["Yes", "yes", "No", "Yes"])
    spec = _yesno_suite(tmp_path, ["a", "b"])
    db = tmp_path / "r.duckdb"
    rc, err = _run(capsys, spec, db, oai.base_url, "--samples", "4")
    assert rc == 0, err
    rows, run = _rows(db)
    assert len(rows) == 2 and run["status"] == "completed"
    choice = run["meta"]["backend"]["method_choice"]
    assert choice["method"] == "sampled estimate (4 answers)"
    assert "logprobs is not supported" in choice["reason"]
    assert "method: sampled estimate (4 answers)" in err
    _note(
        "400 logprobs not supported",
        f"sampled estimate chosen and shown; status {run['status']}, exit {rc}",
    )
    # the no-logprobs warning is emitted once (through the backend's logger, which pytest
    # captures here; a terminal gets it on stderr) and the CLI does not repeat it
    warned = [r for r in caplog.records if "log-probabilities" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelname == "WARNING"
    assert err.count("log-probabilities") == 0


# ------------------------------------------------------------ circuit breaker


def test_server_that_stops_answering_pauses_the_run(
    oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oai.script(PROBE, top=TOP)
    oai.script("[ok]", top=TOP)
    oai.script("[dead]", top=TOP, delay=300.0)  # accepts the connection, never answers in time
    spec = _yesno_suite(tmp_path, ["[ok] a"] + [f"[dead] {k}" for k in range(12)])
    db = tmp_path / "r.duckdb"
    rc, err = _run(capsys, spec, db, oai.base_url, "--timeout", "3", "--concurrency", "4")
    assert rc == 130
    assert "stopped answering" in err and "resume" in err
    rows, run = _rows(db)
    assert run["status"] == "interrupted"
    assert all(r[6] is None for r in rows)  # no error rows: the rest is left for resume
    n_dead = len(oai.log("[dead]"))
    assert n_dead <= 8 + 4  # breaker_after=8, plus requests already in flight
    _note(
        "server stops answering",
        f"paused after {n_dead} timed-out requests: status {run['status']}, "
        f"exit {rc}, 0 error rows, {len(rows)} scored kept",
    )


# ------------------------------------------------------------ secrets


def test_error_body_echoing_headers_is_redacted_everywhere(
    oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oai.script(PROBE, top=TOP)
    oai.script("[ok]", top=TOP)
    oai.script("[leak]", error={"status": 422, "message": "rejected", "echo_request": True})
    spec = _yesno_suite(tmp_path, ["[ok] a", "[leak] b"])
    db = tmp_path / "r.duckdb"
    rc, err = _run(capsys, spec, db, oai.base_url)
    assert rc == 1
    rows, _ = _rows(db)
    assert "rejected -- request headers" in rows[1][6]  # the error is kept, the key is not
    b64 = base64.b64encode(CANARY_KEY.encode()).decode()
    for blob in (
        db.read_bytes().decode("latin-1"),
        err,
        *(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p != db),
    ):
        assert CANARY_KEY not in blob and b64.rstrip("=") not in blob
        assert "Bearer sk-" not in blob


def test_userinfo_in_base_url_is_refused(
    oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _yesno_suite(tmp_path, ["a"])
    db = tmp_path / "r.duckdb"
    url = oai.base_url.replace("http://", f"http://user:{CANARY_KEY}@")
    rc, err = _run(capsys, spec, db, url)
    assert rc == 2 and "must not contain user:password@" in err
    assert CANARY_KEY not in err
    assert oai.log() == []  # nothing was sent anywhere
    _no_run_stored(db)
