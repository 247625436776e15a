"""Comparable by construction: one item set per suite in a study, `compare` on shared items,
factor levels that change nothing refused before anything runs, and the whole grid shown
while a study writes.

Real parts: the CLI in a subprocess, real DuckDB files, the embedded model (SmolLM2-135M) and
the scripted OpenAI-wire server (tests/helpers/oai.py). Expected values are recomputed from the
runs' CSV exports and the suite's own items file, not from the code under test.
"""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from llmscope.data.registry import BUILTIN_DIR
from llmscope.studies.store import live_cell_rows
from tests.helpers.cli import (
    assert_clean_error,
    cli,
    cli_env,
    start_study_run,
    tiny_model_dir,
    write_file,
    write_yesno_suite,
)
from tests.helpers.midrun import wait_until
from tests.helpers.oai import start_server, stop_server

ENV = {"OPENAI_API_KEY": "sk-test"}


def _first_items(n: int) -> list[str]:
    """The first n item ids of commonsense-sample, read from its items file (suite order)."""
    lines = (BUILTIN_DIR / "commonsense-sample" / "items.jsonl").read_text(encoding="utf-8")
    return [str(json.loads(x)["id"]) for x in lines.splitlines()[:n]]


def _export(db: Path, run_id: str) -> list[dict[str, str]]:
    proc = cli("export", "--db", str(db), "--run", run_id, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    return list(csv.DictReader(io.StringIO(proc.stdout)))


def _accuracy(rows: list[dict[str, str]], items: set[str]) -> tuple[float, int]:
    scored = [float(r["correct"]) for r in rows if r["item_id"] in items and r["correct"] != ""]
    return sum(scored) / len(scored), len(scored)


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, dict]]:
    """A database holding a finished 12-item run of commonsense-sample (embedded model), then
    a study over it with `limit: 6` and a system-prompt factor; returns (db, study, cells)."""
    base = tmp_path_factory.mktemp("limited")
    db = base / "c.duckdb"
    first = cli("run", "--suite", "commonsense-sample", "--limit", "12", "--db", str(db))
    assert first.returncode == 0, first.stderr[-2000:]
    study = write_file(
        base / "s.yaml",
        """name: limited
suites: [commonsense-sample]
models: [default]
options: {limit: 6}
grid:
  prompt:
    plain: {}
    expert: {system_prompt: "You are a careful annotator."}
""",
    )
    proc = cli("study", "run", str(study), "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "already complete: reused" in proc.stderr  # the 12-item run is the plain cell
    status = cli("study", "status", str(study), "--db", str(db), "--json")
    assert status.returncode == 0, status.stderr
    cells = {c["levels"]["prompt"]: c for c in json.loads(status.stdout)["cells"]}
    return db, study, cells


@pytest.mark.slow
def test_a_reused_longer_run_is_read_on_the_studys_items(limited):
    db, study, cells = limited
    plain, expert = cells["plain"], cells["expert"]
    # one item set per suite: the same n and counts in every cell
    assert plain["n"] == expert["n"] == 12  # 6 items x 2 scored variants (q3 has no gold)
    assert plain["n_done"] == plain["n_total"] == expert["n_done"] == expert["n_total"] == 18
    assert (plain["n_items"], plain["run_items"]) == (6, 12)
    assert (expert["n_items"], expert["run_items"]) == (6, 6)
    assert plain["state"] == expert["state"] == "done"
    # the plain cell's accuracy recomputed from its export, on the study's 6 items
    items = set(_first_items(6))
    value, n = _accuracy(_export(db, plain["run_id"]), items)
    assert (plain["value"], plain["n"]) == (pytest.approx(value, abs=1e-12), n)
    value, n = _accuracy(_export(db, expert["run_id"]), items)
    assert (expert["value"], expert["n"]) == (pytest.approx(value, abs=1e-12), n)
    # the same by name (the database alone), and the matrix says what was left out
    by_name = cli("study", "status", "limited", "--db", str(db), "--json")
    assert {c["levels"]["prompt"]: c for c in json.loads(by_name.stdout)["cells"]} == cells
    text = cli("study", "status", str(study), "--db", str(db)).stdout
    assert text.count("n=12") == 2
    assert f"run {plain['run_id']} holds 12 items; 6 are the study's" in text


@pytest.mark.slow
def test_compare_of_different_item_sets_is_on_the_shared_items(limited):
    db, _study, cells = limited
    a, b = cells["plain"]["run_id"], cells["expert"]["run_id"]
    proc = cli("compare", "--db", str(db), a, b, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    rows_a, rows_b = _export(db, a), _export(db, b)
    shared = {r["item_id"] for r in rows_a} & {r["item_id"] for r in rows_b}
    assert len(shared) == 6
    assert out["items"]["differ"] is True and out["items"]["shared"] == 6
    assert [(r["n_items"], r["unshared"]) for r in out["items"]["runs"]] == [(12, 6), (6, 0)]
    # per-run figures on the shared items, by hand from the exports
    acc_a, n_a = _accuracy(rows_a, shared)
    acc_b, n_b = _accuracy(rows_b, shared)
    assert out["base"]["accuracy"]["value"] == pytest.approx(acc_a, abs=1e-12)
    assert out["base"]["accuracy"]["n"] == n_a == 12
    c = out["comparisons"][0]
    assert c["run"]["accuracy"]["value"] == pytest.approx(acc_b, abs=1e-12)
    assert c["run"]["accuracy"]["n"] == n_b == 12
    # the paired difference on the same items: rows matched by (item, variant)
    key_b = {(r["item_id"], r["variant"]): r["correct"] for r in rows_b}
    pairs = [
        (float(r["correct"]), float(key_b[(r["item_id"], r["variant"])]))
        for r in rows_a
        if r["correct"] != "" and key_b.get((r["item_id"], r["variant"]), "") != ""
    ]
    assert c["n"] == len(pairs) == 12
    assert c["acc_base"] == pytest.approx(acc_a, abs=1e-12)
    assert c["acc_run"] == pytest.approx(acc_b, abs=1e-12)
    assert c["diff"] == pytest.approx(sum(y - x for x, y in pairs) / len(pairs), abs=1e-12)
    text = cli("compare", "--db", str(db), a, b).stdout
    assert "item sets differ" in text and "6 not shared" in text and "6 shared items" in text
    # --all-items: each run's accuracy on all its own items (the report's number)
    every = json.loads(cli("compare", "--db", str(db), a, b, "--json", "--all-items").stdout)
    acc_all, n_all = _accuracy(rows_a, {r["item_id"] for r in rows_a})
    assert every["base"]["accuracy"]["value"] == pytest.approx(acc_all, abs=1e-12)
    assert every["base"]["accuracy"]["n"] == n_all == 24
    assert every["comparisons"][0]["diff"] == c["diff"]


# -- factors that change nothing ------------------------------------------------------------------
@pytest.mark.slow
def test_system_prompt_on_a_choice_suite_without_chat_is_refused_before_anything(tmp_path):
    study = write_file(
        tmp_path / "mc.yaml",
        """name: mc
suites: [mc-sample]
options: {limit: 3}
grid:
  prompt:
    plain: {}
    expert: {system_prompt: "You are an expert."}
""",
    )
    db = tmp_path / "mc.duckdb"
    for extra in ([], ["--dry-run"]):
        proc = cli("study", "run", str(study), "--db", str(db), *extra)
        assert_clean_error(
            proc,
            f"{study}:7",
            "grid.prompt.expert.system_prompt",
            "factor 'prompt'",
            "suite 'mc-sample'",
            "without a chat template",
        )
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not db.exists()  # nothing was recorded or run
    # with the chat template on for every level the system prompt is sent: accepted
    write_file(study, study.read_text().replace("{limit: 3}", "{limit: 3, chat: true}"))
    dry = cli("study", "run", str(study), "--db", str(db), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("new run") == 2


def test_a_study_wide_system_prompt_that_a_suite_would_not_send_is_refused(tmp_path):
    study = write_file(
        tmp_path / "mc.yaml",
        """name: mc
suites: [mc-sample]
options: {limit: 3, system_prompt: "You are an expert."}
grid:
  seed: {a: {seed: 1}, b: {seed: 2}}
""",
    )
    db = tmp_path / "mc.duckdb"
    proc = cli("study", "run", str(study), "--db", str(db), "--dry-run")
    assert_clean_error(
        proc, f"{study}:3", "options.system_prompt", "suite 'mc-sample'", "without a chat template"
    )
    assert len(proc.stderr.strip().splitlines()) == 1 and not db.exists()


def test_a_run_whose_task_would_not_send_its_system_prompt_is_refused(tmp_path):
    db = tmp_path / "r.duckdb"
    args = ("run", "--suite", "mc-sample", "--limit", "1", "--db", str(db))
    proc = cli(*args, "--system-prompt", "You are an expert.")
    assert_clean_error(proc, "--system-prompt would not be sent", "mc-sample", "--chat")
    assert not db.exists()  # refused before the model loads or anything is written


def test_chat_on_a_model_without_a_template_and_identical_cells_are_refused(tmp_path):
    model = Path(tiny_model_dir(tmp_path))
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(cfg))
    for f in ("chat_template.jinja", "chat_template.json"):
        (model / f).unlink(missing_ok=True)
    yn = write_yesno_suite(tmp_path / "yn", 4)
    study = write_file(
        tmp_path / "chat.yaml",
        f"""name: chat
suites: [{yn}]
models: [{{model: "hf:{model}", label: tiny}}]
grid:
  chat: [false, true]
""",
    )
    proc = cli("study", "run", str(study), "--db", str(tmp_path / "x.duckdb"), "--dry-run")
    assert_clean_error(proc, "factor 'chat'", "model 'tiny' has no chat template")
    # two levels that set the same values: the second is refused, naming the first
    twice = write_file(
        tmp_path / "twice.yaml",
        f"""name: twice
suites: [{yn}]
models: [{{model: "openai:m", base_url: "http://127.0.0.1:9/v1", label: api}}]
grid:
  prompt:
    a: {{seed: 1}}
    b: {{seed: 1}}
""",
    )
    proc = cli("study", "run", str(twice), "--db", str(tmp_path / "y.duckdb"), "--dry-run")
    assert_clean_error(
        proc, f"cells [{yn} | api | prompt=a] and [{yn} | api | prompt=b]", "identical requests"
    )
    assert not (tmp_path / "x.duckdb").exists() and not (tmp_path / "y.duckdb").exists()


# -- the whole grid while a study writes ------------------------------------------------------------
@pytest.mark.slow
def test_while_a_study_writes_every_cell_is_shown_from_the_grid(tmp_path):
    srv = start_server()
    try:
        yn = write_yesno_suite(tmp_path / "yn", 20)
        db = tmp_path / "w.duckdb"
        model = f'{{model: "openai:m", base_url: "{srv.base_url}", label: api, concurrency: 1}}'
        # one cell's run exists already, with more items than the study asks for
        pre = cli(
            "run",
            "--suite",
            str(yn),
            "--model",
            "openai:m",
            "--base-url",
            srv.base_url,
            "--limit",
            "6",
            "--seed",
            "0",
            "--db",
            str(db),
            env=cli_env(**ENV),
        )
        assert pre.returncode == 0, pre.stderr[-2000:]
        # the study's first 2 prompts answered, the rest held until the grid has been read: a
        # cell is running, with results, on any machine (tests/helpers/midrun.py)
        srv.script("number", hold_after=2)
        study = write_file(
            tmp_path / "w.yaml",
            f"""name: writing
suites: [{{suite: {yn}, label: yn}}]
models: [{model}]
options: {{limit: 3}}
grid:
  seed: [0, 1, 2]
""",
        )
        proc = start_study_run(study, db, jobs=1, stdout=subprocess.PIPE)
        try:

            def held_with_results() -> list[Any] | None:
                if not srv.held("number"):
                    return None
                rows = live_cell_rows(db, "writing")
                return rows if any(r.state == "running" and r.n_done > 0 for r in rows) else None

            rows = wait_until(held_with_results, "a cell was held with results stored", proc)
            by = {r.levels["seed"]: r for r in rows}
            assert sorted(by) == ["0", "1", "2"]  # every cell, from the published grid
            assert by["0"].state == "done" and (by["0"].n_done, by["0"].n_total) == (6, 6)
            running = [r for r in rows if r.state == "running"]
            assert len(running) == 1 and running[0].n_total == 6 and running[0].n_done > 0
            assert {r.state for r in rows} <= {"done", "running", "not_started"}
            # `study status` by name: the whole grid, from the live channel (the study holds
            # the file)
            st = cli("study", "status", "writing", "--db", str(db), "--json")
            assert st.returncode == 0, st.stderr
            assert len(json.loads(st.stdout)["cells"]) == 3
        finally:
            proc.send_signal(signal.SIGTERM)
            srv.release("number")
            proc.communicate(timeout=300)
    finally:
        stop_server(srv)
