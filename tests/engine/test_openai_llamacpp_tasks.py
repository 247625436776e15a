"""Built-in suites against a server with llama.cpp's echo bug, fast, on the scripted
server (tests/oai_server.py): tasks that need log-likelihoods of given text stop before the
run with one line; the choice fallback keeps the suite's extra scoring schemes; the recorded
capabilities say only what was tried.

The real llama.cpp server runs the same suites in tests/test_server_llamacpp.py (marked server).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import duckdb
import pytest

from llmscope import cli
from tests.helpers import oai as oai_fixtures
from tests.helpers.oai import OAIServer

oai_server = oai_fixtures.oai_server
oai = oai_fixtures.oai


def _run(
    capsys: pytest.CaptureFixture[str], suite: str, db: Path, url: str, *extra: str
) -> tuple[int, str, str]:
    rc = cli.main(
        [
            "run",
            "--suite",
            suite,
            "--db",
            str(db),
            "--model",
            "openai:test-model",
            "--base-url",
            url,
            "--max-retries",
            "2",
            "--timeout",
            "2",
            "--no-report",
            "--quiet",
            *extra,
        ]
    )
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return rc, out.out, out.err


@pytest.mark.parametrize(
    ("suite", "task"), [("syntax-sample", "syntaxgym"), ("contamination-sample", "contamination")]
)
def test_loglik_tasks_stop_before_the_run_with_one_line(
    oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], suite: str, task: str
) -> None:
    oai.script("", echo_shift=True)
    db = tmp_path / "x.duckdb"
    rc, _, err = _run(capsys, suite, db, oai.base_url, "--limit", "2")
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("loading model")]
    # one line: the echo-refused notice is carried by the error, not printed before it as well
    assert len(lines) == 1, lines
    assert lines[0].startswith("llmscope: error:") and f"cannot score task {task!r}" in lines[0]
    assert "disagree" in lines[0]
    # nothing scored: no run, no errored rows; no scoring request beyond the probe
    if db.exists():
        con = duckdb.connect(str(db), read_only=True)
        assert con.execute("SELECT count(*) FROM results").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
        con.close()


def test_choice_by_labels_keeps_the_extra_schemes(
    oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # every chat answer: A -0.5, B -2.0, C -3.0 (the rating scheme's labels "1".."5" absent)
    oai.script("", echo_shift=True, top=[["A", -0.5], ["B", -2.0], ["C", -3.0]])
    db = tmp_path / "p.duckdb"
    rc, _, err = _run(
        capsys,
        "pragmatics-choice",
        db,
        oai.base_url,
        "--limit",
        "1",
        "--opt",
        'schemes=["labels","free"]',
    )
    assert rc == 0, err
    con = duckdb.connect(str(db), read_only=True)
    (extra, options) = con.execute("SELECT extra, option_scores FROM results").fetchone()
    (meta,) = con.execute("SELECT meta FROM runs").fetchone()
    con.close()
    extra = json.loads(extra)
    assert extra["choice_method"] == "labels"
    # both schemes scored through the API although the main method fell back to labels
    assert set(extra["methods"]) == {"labels", "free"}
    lab = extra["methods"]["labels"]
    # labels scheme: P(A), P(B), P(C) renormalised over the three letters
    z = math.exp(-0.5) + math.exp(-2.0) + math.exp(-3.0)
    probs = {o: json.loads(options)[o]["label_prob"] for o in json.loads(options)}
    assert sorted(probs.values(), reverse=True) == pytest.approx(
        [math.exp(-0.5) / z, math.exp(-2.0) / z, math.exp(-3.0) / z]
    )
    assert lab["prediction"] == max(probs, key=lambda o: probs[o])
    assert "free" in extra["schemes"] and "text" in extra["schemes"]["free"]
    caps = json.loads(meta)["backend"]["capabilities"]
    # echo was refused on one prompt before any list of prompts was sent: batching is unknown
    assert caps["echo_loglik"] is False and caps["batched_prompts"] is None
