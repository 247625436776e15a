"""The real-server tier: every built-in task type through a real llama.cpp server.

One `python -m llama_cpp.server` process per session serves the embedded SmolLM2 GGUF
(`--logits_all true --model_alias smollm2`) on a free loopback port; each test runs
`llmscope run --model openai:smollm2 --base-url ...` on a built-in suite with a small
--limit and checks the stored rows. Where the server cannot answer a task the outcome the
user must get is asserted (the recorded fallback, or a stop with a stated reason).

Needs `llama-cpp-python[server]` (`bash scripts/setup.sh server`); skipped otherwise.
Run only this tier: `.venv/bin/python -m pytest -m server`.
`LLMSCOPE_LLAMA_SERVER=http://127.0.0.1:PORT/v1` points it at a server already running.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from bench import server_harness as sh

_MISSING = [
    m
    for m in (
        "llama_cpp",
        "fastapi",
        "uvicorn",
        "sse_starlette",
        "starlette_context",
        "pydantic_settings",
    )
    if importlib.util.find_spec(m) is None
]
pytestmark = [
    pytest.mark.server,
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(_MISSING),
        reason=f"llama-cpp-python[server] is not installed ({', '.join(_MISSING)} "
        "missing): run `bash scripts/setup.sh server`",
    ),
]

ALIAS = sh.ALIAS
KEY = "sk-local-llamacpp"  # the server runs without --api_key; any value is accepted


# Module scope (only this file uses it): the server's CPU time is counted when it is reaped, so
# a session-scoped server charged its whole life to the suite's last test (tests/conftest.py).
@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a llama.cpp server on the embedded GGUF (started once for this module).

    LLMSCOPE_LLAMA_SERVER=http://host:port/v1 reuses a server already running with the
    same command line (handy while iterating on one test)."""
    from llmscope.engine.models import embedded_model_path

    if os.environ.get("LLMSCOPE_LLAMA_SERVER"):
        yield os.environ["LLMSCOPE_LLAMA_SERVER"].rstrip("/")
        return

    proc, base = sh.start_llama(
        embedded_model_path(), tmp_path_factory.mktemp("llama") / "server.log"
    )
    try:
        yield base
    finally:
        sh.stop_llama(proc)


def run_cli(
    db: Path, suite: str, *extra: str, base_url: str | None = None, timeout: int = 420
) -> subprocess.CompletedProcess[str]:
    """`llmscope run` in a subprocess; with base_url through the server, else the local backend."""
    return sh.run_process(db, suite, base_url, *extra, key=KEY, timeout=timeout)


def rows(db: Path, backend: str | None = None) -> list[dict]:
    return sh.stored_rows(db, backend)


def served_rows(db: Path, base_url: str, n_rows: int, suite: str, *extra: str) -> list[dict]:
    """`llmscope run` of `suite` through the server: it exits 0 and stores `n_rows` rows, none an
    error; those rows."""
    p = run_cli(db, suite, *extra, base_url=base_url)
    assert p.returncode == 0, p.stderr[-2000:]
    got = rows(db, "openai")
    assert len(got) == n_rows and not any(r["error"] for r in got)
    return got


def run_record(db: Path) -> dict:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute(
            "select status, backend, meta, options, n_done, n_errors from runs "
            "order by started_at desc limit 1"
        )
        cols = [d[0] for d in cur.description]
        return dict(zip(cols, cur.fetchone(), strict=True))
    finally:
        con.close()


def test_server_answers_with_the_alias(llama_server: str) -> None:
    with urllib.request.urlopen(f"{llama_server}/models", timeout=10) as r:
        ids = [m["id"] for m in json.loads(r.read())["data"]]
    assert ALIAS in ids


