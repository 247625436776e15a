"""Runs remember how they were made: `--resume ID` alone continues an API run
against the same endpoint, retries errored items (or keeps them with --no-retry-errors),
refuses option changes that would alter what the run measures, and bad numbers are
refused at the edge. Real HTTP against the scripted OpenAI-wire server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.helpers.cli import assert_clean_error, cli, cli_env
from tests.helpers.oai import CANARY_KEY, oai, oai_server  # noqa: F401

N = 6  # items; two variants each


def _suite(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "items.jsonl", "w", encoding="utf-8") as f:
        for i in range(N):
            marker = "[flaky]" if i < 2 else "[fine]"
            f.write(
                json.dumps(
                    {
                        "id": f"r{i}",
                        "text": f"{marker} claim {i}",
                        "gold": "yes",
                        "topic": "odd" if i % 2 else "even",
                    }
                )
                + "\n"
            )
    (folder / "suite.yaml").write_text(
        "name: resume-api\ntask: yesno\nitems: items.jsonl\n"
        "templates:\n  a: '{text} Answer yes or no.'\n  b: 'True or not? {text}'\n",
        encoding="utf-8",
    )
    return folder / "suite.yaml"


def _env() -> dict[str, str]:
    return cli_env(OPENAI_API_KEY=CANARY_KEY)


def _db_rows(db: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(
            "SELECT item_id, variant, error, p_yes FROM results ORDER BY item_id, variant"
        ).fetchall()
    finally:
        con.close()


def _run_row(db: Path) -> dict[str, Any]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute("SELECT * FROM runs")
        cols = [d[0] for d in cur.description]
        (row,) = cur.fetchall()
        return dict(zip(cols, row, strict=True))
    finally:
        con.close()


def _script(server: Any, faults: bool) -> None:
    server.script("[fine]", top=[["Yes", -0.4], ["No", -1.2]])
    server.script(
        "[flaky]",
        top=[["Yes", -0.1], ["No", -2.5]],
        faults=[{"status": 503, "message": f"overloaded {k}"} for k in range(4)] if faults else [],
    )


@pytest.fixture(scope="module")
def made(oai_server: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:  # noqa: F811
    """One first run for the module; tests that change it work on a copy."""
    oai_server.reset()
    return _first_run(oai_server, tmp_path_factory.mktemp("resume"))


def _copy(made: tuple[Path, str], tmp_path: Path, oai: Any) -> tuple[Path, str]:  # noqa: F811
    import shutil

    db = tmp_path / "copy.duckdb"
    shutil.copy(made[0], db)
    _script(oai, faults=False)  # the server was reset; the faults were spent by the first run
    return db, made[1]


def _first_run(oai: Any, tmp_path: Path) -> tuple[Path, str]:  # noqa: F811
    """A run whose four [flaky] prompts fail once each (HTTP 503, no retries): 4 error rows."""
    _script(oai, faults=True)
    db = tmp_path / "r.duckdb"
    proc = cli(
        "run",
        "--suite",
        str(_suite(tmp_path / "s")),
        "--model",
        "openai:test-model",
        "--base-url",
        oai.base_url,
        "--max-retries",
        "0",
        "--concurrency",
        "2",
        "--db",
        str(db),
        "--no-report",
        env=_env(),
    )
    assert proc.returncode == 1, proc.stderr  # errors stored: exit 1
    rows = _db_rows(db)
    assert len(rows) == 2 * N and sum(r[2] is not None for r in rows) == 4
    run = _run_row(db)
    assert run["status"] == "completed_with_errors"
    return db, str(run["run_id"])


def test_config_is_stored_without_the_key(made: tuple[Path, str], oai) -> None:  # noqa: F811
    db, _ = made
    run = _run_row(db)
    cfg = json.loads(run["backend_config"])
    assert cfg["base_url"] == oai.base_url and cfg["kind"] == "openai" and cfg["max_retries"] == 0
    assert cfg["concurrency"] == 2 and cfg["model"] == "openai:test-model"
    assert CANARY_KEY not in run["backend_config"]
    assert run["owner_pid"] is not None and run["heartbeat_at"] is not None


def test_resume_alone_retries_errors_on_the_same_server(
    made: tuple[Path, str],
    oai,
    tmp_path: Path,  # noqa: F811
) -> None:  # noqa: F811
    db, run_id = _copy(made, tmp_path, oai)
    before = len(oai.log("[flaky]"))
    proc = cli("run", "--resume", run_id, "--db", str(db), "--no-report", env=_env())
    assert proc.returncode == 0, proc.stderr
    # exactly the four errored prompts went again, to this server (no --base-url given)
    assert len(oai.log("[flaky]")) - before == 4
    rows = _db_rows(db)
    assert len(rows) == 2 * N and all(r[2] is None for r in rows)
    # P(yes) of a [flaky] item under the all-present rule: e^-0.1 / (e^-0.1 + e^-2.5)
    import math

    want = math.exp(-0.1) / (math.exp(-0.1) + math.exp(-2.5))
    assert rows[0][3] == pytest.approx(want, abs=1e-9)
    run = _run_row(db)
    assert run["status"] == "completed" and run["n_errors"] == 0 and run["n_done"] == 2 * N
    assert json.loads(run["meta"])["last_session"]["retried_errors"] == 4


def test_no_retry_errors_keeps_them(made: tuple[Path, str], oai, tmp_path: Path) -> None:  # noqa: F811
    db, run_id = _copy(made, tmp_path, oai)
    before = len(oai.log())
    proc = cli(
        "run", "--resume", run_id, "--db", str(db), "--no-retry-errors", "--no-report", env=_env()
    )
    assert proc.returncode == 1, proc.stderr
    assert len(oai.log()) - before <= 1  # at most the capability probe; no item was sent
    assert sum(r[2] is not None for r in _db_rows(db)) == 4
    assert _run_row(db)["status"] == "completed_with_errors"


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--top-logprobs", "5"], "top_logprobs: 20 -> 5"),
        (["--base-url", "http://127.0.0.1:9/v1"], "base_url:"),
        (["--model", "openai:other-model"], "model: 'openai:test-model' -> 'openai:other-model'"),
        (["--seed", "7"], "seed: 0 -> 7"),
    ],
)
def test_resume_refuses_identity_changes(
    made: tuple[Path, str],
    oai,
    flags: list[str],
    needle: str,  # noqa: F811
) -> None:  # noqa: F811
    db, run_id = made
    before = (len(oai.log()), _db_rows(db))
    err = assert_clean_error(
        cli("run", "--resume", run_id, "--db", str(db), *flags, env=_env()),
        "would change what it measures",
        needle,
    )
    assert "Drop those flags" in err
    assert (len(oai.log()), _db_rows(db)) == before  # nothing sent, nothing written


def test_resume_may_change_speed_options(made: tuple[Path, str], oai, tmp_path: Path) -> None:  # noqa: F811
    db, run_id = _copy(made, tmp_path, oai)
    proc = cli(
        "run",
        "--resume",
        run_id,
        "--db",
        str(db),
        "--concurrency",
        "1",
        "--timeout",
        "30",
        "--no-report",
        env=_env(),
    )
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(_run_row(db)["backend_config"])
    assert cfg["concurrency"] == 1 and cfg["timeout"] == 30 and cfg["base_url"] == oai.base_url


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--limit", "0"], "--limit must be a positive number of items (1 or more), got 0"),
        (["--limit", "-5"], "--limit must be a positive number of items (1 or more), got -5"),
        (["--concurrency", "0"], "--concurrency must be between 1 and 1024, got 0"),
        (["--top-logprobs", "1000"], "--top-logprobs must be between 1 and 100, got 1000"),
        (["--timeout", "-1"], "--timeout must be between"),
        (["--batch-size", "0"], "--batch-size must be between 1 and 65536"),
        (["--samples", "0"], "--samples must be between 1 and 10000"),
        (["--max-retries", "-1"], "--max-retries must be between 0 and 100"),
        (["--dtype", "float8"], "--dtype must be one of auto, float32, bfloat16, float16"),
    ],
)
def test_bad_numbers_are_refused_before_anything_is_written(
    tmp_path: Path, flags: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmscope.cli import (
        main,  # in process: the same code path as the command, without a start-up
    )

    db = tmp_path / "never.duckdb"
    rc = main(
        [
            "run",
            "--suite",
            "commonsense-sample",
            "--model",
            "openai:m",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--db",
            str(db),
            *flags,
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("llmscope: error: ") and needle in err, err
    assert err.count("\n") == 1  # one line
    assert not db.exists()


def test_report_by_must_name_a_field(made: tuple[Path, str]) -> None:
    db, _ = made
    err = assert_clean_error(
        cli("report", "--db", str(db), "--by", "nosuchfield", env=_env()),
        "--by nosuchfield: not a field of suite resume-api",
    )
    assert "topic" in err and "variant" in err  # the allowed names are listed
    ok = cli("report", "--db", str(db), "--by", "topic", "--json", env=_env())
    assert ok.returncode == 0, ok.stderr
    groups = {
        json.dumps(r.get("group"), sort_keys=True)
        for r in json.loads(ok.stdout)
        if r.get("metric") == "accuracy"
    }
    assert '{"topic": "even"}' in groups and '{"topic": "odd"}' in groups
