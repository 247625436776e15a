"""`llmscope study run/status`: study files, cells as normal runs, kill and resume, failing cells.

Real parts: the CLI in a subprocess, a real DuckDB file, a saved tiny transformers model
(tests/helpers/tinymodel.py) and the scripted OpenAI-wire server (tests/helpers/oai_server.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import duckdb
import pytest

from llmscope.studies.spec import StudyError, load_study
from llmscope.studies.store import live_cells, study_cells
from tests.helpers.cli import (
    assert_clean_error,
    cli,
    cli_env,
    start_study_run,
    tiny_model_dir,
    write_choice_suite,
    write_file,
    write_yesno_suite,
)
from tests.helpers.midrun import wait_until
from tests.helpers.oai import start_server, stop_server

ENV = {"OPENAI_API_KEY": "sk-test"}


# -- the file: validation names file, line and field ----------------------------------------------
@pytest.fixture(scope="module")
def suites(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("suites")
    return write_yesno_suite(base / "yn", 6), write_choice_suite(base / "ch", 4)


@pytest.mark.parametrize(
    ("body", "line", "field", "needle"),
    [
        ("name: s\nsuites: [YN]\nmodel: default\n", 3, "model", "unknown study key"),
        (
            "name: s\nsuites: [YN]\noptions:\n  limit: 2\n  seeed: 1\n",
            5,
            "options.seeed",
            "allowed: ",
        ),
        ("name: s\nsuites: [YN]\noptions:\n  seed: one\n", 4, "options.seed", "must be int"),
        ("name: s\nsuites: [YN]\noptions:\n  limit: 0\n", 4, "options.limit", "1 or more"),
        (
            "name: s\nsuites: [YN]\nmodels:\n  - default\n  - {model: 'openai:x', base_urll: 'http://h/v1'}\n",
            5,
            "models[1].base_urll",
            "unknown key",
        ),
        (
            "name: s\nsuites: [YN, CH]\ngrid:\n  prompt:\n    a: {}\n    b:\n      opt: {top_k: 5}\n",
            7,
            "opt.top_k",
            "unknown option 'top_k' for task 'choice'",
        ),
        ("name: s\nsuites: [YN]\ngrid:\n  top_k: [5, 'x']\n", 4, "opt.top_k", "must be"),
        ("name: s\nsuites: [YN]\ngrid:\n  limit: [1, 2]\n", 4, "grid.limit", "same run"),
        (
            "name: s\nsuites: [YN]\noptions:\n  opt:\n    templates: {a: '{text}'}\n",
            5,
            "options.opt.templates",
            "give them as `templates:`",
        ),
        (
            "name: s\nsuites: [YN]\noptions:\n  dtype: float8\n",
            4,
            "dtype",
            "--dtype must be one of",
        ),
        ("name: s\nsuites: [YN, YN]\n", 2, "suites[1]", "listed twice"),
        ("suites: [YN]\n", None, "name", "required"),
        (
            "name: s\nsuites: [YN]\ngrid:\n  seed: [0, 1]\n  s2:\n    a: {seed: 3}\n",
            5,
            "grid.s2",
            "both set seed",
        ),
        ("name: s\nsuites: [nosuch-suite]\n", 2, "suites[0]", "no built-in suite"),
    ],
)
def test_bad_study_files_name_file_line_and_field(tmp_path, suites, body, line, field, needle):
    yn, ch = suites
    path = write_file(tmp_path / "study.yaml", body.replace("YN", str(yn)).replace("CH", str(ch)))
    with pytest.raises(StudyError) as ei:
        load_study(path)
    msg = str(ei.value)
    assert str(path) in msg and needle in msg, msg
    assert ei.value.line == line, msg
    assert f"field '{field}'" in msg, msg


def test_toml_study_reads_and_names_the_line(tmp_path, suites):
    yn, _ = suites
    good = write_file(
        tmp_path / "ok.toml",
        f'name = "t"\nsuites = ["{yn}"]\n[options]\nlimit = 2\n[grid]\nseed = [0, 1]\n',
    )
    study = load_study(good)
    assert [c.key for c in study.cells] == [f"{yn} | default | seed=0", f"{yn} | default | seed=1"]
    assert [c.options for c in study.cells] == [{"limit": 2, "seed": 0}, {"limit": 2, "seed": 1}]
    bad = write_file(
        tmp_path / "bad.toml", f'name = "t"\nsuites = ["{yn}"]\n\n[options]\nlimitt = 2\n'
    )
    with pytest.raises(StudyError) as ei:
        load_study(bad)
    assert ei.value.line == 5 and "field 'options.limitt'" in str(ei.value)


def test_cells_are_the_product_in_file_order(tmp_path, suites):
    yn, ch = suites
    path = write_file(
        tmp_path / "s.yaml",
        f"""name: grid
