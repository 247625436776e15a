"""`rerun --where` accepts one expression over the run's columns and refuses everything else.

A run is made once against the scripted local server (tests/helpers/oai_server.py); each
attack from the hostile probe is then tried through the real CLI in a subprocess, and what it
would have written, read or deleted is checked on disk. Legit filters select the items that a
Python filter over the same stored rows selects."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import duckdb
import pytest

from llmscope.cli.rerun import select_items
from llmscope.runs.where import WhereError
from llmscope.store.db import Store
from tests.helpers.cli import (
    api_run,
    assert_clean_error,
    cli,
    cli_env,
    count_rows,
    write_yesno_suite,
)
from tests.helpers.oai import CANARY_KEY, oai_server  # noqa: F401


@pytest.fixture(scope="module")
def made(oai_server: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:  # noqa: F811
    oai_server.reset()
    base = tmp_path_factory.mktemp("where")
    spec = write_yesno_suite(base / "suite", 12)
    db = base / "r.duckdb"
    proc = api_run(spec, db, oai_server.base_url, "--quiet", "--no-report", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    (run_id,) = con.execute("SELECT run_id FROM runs").fetchone()
    con.close()
    return db, run_id, oai_server.base_url


def _rerun(db: Path, run_id: str, where: str, base_url: str, cwd: Path) -> Any:
    return cli(
        "rerun",
        run_id,
        "--where",
        where,
        "--db",
        str(db),
        "--base-url",
        base_url,
        "--quiet",
        "--no-report",
        env=cli_env(OPENAI_API_KEY=CANARY_KEY),
        cwd=cwd,
    )


def _attacks(tmp_path: Path, db: Path) -> tuple[dict[str, str], Path, Path]:
    out = tmp_path / "out.csv"
    link = tmp_path / "link.duckdb"
    os.link(db, link)  # the probe's trick: ATTACH a hard link of the open file, then DELETE
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT\n")
    return (
        {
            f"1=1; COPY (SELECT 1) TO '{out}'": "only one condition",
            f"correct = 0; COPY r TO '{out}' (FORMAT csv)": "only one condition",
            f"read_text('{secret}') IS NOT NULL": "read_text",
            f"length(read_text('{secret}')) > 0": "read_text",
            f"item_id IN (SELECT content FROM read_text('{secret}'))": "subqueries",
            f"1=1; ATTACH '{link}' AS x; DELETE FROM x.results": "only one condition",
            f"1=1; ATTACH '{link}' AS x": "only one condition",
            f"1=1) UNION SELECT content FROM read_text('{secret}') --": "syntax",
            "1=1; INSTALL httpfs": "only one condition",
            "1=1; SET enable_external_access = true": "only one condition",
            "getenv('HOME') IS NOT NULL": "getenv",
            "current_setting('home_directory') IS NOT NULL": "current_setting",
            "main.results.item_id IS NOT NULL": "unknown column",
            "item_id = 'q1' ORDER BY 1": "only one condition",
            " ": "empty",
        },
        out,
        secret,
    )


def test_attacks_are_refused_and_touch_nothing(made: tuple[Path, str, str], tmp_path: Path) -> None:
    """Every attack through select_items (what `rerun` calls first); nothing is written or read."""
    db, run_id, _ = made
    n_results, n_runs = count_rows(db, "results"), count_rows(db, "runs")
    attacks, out, _ = _attacks(tmp_path, db)
    with Store(str(db), read_only=True) as store:
        df = store.results_frame(run_id)
    for where, needle in attacks.items():
        with pytest.raises(WhereError) as e:
            select_items(df, where)
        msg = str(e.value)
        assert msg.startswith("--where ") and needle in msg and "\n" not in msg, (where, msg)
        assert "TOP-SECRET" not in msg
    assert not out.exists()
    assert count_rows(db, "results") == n_results and count_rows(db, "runs") == n_runs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.duckdb", "secret.txt"]


def test_attacks_through_the_cli(made: tuple[Path, str, str], tmp_path: Path) -> None:
    """The probe's three attacks end to end: one clean line each, nothing written, read or deleted."""
    db, run_id, url = made
    n_results, n_runs = count_rows(db, "results"), count_rows(db, "runs")
    attacks, out, _ = _attacks(tmp_path, db)
    for where in list(attacks)[:1] + list(attacks)[2:3] + list(attacks)[5:6]:
        proc = _rerun(db, run_id, where, url, tmp_path)
        err = assert_clean_error(proc, "--where", "refused")
        assert len(err.strip().splitlines()) == 1 and "TOP-SECRET" not in err + proc.stdout, err
    assert not out.exists()
    assert count_rows(db, "results") == n_results and count_rows(db, "runs") == n_runs


def test_legit_filters_select_what_python_selects(made: tuple[Path, str, str]) -> None:
    db, run_id, _ = made
    with Store(str(db), read_only=True) as store:
        df = store.results_frame(run_id)
    rows = df.to_dict("records")
    order = list(dict.fromkeys(r["item_id"] for r in rows))

    def want(pred: Any) -> list[str]:
        keep = {r["item_id"] for r in rows if pred(r)}
        return [i for i in order if i in keep]

    wrong = want(lambda r: r["correct"] == 0)
    assert 0 < len(wrong) < len(order)
    cases = {
        "correct = false": wrong,
        "failing": wrong,
        "NOT correct": wrong,
        "correct = 0 AND item_id LIKE 'q1%'": want(
            lambda r: r["correct"] == 0 and r["item_id"].startswith("q1")
        ),
        "confidence > 0.5 AND variant = 'a'": want(
            lambda r: r["confidence"] > 0.5 and r["variant"] == "a"
        ),
        "id IN ('q1', 'q3') OR lower(gold) = 'nothing'": want(
            lambda r: r["item_id"] in ("q1", "q3")
        ),
        "errored": [],
        "flagged": [],
        "item_id BETWEEN 'q2' AND 'q4' AND error IS NULL": want(
            lambda r: "q2" <= r["item_id"] <= "q4"
        ),
        "length(text) > 40 AND regexp_matches(text, 'fly')": want(
            lambda r: len(r["text"]) > 40 and "fly" in r["text"]
        ),
    }
    for where, expected in cases.items():
        assert select_items(df, where) == expected, where


def test_legit_rerun_through_the_cli(made: tuple[Path, str, str], tmp_path: Path) -> None:
    db, run_id, url = made
    proc = _rerun(db, run_id, "item_id = 'q2' OR item_id = 'q5'", url, tmp_path)
    assert proc.returncode == 0, proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    got = con.execute(
        "SELECT DISTINCT item_id FROM results WHERE run_id <> ? ORDER BY 1", [run_id]
    ).fetchall()
    con.close()
    assert [g for (g,) in got] == ["q2", "q5"]


def test_no_network_from_a_filter() -> None:
    """No function in the allowed set can open a connection: the sandboxed connection refuses
    external access even if a filter got past the parser."""
    from llmscope.runs.where import connect_sandboxed

    con = connect_sandboxed()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for sql in (
        f"SELECT * FROM read_csv('http://127.0.0.1:{port}/x')",
        "SELECT * FROM read_text('/etc/hostname')",
        "COPY (SELECT 1) TO 'x.csv'",
        "ATTACH 'y.duckdb' AS y",
        "SET enable_external_access = true",
    ):
        with pytest.raises(duckdb.Error):
            con.execute(sql)
    assert not Path("x.csv").exists() and not Path("y.duckdb").exists()