def test_yesno_through_the_server_agrees_with_the_local_backend(
    llama_server: str, tmp_path: Path
) -> None:
    db = tmp_path / "yn.duckdb"
    remote = served_rows(db, llama_server, 9, "commonsense-sample", "--limit", "3")
    for r in remote:
        assert r["extra"].get("method") == "logprobs"
        assert r["probs"]["yes"] + r["probs"]["no"] <= 1 + 1e-9
    p = run_cli(db, "commonsense-sample", "--limit", "3")
    assert p.returncode == 0, p.stderr[-2000:]
    local = {(r["item_id"], r["variant"]): r for r in rows(db, "hf")}
    deltas = [
        abs(r["probs"]["yes"] - local[(r["item_id"], r["variant"])]["probs"]["yes"]) for r in remote
    ]
    # Q4_1 kernels in llama.cpp vs the de-quantised fp32 model; measured mean 0.022 on 90 prompts
    # (docs/scale-out.md). A wrong prompt or chat template moves P(yes) by far more.
    assert sum(deltas) / len(deltas) < 0.08, deltas


@pytest.fixture(scope="module")
def mc_db(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `mc-sample --limit 3` run through the server, shared by the choice tests."""
    db = tmp_path_factory.mktemp("mc") / "mc.duckdb"
    p = run_cli(db, "mc-sample", "--limit", "3", base_url=llama_server)
    assert p.returncode == 0, p.stderr[-2000:]
    return db


def test_choice_through_the_server_scores_every_item_with_a_recorded_method(mc_db: Path) -> None:
    db = mc_db
    got = rows(db, "openai")
    assert len(got) == 3 and not any(r["error"] for r in got)
    for r in got:
        # completions-echo log-likelihoods where the server gives them, else the documented label fallback
        assert r["extra"]["choice_method"] in ("loglik", "labels", "labels-topk")
        assert r["prediction"] in r["probs"]
        assert sum(r["probs"].values()) <= 1 + 1e-9
    if any(r["extra"]["choice_method"] == "loglik" for r in got):
        # Echoed log-likelihoods are used only when they are right: the same option scores as the local
        # backend on the same GGUF (llama-cpp-python 0.3.36 pairs each echoed token with the distribution
        # *after* it when the model adds no BOS, which a sanity check must catch; see docs/scale-out.md).
        p = run_cli(db, "mc-sample", "--limit", "3")
        assert p.returncode == 0, p.stderr[-2000:]
        local = {r["item_id"]: r for r in rows(db, "hf")}
        d = [
            abs(
                r["option_scores"][o]["logprob"]
                - local[r["item_id"]]["option_scores"][o]["logprob"]
            )
            for r in got
            if r["extra"]["choice_method"] == "loglik"
            for o in r["option_scores"]
        ]
        assert sum(d) / len(d) < 0.3, d


def test_choice_method_is_shown_in_the_report(mc_db: Path) -> None:
    db = mc_db
    con = duckdb.connect(str(db), read_only=True)
    (run_id,) = con.execute("select run_id from runs where backend = 'openai'").fetchone()
    con.close()
    method = rows(db, "openai")[0]["extra"]["choice_method"]
    rep = subprocess.run(
        [sys.executable, "-m", "llmscope", "--db", str(db), "report", "--run", run_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rep.returncode == 0, rep.stderr
    assert (
        ("labels" in rep.stdout)
        if method != "loglik"
        else ("loglik" in rep.stdout or "echo" in rep.stdout)
    )


def test_minimal_pairs_work_or_stop_with_a_reason(llama_server: str, tmp_path: Path) -> None:
    db = tmp_path / "mp.duckdb"
    p = run_cli(db, "minimal-pairs", "--limit", "3", "--max-retries", "1", base_url=llama_server)
    if p.returncode == 0:
        got = rows(db, "openai")
        assert len(got) == 3 and not any(r["error"] for r in got)
        assert all(r["correct"] in (0.0, 1.0) for r in got)
        # scored through the server only if its log-likelihoods are right: same preferences as local
        p = run_cli(db, "minimal-pairs", "--limit", "3")
        assert p.returncode == 0, p.stderr[-2000:]
        local = {r["item_id"]: r["prediction"] for r in rows(db, "hf")}
        assert {r["item_id"]: r["prediction"] for r in got} == local
    else:
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in p.stderr
        assert any(w in lines[0].lower() for w in ("log-likelihood", "loglik", "echo", "log-prob"))
        # stopped before scoring, not 3 errored items (a refused run on a new file leaves none)
        assert not db.exists() or not any(r["error"] for r in rows(db, "openai"))


def test_rating_through_the_server(llama_server: str, tmp_path: Path) -> None:
    db = tmp_path / "rt.duckdb"
    got = served_rows(db, llama_server, 3, "rating-sample", "--limit", "3")
    for r in got:
        assert set(r["probs"]) == {"1", "2", "3", "4", "5"}
        assert sum(r["probs"].values()) == pytest.approx(1.0)
        assert r["prediction"] == max(r["probs"], key=lambda k: r["probs"][k])


def test_generation_through_the_server(llama_server: str, tmp_path: Path) -> None:
    db = tmp_path / "gen.duckdb"
    got = served_rows(db, llama_server, 3, "generation-sample", "--limit", "3")
    assert all(isinstance(r["prediction"], str) for r in got)
    assert all(r["correct"] in (0.0, 1.0) for r in got)


def test_constrained_through_the_server(llama_server: str, tmp_path: Path) -> None:
    items = [
        {
            "id": "c1",
            "text": "Is the statement 'water is wet' TRUE or FALSE?",
            "options": ["TRUE", "FALSE"],
            "gold": "TRUE",
        },
        {
            "id": "c2",
            "text": "Is the statement 'fire is cold' TRUE or FALSE?",
            "options": ["TRUE", "FALSE"],
            "gold": "FALSE",
        },
    ]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    spec = tmp_path / "suite.yaml"
    spec.write_text(
        "name: tf\ntask: constrained\nitems: items.jsonl\ntemplates:\n"
        "  plain: '{text} Answer with TRUE or FALSE only.'\ntask_options:\n  max_new_tokens: 4\n"
    )
    db = tmp_path / "con.duckdb"
    got = served_rows(db, llama_server, 2, str(spec))
    # generate-and-match: the stored response is an allowed option, or "" (counted wrong, never dropped)
    for r in got:
        assert r["prediction"] in ("TRUE", "FALSE", "")
        assert r["correct"] == float(r["prediction"] == r["gold"])


def test_lm_eval_task_yaml_through_the_server(llama_server: str, tmp_path: Path) -> None:
    docs = [
        {
            "question": "What color is the sky on a clear day?",
            "choices": ["green", "blue", "red"],
            "label": 1,
        },
        {
            "question": "How many legs does a dog have?",
            "choices": ["four", "two", "six"],
            "label": 0,
        },
    ]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "task.yaml").write_text(
        "task: tiny_qa\ndataset_path: json\ndataset_kwargs: {data_files: {test: docs.jsonl}}\ntest_split: test\n"
        'output_type: multiple_choice\ndoc_to_text: "Question: {{question}}\\nAnswer:"\n'
        "doc_to_choice: choices\ndoc_to_target: label\n"
    )
    db = tmp_path / "lm.duckdb"
    p = run_cli(db, str(tmp_path / "task.yaml"), base_url=llama_server)
    assert p.returncode == 0, p.stderr[-2000:]
    got = rows(db, "openai")
    assert [r["gold"] for r in got] == ["blue", "four"] and not any(r["error"] for r in got)


def _scored_or_stopped(
    p: subprocess.CompletedProcess[str], db: Path, task: str, n: int
) -> list[dict] | None:
    """The rows when the run scored `n` items without errors; None when it stopped before the
    run with one line naming the task and why (no log-likelihoods from this server)."""
    if p.returncode == 0:
        got = rows(db, "openai")
        assert len(got) == n and not any(r["error"] for r in got), [r["error"] for r in got]
        return got
    lines = [ln for ln in p.stderr.strip().splitlines() if not ln.startswith("loading model")]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert f"cannot score task {task!r}" in lines[0]
    assert any(w in lines[0].lower() for w in ("log-likelihood", "loglik", "echo", "log-prob"))
    if db.exists():
        assert not rows(db, "openai")  # stopped before scoring, not items stored as errors
    return None


def test_syntaxgym_through_the_server_scores_or_stops(llama_server: str, tmp_path: Path) -> None:
    db = tmp_path / "sg.duckdb"
    p = run_cli(db, "syntax-sample", "--limit", "2", "--max-retries", "1", base_url=llama_server)
    got = _scored_or_stopped(p, db, "syntaxgym", 2)
    if got is not None:
        # region surprisals only from right log-likelihoods: same verdicts as the local backend
        assert run_cli(db, "syntax-sample", "--limit", "2").returncode == 0
        local = {r["item_id"]: r["correct"] for r in rows(db, "hf")}
        assert {r["item_id"]: r["correct"] for r in got} == local


def test_contamination_through_the_server_scores_or_stops(
    llama_server: str, tmp_path: Path
) -> None:
    db = tmp_path / "ct.duckdb"
    p = run_cli(
        db, "contamination-sample", "--limit", "2", "--max-retries", "1", base_url=llama_server
    )
    got = _scored_or_stopped(p, db, "contamination", 2)
    if got is not None:
        for r in got:
            assert r["prediction"] in ("flagged", "clean")
            assert r["extra"]["min_k_prob"] <= 0


def test_pragmatics_choice_through_the_server_with_its_schemes(
    llama_server: str, tmp_path: Path
) -> None:
    db = tmp_path / "pc.duckdb"
    # the suite's four schemes, minus the rating one (five next-token requests per option)
    p = run_cli(
        db,
        "pragmatics-choice",
        "--limit",
        "2",
        "--opt",
        'schemes=["labels","free","embedding"]',
        base_url=llama_server,
    )
    got = _scored_or_stopped(p, db, "choice", 2)
    assert got is not None  # choice always has a method: echo log-likelihoods or the label fallback
    for r in got:
        assert r["extra"]["choice_method"] in ("loglik", "labels", "labels-topk")
        assert r["prediction"] in r["probs"]
        # the extra schemes ran through the server even when the main method fell back to labels
        assert set(r["extra"]["methods"]) >= {"labels", "free", "embedding"}
    rec = run_record(db)
    choice = json.loads(rec["meta"])["backend"]["method_choice"]
    assert choice["task"] == "choice" and choice["method"] and choice["reason"]


def test_probeval_oneshot_through_the_server(llama_server: str, tmp_path: Path) -> None:
    db = tmp_path / "pe.duckdb"
    p = run_cli(db, "probeval-oneshot", "--limit", "1", "--opt", "n=3", base_url=llama_server)
    got = _scored_or_stopped(p, db, "generation", 1)
    assert got is not None
    samples = got[0]["extra"]["samples"]
    assert len(samples) == 3  # n answers sampled through the server (completions, one-shot prompt)
    rep = subprocess.run(
        [sys.executable, "-m", "llmscope", "--db", str(db), "report"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rep.returncode == 0 and "probeval_kl" in rep.stdout, rep.stderr[-2000:]


# every built-in suite has a test above (by suite or by task type); a new one must add its own
SERVER_TESTED = {
    "commonsense-sample",
    "mc-sample",
    "minimal-pairs",
    "rating-sample",
    "generation-sample",
    "syntax-sample",
    "contamination-sample",
    "pragmatics-choice",
    "probeval-oneshot",
}


def test_every_builtin_suite_has_a_server_test() -> None:
    from llmscope.data.suites import BUILTIN_DIR

    shipped = {p.parent.name for p in BUILTIN_DIR.glob("*/suite.yaml")}
    assert shipped <= SERVER_TESTED, (
        f"built-in suites without a server test: {sorted(shipped - SERVER_TESTED)}"
    )