suites: [{{suite: {yn}, label: yn, opt: {{chat: true}}}}, {{suite: {ch}, label: ch}}]
models: [default, {{model: "openai:m", base_url: "http://127.0.0.1:9/v1", label: api}}]
options: {{limit: 3}}
grid:
  prompt:
    plain: {{}}
    careful: {{system_prompt: "Be careful."}}
  seed: [0, 7]
""",
    )
    study = load_study(path)
    assert len(study.cells) == 2 * 2 * 2 * 2
    first = study.cells[0]
    assert first.key == "yn | default | prompt=plain | seed=0"
    assert first.options == {"limit": 3, "opt": {"chat": True}, "seed": 0}
    last = study.cells[-1]
    assert last.key == "ch | api | prompt=careful | seed=7"
    cfg = last.config()
    assert (cfg.model, cfg.base_url, cfg.system_prompt, cfg.seed) == (
        "openai:m",
        "http://127.0.0.1:9/v1",
        "Be careful.",
        7,
    )
    assert last.task_options() == {}


def test_cli_error_is_one_line(tmp_path, suites):
    path = write_file(
        tmp_path / "s.yaml", f"name: s\nsuites: [{suites[0]}]\nmodels: [default]\ngird: {{}}\n"
    )
    proc = cli("study", "run", str(path), "--db", str(tmp_path / "x.duckdb"))
    err = assert_clean_error(proc, "s.yaml:4", "field 'gird'", "unknown study key")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.duckdb").exists()


def test_docs_example_is_a_valid_study(tmp_path):
    """The example in docs/studies.md reads (its suites are built-in)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "studies.md").read_text(encoding="utf-8")
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    ckpt = tmp_path / "checkpoints" / "step-1000"  # the example's local folder (not loaded here)
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    study = load_study(write_file(tmp_path / "example.yaml", block))
    assert study.name and len(study.cells) == len(study.models) * len(study.suites) * 2


