"""`llmscope import lm-eval`: `lm_eval --log_samples` files stored as runs.

The samples files are written here in the shape lm-eval 0.4.x writes them
(evaluator.py + EvaluationTracker.save_results_samples: arguments as gen_args_i/arg_j,
responses as strings, target as a string). Expected values are computed by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import duckdb
import pytest

from tests.helpers.lm_eval import TINY_ARC_DOCS, TINY_ARC_YAML, main_db, run_yaml, write_task

DOCS, YAML = TINY_ARC_DOCS, TINY_ARC_YAML
# log-likelihoods per doc and the targets lm-eval logs (str of the gold index)
LLS = [[-1.0, -2.0, -3.0], [-4.0, -0.5, -9.0]]
TARGETS = ["1", "0"]


def _sample(doc_id: int, lls: list[float], acc: float, acc_norm: float) -> dict:
    doc = DOCS[doc_id]
    ctx = f"Question: {doc['question']}\nAnswer:"
    conts = [" " + c for c in doc["choices"]["text"]]
    return {
        "doc_id": doc_id,
        "doc": doc,
        "target": TARGETS[doc_id],
        "arguments": {f"gen_args_{i}": {"arg_0": ctx, "arg_1": c} for i, c in enumerate(conts)},
        "resps": [[[str(ll), "False"]] for ll in lls],
        "filtered_resps": [[str(ll), "False"] for ll in lls],
        "filter": "none",
        "metrics": ["acc", "acc_norm"],
        "doc_hash": "x",
        "prompt_hash": "y",
        "target_hash": "z",
        "acc": acc,
        "acc_norm": acc_norm,
    }


@pytest.fixture
def lm_eval_out(tmp_path: Path) -> Path:
    write_task(tmp_path)
    out = tmp_path / "out" / "EleutherAI__pythia-70m"
    out.mkdir(parents=True)
    # doc 0: raw argmax green (gold blue) -> acc 0; per char: -1/5 green, -2/4 blue, -3/3 red -> green
    # doc 1: raw argmax two (gold four) -> acc 0
    lines = [_sample(0, LLS[0], 0.0, 0.0), _sample(1, LLS[1], 0.0, 0.0)]
    (out / "samples_tiny_arc_2026-11-23T10-00-00.000000.jsonl").write_text(
        "\n".join(json.dumps(x) for x in lines) + "\n"
    )
    (out / "results_2026-11-23T10-00-00.000000.json").write_text(
        json.dumps({"model_name": "EleutherAI/pythia-70m"})
    )
    return tmp_path


def _import_lm_eval(db: Path, *args: str) -> int:
    """`llmscope --db DB import lm-eval ARGS...` in this process; its exit status."""
    return main_db(db, "import", "lm-eval", *args)


def _rows(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(
            "select item_id, prediction, gold, correct, probs, option_scores, extra "
            "from results order by item_id"
        ).fetchall()
    finally:
        con.close()


def test_import_samples_as_a_run(lm_eval_out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = lm_eval_out / "x.duckdb"
    samples = next((lm_eval_out / "out").rglob("samples_*.jsonl"))
    assert _import_lm_eval(db, str(samples)) == 0
    out = capsys.readouterr().out
    assert "EleutherAI/pythia-70m" in out and "2 samples" in out and "differs" not in out
    rows = _rows(db)
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("0", "green", "blue", 0.0),
        ("1", "two", "four", 0.0),
    ]
    probs = json.loads(rows[0][4])
    z = math.exp(-1) + math.exp(-2) + math.exp(-3)
    assert probs["green"] == pytest.approx(math.exp(-1) / z)
    assert probs["blue"] == pytest.approx(math.exp(-2) / z)
    scores = json.loads(rows[0][5])
    assert scores["blue"]["logprob"] == -2.0
    assert scores["blue"]["per_char"] == pytest.approx(-2.0 / len(" blue"))
    extra = json.loads(rows[0][6])
    assert extra["lm_eval"]["acc"] == 0.0 and extra["lm_eval"]["acc_norm"] == 0.0
    assert "mean_token" not in extra["methods"]  # lm-eval logs no token counts
    # importing again adds nothing
    assert _import_lm_eval(db, str(samples)) == 0
    assert "already imported" in capsys.readouterr().out


def test_import_against_the_yaml_suite_shares_its_suite_id(
    lm_eval_out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmscope.data.suites import load_suite

    db = lm_eval_out / "x.duckdb"
    samples = next((lm_eval_out / "out").rglob("samples_*.jsonl"))
    yaml_path = lm_eval_out / "task.yaml"
    assert _import_lm_eval(db, str(samples), "--suite", str(yaml_path), "--model", "pythia") == 0
    con = duckdb.connect(str(db), read_only=True)
    ((suite_id, model),) = con.execute("select suite_id, model from runs").fetchall()
    con.close()
    # the same suite id an `llmscope run --suite task.yaml` stores, so compare/TUI pair them
    assert suite_id == load_suite(yaml_path).suite_id
    assert model == "pythia"
    capsys.readouterr()
    assert main_db(db, "report", "--json") == 0
    assert '"accuracy"' in capsys.readouterr().out


def test_acc_disagreement_is_reported(
    lm_eval_out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = next((lm_eval_out / "out").rglob("samples_*.jsonl"))
    lines = samples.read_text().splitlines()
    rec = json.loads(lines[0])
    rec["acc"] = 1.0  # lm-eval claims correct, the log-likelihoods say green (gold blue)
    samples.write_text(json.dumps(rec) + "\n" + lines[1] + "\n")
    assert _import_lm_eval(lm_eval_out / "x.duckdb", str(samples)) == 0
    assert "1 samples where lm-eval's acc differs" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.pop("filtered_resps"), "field 'filtered_resps': missing"),
        (lambda r: r.update(filtered_resps=[["nan", "False"]] * 3), "not finite"),
        (
            lambda r: r.update(
                arguments={"gen_args_0": {"arg_0": "ctx", "arg_1": {"until": ["\n"]}}}
            ),
            "generate_until",
        ),
    ],
)
def test_bad_samples_are_one_line_errors(
    lm_eval_out: Path, capsys: pytest.CaptureFixture[str], mutate, message: str
) -> None:
    samples = next((lm_eval_out / "out").rglob("samples_*.jsonl"))
    rec = json.loads(samples.read_text().splitlines()[0])
    mutate(rec)
    samples.write_text(json.dumps(rec) + "\n")
    assert _import_lm_eval(lm_eval_out / "x.duckdb", str(samples)) == 2
    err = capsys.readouterr().err
    assert message in err and "line 1" in err and len(err.strip().splitlines()) == 1


def test_continuations_must_match_the_given_suite(
    lm_eval_out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = next((lm_eval_out / "out").rglob("samples_*.jsonl"))
    text = samples.read_text().replace('" green"', '" teal"')
    samples.write_text(text)
    assert (
        _import_lm_eval(
            lm_eval_out / "x.duckdb", str(samples), "--suite", str(lm_eval_out / "task.yaml")
        )
        == 2
    )
    assert "differ from the suite's" in capsys.readouterr().err


def test_samples_written_by_lm_evals_own_tracker_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where lm-eval is installed, its EvaluationTracker writes the samples file that is imported."""
    pytest.importorskip(
        "lm_eval", reason="lm-eval is not installed (pip install 'llmscope[bench]')"
    )
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker

    write_task(tmp_path)
    tracker = EvaluationTracker(output_path=str(tmp_path / "out"))
    tracker.general_config_tracker.model_name_sanitized = "smollm2"
    tracker.date_id = "2026-11-23T10-00-00.000000"  # set by save_results_aggregated in a real run
    samples = []
    for doc_id, doc in enumerate(DOCS):
        ctx = f"Question: {doc['question']}\nAnswer:"
        args = [(ctx, " " + c) for c in doc["choices"]["text"]]
        resps = [
            (ll, False) for ll in LLS[doc_id]
        ]  # lm-eval's in-memory form: (loglik, is_greedy) tuples
        samples.append(
            {
                "doc_id": doc_id,
                "doc": doc,
                "target": int(TARGETS[doc_id]),
                "arguments": args,
                "resps": [[r] for r in resps],
                "filtered_resps": resps,
                "filter": "none",
                "metrics": ["acc"],
                "doc_hash": "",
                "prompt_hash": "",
                "target_hash": "",
                "acc": 0.0,
            }
        )
    tracker.save_results_samples("tiny_arc", samples)
    (written,) = (tmp_path / "out" / "smollm2").glob("samples_tiny_arc_*.jsonl")
    db = tmp_path / "x.duckdb"
    assert _import_lm_eval(db, str(written), "--suite", str(tmp_path / "task.yaml")) == 0
    assert "differs" not in capsys.readouterr().out
    rows = _rows(db)
    assert [(r[0], r[1], r[2]) for r in rows] == [("0", "green", "blue"), ("1", "two", "four")]
    assert json.loads(rows[1][5])["two"]["logprob"] == -0.5


