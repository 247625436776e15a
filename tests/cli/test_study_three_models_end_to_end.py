"""A study end to end: one study file of 3 models (the embedded GGUF model, a local
HF folder, a scripted API server) x 3 built-in suites x 2 prompt templates runs with `llmscope
study run`, is killed mid-way, runs again to completion with no row stored twice, and `study
status --json` gives each cell the headline `llmscope report --json` gives its run.

Real parts: the CLI in subprocesses, a real DuckDB file, the embedded SmolLM2 GGUF model, a
saved tiny transformers model (tests/helpers/tinymodel.py) and the scripted OpenAI-wire server
(tests/helpers/oai_server.py). Lean: 3 items a cell, one prompt variant each.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from tests.helpers.cli import cli, cli_cmd, cli_env, tiny_model_dir
from tests.helpers.midrun import WAIT_S
from tests.helpers.oai import start_server, stop_server

ENV = {"OPENAI_API_KEY": "sk-test"}
# every template says "Please" (the server's delay for every prompt) and the rating ones "Rate"
# (answers with digits); both levels give every suite new templates
LEVELS = {
    "ask": {
        "commonsense-sample": {"q1": 'Please say: do you agree that "{statement}"? Yes or no.'},
        "mc-sample": "Please answer. Question: {question}\nAnswer:",
        "rating-sample": "Please Rate from 1 to 5 how plausible this is: {statement}\nRating:",
    },
    "terse": {
        "commonsense-sample": {"q1": "Please: {statement} Agree?"},
        "mc-sample": "Please: {question}",
        "rating-sample": "Please Rate 1-5: {statement}",
    },
}
DIGITS = [["4", -0.7], ["3", -1.6], ["5", -2.5], ["2", -3.5], ["1", -4.5]]


def _study(tmp_path: Path, model: Path, base_url: str) -> Path:
    levels = "".join(f"    {lvl}:\n      templates: {json.dumps(t)}\n" for lvl, t in LEVELS.items())
    path = tmp_path / "three_models.yaml"
    path.write_text(
        f"""name: three_models
suites: [commonsense-sample, mc-sample, rating-sample]
models:
  - {{model: "hf:{model}", label: tiny, threads: 1}}
  - {{model: default, threads: 1}}
  - {{model: "openai:test-model", base_url: "{base_url}", label: api, concurrency: 1}}
options: {{limit: 3}}
grid:
  template:
{levels}""",
        encoding="utf-8",
    )
    return path


@pytest.mark.slow
def test_three_models_three_suites_two_templates_killed_then_resumed(tmp_path: Path) -> None:
    model = tiny_model_dir(tmp_path)
    server = start_server()
    try:
        server.script("Rate", top=DIGITS, delay=0.2)
        server.script("Please", delay=0.2)  # a slow server: the kill lands mid-study
        study = _study(tmp_path, model, server.base_url)
        db = tmp_path / "i32.duckdb"
        args = ("study", "run", str(study), "--db", str(db), "--trust-study", "--jobs", "1")
        proc = subprocess.Popen(
            cli_cmd(*args),
            env=cli_env(**ENV),
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stderr is not None
        seen: list[str] = []
        deadline = time.monotonic() + WAIT_S  # catches a hang, not a slow machine
        while time.monotonic() < deadline:  # cells of two models finished, and one more started
            line = proc.stderr.readline()
            seen.append(line)
            done = {
                m for m in ("tiny", "api") for x in seen if f"| {m} |" in x and "completed:" in x
            }
            if not line or (len(done) == 2 and "stored" in line):
                break
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        assert proc.returncode == -9, "".join(seen)
        mid = _status(study, db)
        states = {c["state"] for c in mid}
        assert "done" in states and states != {"done"}, mid
        assert {c["model"] for c in mid if c["state"] == "done"} >= {"tiny", "api"}, mid
        n_done_mid = sum(c["state"] == "done" for c in mid)

        server.script("Rate", top=DIGITS, delay=0.0)
        server.script("Please", delay=0.0)
        again = cli(*args, env=cli_env(**ENV), timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        assert again.stderr.count("already complete: reused") == n_done_mid
        cells = _status(study, db)
        assert len(cells) == 18 and {c["state"] for c in cells} == {"done"}, cells
        assert {c["cell"] for c in cells} == {
            f"{s} | {m} | template={lvl}"
            for s in ("commonsense-sample", "mc-sample", "rating-sample")
            for m in ("default", "tiny", "api")
            for lvl in LEVELS
        }
        # one run a cell, none twice, no row stored twice, each cell's asked-for rows all there
        con = duckdb.connect(str(db), read_only=True)
        runs = {
            rid: (suite, backend)
            for rid, suite, backend in con.execute(
                "SELECT run_id, suite_name, backend FROM runs"
            ).fetchall()
        }
        dup = con.execute(
            "SELECT count(*) - count(DISTINCT (run_id, item_id, variant)) FROM results"
        ).fetchone()[0]
        counts = dict(con.execute("SELECT run_id, count(*) FROM results GROUP BY 1").fetchall())
        con.close()
        assert dup == 0
        assert len(runs) == 18 and {c["run_id"] for c in cells} == set(runs)
        backends = {"default": "hf", "tiny": "hf", "api": "openai"}
        for c in cells:
            suite, lvl = c["suite"], c["levels"]["template"]
            assert runs[c["run_id"]] == (f"{suite}~{lvl}", backends[c["model"]]), c
            assert c["n_done"] == c["n_total"] == counts[c["run_id"]] == 3, c  # 3 items, 1 variant
        # the matrix's numbers are each cell's `report --json` headline
        rep = cli("report", "--db", str(db), "--json")
        assert rep.returncode == 0, rep.stderr
        rows = {(r["run"], r["metric"]): r for r in json.loads(rep.stdout) if not r["group"]}
        for c in cells:
            assert c["metric"] is not None, c
            r = rows[(c["run_id"], c["metric"])]
            assert (c["value"], c["ci95"], c["n"]) == (r["value"], r["ci95"], r["n"]), c["cell"]
    finally:
        stop_server(server)


def _status(path: Path, db: Path) -> list[dict]:
    proc = cli("study", "status", str(path), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["cells"]