# -- running ----------------------------------------------------------------------------------------
def _report_headlines(db: Path) -> dict[tuple[str, str], dict]:
    """`llmscope report --json` of every run: (run, metric) -> its overall row."""
    proc = cli("report", "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    return {(r["run"], r["metric"]): r for r in json.loads(proc.stdout) if not r["group"]}


def _status(path: Path | str, db: Path) -> list[dict]:
    proc = cli("study", "status", str(path), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["cells"]


def _duplicates(db: Path) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return int(
            con.execute(
                "SELECT count(*) - count(DISTINCT (run_id, item_id, variant)) FROM results"
            ).fetchone()[0]
        )
    finally:
        con.close()


@pytest.mark.slow
def test_two_models_two_suites_two_prompts_status_equals_report(tmp_path, suites):
    yn, ch = suites
    model = tiny_model_dir(tmp_path)
    server = start_server()
    try:
        study = write_file(
            tmp_path / "s.yaml",
            f"""name: matrix
suites:
  - {{suite: {yn}, label: yn, opt: {{chat: true}}}}
  - {{suite: {ch}, label: ch, opt: {{chat: true}}}}  # the system prompt goes through the chat template
models:
  - {{model: "hf:{model}", label: tiny, threads: 1}}
  - {{model: "openai:test-model", base_url: "{server.base_url}", label: api}}
grid:
  prompt:
    plain: {{}}
    careful: {{system_prompt: "Be careful."}}
""",
        )
        db = tmp_path / "m.duckdb"
        proc = cli("study", "run", str(study), "--db", str(db), "--trust-study", env=cli_env(**ENV))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (
            proc.stderr.count("Loading weights: 100%") <= 1
        )  # the local model loads once for its 4 cells
        cells = _status(study, db)
        assert len(cells) == 8 and {c["state"] for c in cells} == {"done"}
        assert len({c["run_id"] for c in cells}) == 8
        report = _report_headlines(db)
        for c in cells:
            rep = report[(c["run_id"], c["metric"])]
            assert (c["value"], c["ci95"], c["n"]) == (rep["value"], rep["ci95"], rep["n"]), c[
                "cell"
            ]
            assert c["n_done"] == c["n_total"] == (12 if c["suite"] == "yn" else 4)
        # the same grid by name, from the database alone
        assert _status("matrix", db) == cells
        # the local model's later cells reused the loaded weights, and say so
        con = duckdb.connect(str(db), read_only=True)
        loads = [
            json.loads(m)["backend"]["load"].get("reused", False)
            for (m,) in con.execute(
                "SELECT meta FROM runs WHERE backend = 'hf' ORDER BY started_at"
            ).fetchall()
        ]
        members = {
            json.loads(m)["studies"]["matrix"]
            for (m,) in con.execute("SELECT meta FROM runs").fetchall()
        }
        con.close()
        assert loads == [False, True, True, True]
        assert members == {c["cell"] for c in cells}
        # a cell scored on the reused weights equals `llmscope run` of the same options, which loads
        # the model afresh
        one = tmp_path / "one.duckdb"
        alone = cli(
            "run",
            "--suite",
            str(yn),
            "--model",
            f"hf:{model}",
            "--threads",
            "1",
            "--opt",
            "chat=true",
            "--system-prompt",
            "Be careful.",
            "--db",
            str(one),
            "--no-report",
        )
        assert alone.returncode == 0, alone.stderr[-2000:]
        cell = next(c for c in cells if c["cell"] == "yn | tiny | prompt=careful")
        q = "SELECT item_id, variant, p_yes, p_no, other FROM results WHERE run_id = ? ORDER BY 1, 2"
        con = duckdb.connect(str(db), read_only=True)
        in_study = con.execute(q, [cell["run_id"]]).fetchall()
        con.close()
        con = duckdb.connect(str(one), read_only=True)
        (rid,) = con.execute("SELECT run_id FROM runs").fetchone()
        fresh = con.execute(q, [rid]).fetchall()
        con.close()
        assert rid == cell["run_id"]  # the same run identity
        assert len(in_study) == 12 and in_study == fresh
        # a second run reuses every cell: nothing scored again
        again = cli(
            "study", "run", str(study), "--db", str(db), "--trust-study", env=cli_env(**ENV)
        )
        assert again.returncode == 0, again.stderr[-2000:]
        assert again.stderr.count("already complete: reused") == 8
        assert "Loading weights" not in again.stderr
        assert _status(study, db) == cells
    finally:
        stop_server(server)


def _api_study(tmp_path: Path, yn: Path, ch: Path, base_url: str, extra_model: str = "") -> Path:
    return write_file(
        tmp_path / "api.yaml",
        f"""name: apistudy
suites: [{{suite: {yn}, label: yn}}, {{suite: {ch}, label: ch}}]
models:
  - {{model: "openai:test-model", base_url: "{base_url}", label: api, concurrency: 1}}
{extra_model}grid:
  seed: [0, 1]
""",
    )


@pytest.mark.slow
@pytest.mark.reliability
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_kill_mid_study_then_rerun_completes_every_cell_once(tmp_path, suites, sig):
    yn, ch = suites
    server = start_server()
    try:
        # every prompt of both suites: the first cell (12 prompts) and 2 of the next answered,
        # the rest held until the signal is sent, so it lands mid-study on any machine
        server.script("number", hold_after=14)
        study = _api_study(tmp_path, yn, ch, server.base_url)
        db = tmp_path / "k.duckdb"
        proc = start_study_run(study, db, jobs=1)
        assert proc.stderr is not None

        def next_cell_stored() -> bool:  # one cell finished, the next one stored results
            for p in Path(f"{db}.live").glob("*/progress.json"):
                try:
                    prog = json.loads(p.read_text(encoding="utf-8"))["progress"]
                except (OSError, ValueError, KeyError):
                    continue
                if 0 < int(prog.get("stored") or 0) < int(prog["total"]):
                    return True
            return False

        wait_until(lambda: server.held("number"), "a request of the second cell was held", proc)
        wait_until(next_cell_stored, "the second cell stored results", proc)
        # while the study holds the file, status reads it as of the study's last flush, and says so
        during = cli("study", "status", str(study), "--db", str(db), "--json")
        assert during.returncode == 0, during.stderr
        assert during.stderr.count("still being written") == 1, during.stderr
        live_view = json.loads(during.stdout)
        assert "live" not in live_view, live_view
        assert "done" in {c["state"] for c in live_view["cells"]}
        proc.send_signal(sig)
        rest = proc.communicate(timeout=300)[1]
        assert "completed:" in rest, rest
        if sig == signal.SIGTERM:
            assert proc.returncode == 143, rest
            assert "Run the same command again" in rest
        else:
            assert proc.returncode == -9
        mid = _status(study, db)
        assert "done" in {c["state"] for c in mid} and "partial" in {c["state"] for c in mid}, mid
        # the live channel (readable while a study holds the file) names the same runs and counts
        live = live_cells(db, "apistudy")
        for c in mid:
            if c["state"] == "partial" and c["cell"] in live:  # (its channel may not have begun)
                assert live[c["cell"]].run_id == c["run_id"]
            if c["state"] == "done":
                assert live[c["cell"]].run_id == c["run_id"]
                assert live[c["cell"]].done == live[c["cell"]].total == c["n_done"]
                assert live[c["cell"]].ended
        # the same rows through the library call a TUI makes (a path, opened read-only)
        assert [r.to_dict() for r in study_cells(db, "apistudy", metrics=False)] == [
            {**c, "metric": None, "value": None, "ci95": None, "interval_method": None, "n": None}
            for c in mid
        ]
        server.script("number", delay=0.0)
        again = cli(
            "study", "run", str(study), "--db", str(db), "--trust-study", env=cli_env(**ENV)
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert "already complete: reused" in again.stderr
        cells = _status(study, db)
        assert {c["state"] for c in cells} == {"done"}, cells
        assert [c["n_done"] for c in cells] == [12, 12, 4, 4]  # 6 items x 2 prompts; 4 items x 1
        assert _duplicates(db) == 0
        con = duckdb.connect(str(db), read_only=True)
        n_rows = con.execute("SELECT count(*) FROM results").fetchone()[0]
        con.close()
        assert n_rows == 32
    finally:
        stop_server(server)


@pytest.mark.slow
@pytest.mark.reliability
def test_a_failing_cell_does_not_stop_the_others(tmp_path, suites):
    yn, ch = suites
    server = start_server()
    try:
        import socket

        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        extra = f'  - {{model: "openai:test-model", base_url: "{dead}", label: dead, max_retries: 0, timeout: 2}}\n'
        study = _api_study(tmp_path, yn, ch, server.base_url, extra)
        db = tmp_path / "f.duckdb"
        # every API request held until two wait at once: a held cell cannot end, so the other
        # job reaches an API cell whatever the order and speed (tests/helpers/midrun.py)
        server.script("number", hold_after=0)
        run = start_study_run(study, db, jobs=2)
        try:
            wait_until(lambda: server.held("number") >= 2, "two API cells' requests held", run)
        finally:
            server.release("number")
            _, err = run.communicate(timeout=600)
        proc = subprocess.CompletedProcess(run.args, run.returncode, "", err)
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
        # API cells ran side by side: two at a time (--jobs 2), one request each (concurrency 1)
        assert server.server_stats()["max_active"]["number"] == 2
        cells = _status(study, db)
        states = {c["cell"]: c["state"] for c in cells}
        assert len(states) == 8
        assert {s for k, s in states.items() if "| api |" in k} == {"done"}
        assert {s for k, s in states.items() if "| dead |" in k} == {"error"}
        errs = [c["error"] for c in cells if c["state"] == "error"]
        assert all(e and "127.0.0.1" in e for e in errs), errs
        text = cli("study", "status", str(study), "--db", str(db))
        assert text.returncode == 0
        assert "4 done, 4 error" in text.stdout and "errors:" in text.stdout
        # the file edited to drop the dead endpoint: the study (by name) is the 4 cells left,
        # all reused
        _api_study(tmp_path, yn, ch, server.base_url)
        fixed = cli(
            "study", "run", str(study), "--db", str(db), "--trust-study", env=cli_env(**ENV)
        )
        assert fixed.returncode == 0, fixed.stderr[-2000:]
        assert fixed.stderr.count("already complete: reused") == 4
        by_name = _status("apistudy", db)
        assert [c["cell"] for c in by_name] == [k for k in states if "| api |" in k]
        assert {c["state"] for c in by_name} == {"done"}
    finally:
        stop_server(server)


def test_status_of_unknown_name_lists_known(tmp_path, suites):
    from llmscope.store.db import Store

    db = tmp_path / "e.duckdb"
    Store(str(db)).close()  # an llmscope database without studies
    proc = cli("study", "status", "nosuch", "--db", str(db))
    assert_clean_error(proc, "no study 'nosuch'")


def test_study_file_base_url_needs_trust(tmp_path, suites):
    yn, ch = suites
    study = _api_study(tmp_path, yn, ch, "http://10.255.255.1:1/v1")
    proc = cli("study", "run", str(study), "--db", str(tmp_path / "t.duckdb"), env=cli_env(**ENV))
    assert_clean_error(proc, "--trust-study", "10.255.255.1")
    assert not (tmp_path / "t.duckdb").exists()


@pytest.mark.slow
def test_plan_applies_to_its_suite_and_dry_run_says_what_each_cell_does(tmp_path, suites):
    yn, ch = suites
    server = start_server()
    try:
        made = cli(
            "plan",
            "--suite",
            str(yn),
            "--model",
            "openai:test-model",
            "--hypothesis",
            "accuracy(a) > accuracy(b)",
            "-o",
            str(tmp_path / "plan.yaml"),
        )
        assert made.returncode == 0, made.stderr
        study = write_file(
            tmp_path / "p.yaml",
            f"""name: planned
suites: [{{suite: {yn}, label: yn}}, {{suite: {ch}, label: ch}}]
models: [{{model: "openai:test-model", base_url: "{server.base_url}", label: api}}]
plan: plan.yaml
""",
        )
        db = tmp_path / "p.duckdb"
        dry = cli("study", "run", str(study), "--db", str(db), "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.splitlines() == ["yn | api: new run", "ch | api: new run"]
        assert not db.exists()
        proc = cli("study", "run", str(study), "--db", str(db), "--trust-study", env=cli_env(**ENV))
        assert proc.returncode == 0, proc.stderr[-3000:]
        con = duckdb.connect(str(db), read_only=True)
        metas = dict(con.execute("SELECT suite_name, meta FROM runs").fetchall())
        con.close()
        planned = json.loads(metas["rel-yesno"])["plan"]
        assert planned["path"] == str(tmp_path / "plan.yaml") and planned["deviations"] == []
        assert "plan" not in json.loads(metas["rel-choice"])  # the plan names the yes/no suite only
        ids = {c["cell"]: c["run_id"] for c in _status(study, db)}
        again = cli("study", "run", str(study), "--db", str(db), "--dry-run")
        assert again.stdout.splitlines() == [
            f"yn | api: reuse run {ids['yn | api']} (complete)",
            f"ch | api: reuse run {ids['ch | api']} (complete)",
        ]
    finally:
        stop_server(server)