@pytest.mark.slow
def test_imported_run_pairs_with_llmscopes_own_run_of_the_yaml(
    lm_eval_out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The embedded model runs the task YAML; the lm-eval import on the same suite is compared item by item."""
    db = lm_eval_out / "x.duckdb"
    yaml_path = str(lm_eval_out / "task.yaml")
    assert run_yaml(db, yaml_path) == 0
    samples = next((lm_eval_out / "out").rglob("samples_*.jsonl"))
    assert _import_lm_eval(db, str(samples), "--suite", yaml_path) == 0
    con = duckdb.connect(str(db), read_only=True)
    runs = con.execute("select run_id, backend, suite_id from runs order by backend").fetchall()
    prompts = con.execute(
        "select backend, r.item_id, r.prompt from results r join runs using (run_id) "
        "order by r.item_id, backend"
    ).fetchall()
    con.close()
    assert [r[1] for r in runs] == ["hf", "import"] and runs[0][2] == runs[1][2]
    # the context llmscope scored is the one lm-eval logged
    assert (
        prompts[0][2] == prompts[1][2] == "Question: What color is the sky on a clear day?\nAnswer:"
    )
    capsys.readouterr()
    assert main_db(db, "compare", runs[0][0], runs[1][0], "--json") == 0
    assert capsys.readouterr().out.strip()


def test_loglikelihood_samples_store_the_loglik_without_accuracy(tmp_path: Path) -> None:
    rec = {
        "doc_id": 0,
        "doc": {"text": "The capital of France is Paris"},
        "target": " Paris",
        "arguments": {"gen_args_0": {"arg_0": "The capital of France is", "arg_1": " Paris"}},
        "resps": [[["-1.25", "True"]]],
        "filtered_resps": [["-1.25", "True"]],
        "filter": "none",
        "metrics": ["perplexity", "acc"],
        "perplexity": -1.25,
        "acc": 1,
    }
    f = tmp_path / "samples_lambada_tiny_2026-11-23T10-00-00.000000.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    db = tmp_path / "x.duckdb"
    assert _import_lm_eval(db, str(f), "--model", "m") == 0
    ((item_id, pred, gold, correct, _probs, scores, extra),) = _rows(db)
    assert (item_id, pred, gold, correct) == ("0", None, None, None)
    assert json.loads(scores) == {"Paris": {"logprob": -1.25, "n_chars": 6.0, "n_bytes": 6.0}}
    assert json.loads(extra)["lm_eval"]["is_greedy"] == [True]
