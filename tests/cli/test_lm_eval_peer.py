"""lm-eval's own numbers on the same items and model: `acc_norm`, `acc_mutual_info` and the
`export --format lm-eval` samples file, compared field by field with what a real lm-eval 0.4.13
run (`simple_evaluate` + its EvaluationTracker, HFLM on the embedded SmolLM2 weights) wrote.

The task is the first ten mc-sample questions (mc08 included: there `per_char`, which divides by
the continuation " turn down the heat" with its space, and lm-eval's `acc_norm`, which divides by
the choice text alone, choose differently) as an lm-eval task YAML that asks for acc, acc_norm
and acc_mutual_info; llmscope runs the same YAML as a suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.helpers.cli import query
from tests.helpers.lm_eval import main_db, mc_task_yaml, run_yaml
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.slow

N_DOCS = 10
YAML = mc_task_yaml(
    "mc_peer",
    "{{options}}",
    "{{options.index(gold)}}",
    "metric_list:\n  - metric: acc\n  - metric: acc_norm\n  - metric: acc_mutual_info\n",
)

# fields of a sample that llmscope's export gives as lm-eval wrote them
SAMPLE_KEYS = (
    "doc",
    "target",
    "arguments",
    "filter",
    "metrics",
    "doc_hash",
    "prompt_hash",
    "target_hash",
    "acc",
    "acc_norm",
    "acc_mutual_info",
)


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """lm-eval's samples and llmscope's run and lm-eval export of the same task YAML."""
    pytest.importorskip(
        "lm_eval", reason="lm-eval is not installed (pip install 'llmscope[bench]')"
    )
    from lm_eval import simple_evaluate
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from llmscope.engine.hf import load_model
    from llmscope.engine.models import parse_model

    d = tmp_path_factory.mktemp("lm_eval_peer")
    lines = (
        (ROOT / "data" / "builtin" / "mc-sample" / "items.jsonl").read_text().splitlines()[:N_DOCS]
    )
    assert any('"mc08"' in x for x in lines)
    (d / "docs.jsonl").write_text("\n".join(lines) + "\n")
    yaml_path = d / "mc_peer.yaml"
    yaml_path.write_text(YAML)
    tok, model, _ = load_model(parse_model(None), "cpu", "float32")
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=8, device="cpu", dtype="float32")
    cwd = Path.cwd()
    try:  # lm-eval reads data_files relative to the working directory
        import os

        os.chdir(d)
        res = simple_evaluate(
            model=lm,
            tasks=["mc_peer"],
            task_manager=TaskManager(include_path=str(d)),
            log_samples=True,
        )
    finally:
        os.chdir(cwd)
    assert res is not None
    tracker = EvaluationTracker(output_path=str(d / "lm"))
    tracker.save_results_aggregated(results=res, samples=res["samples"])
    tracker.save_results_samples(task_name="mc_peer", samples=res["samples"]["mc_peer"])
    (lm_file,) = (d / "lm").rglob("samples_mc_peer_*.jsonl")
    db = d / "x.duckdb"
    assert run_yaml(db, yaml_path) == 0
    ((run_id,),) = query(db, "select run_id from runs")
    assert main_db(db, "export", "--run", run_id, "--format", "lm-eval", "-o", str(d / "ours")) == 0
    (ours_file,) = (d / "ours").glob("samples_*.jsonl")
    return {
        "lm": [json.loads(x) for x in lm_file.read_text().splitlines()],
        "ours": [json.loads(x) for x in ours_file.read_text().splitlines()],
        "lm_results": res["results"]["mc_peer"],
        "lm_file": lm_file,
        "lm_results_file": json.loads(next((d / "lm").rglob("results_*.json")).read_text()),
        "dir": d,
        "ours_results": json.loads(next((d / "ours").glob("results_*.json")).read_text()),
        "db": db,
        "run_id": run_id,
    }


def test_acc_norm_and_mutual_info_are_lm_evals_per_item_and_overall(peer: dict[str, Any]) -> None:
    lm, ours = peer["lm"], peer["ours"]
    assert len(lm) == len(ours) == N_DOCS
    for a, b in zip(
        sorted(lm, key=lambda s: s["doc_id"]), sorted(ours, key=lambda s: s["doc_id"]), strict=True
    ):
        assert (b["doc_id"], b["acc"], b["acc_norm"], b["acc_mutual_info"]) == (
            a["doc_id"],
            a["acc"],
            a["acc_norm"],
            a["acc_mutual_info"],
        ), a["doc"]["id"]
    # mc08: per_char and acc_norm choose differently, and llmscope reports both
    con = duckdb.connect(str(peer["db"]), read_only=True)
    (extra,) = con.execute("select extra from results where item_id = '7'").fetchone()  # type: ignore[misc]
    con.close()
    methods = json.loads(extra)["methods"]
    assert methods["per_char"]["prediction"] != methods["acc_norm"]["prediction"]
    # the run's figures: the export's results file carries the report's accuracy per method
    block = peer["ours_results"]["results"]["mc_peer"]
    for name in ("acc", "acc_norm", "acc_mutual_info"):
        assert block[f"{name},none"] == pytest.approx(peer["lm_results"][f"{name},none"]), name
        assert block[f"{name}_stderr,none"] == pytest.approx(
            peer["lm_results"][f"{name}_stderr,none"]
        ), name


def test_export_samples_match_lm_evals_field_by_field(peer: dict[str, Any]) -> None:
    by_doc = {s["doc_id"]: s for s in peer["lm"]}
    for b in peer["ours"]:
        a = by_doc[b["doc_id"]]
        own = {"llmscope_item_id", "variant"}  # llmscope's keys, after lm-eval's
        assert [k for k in b if k not in own] == list(a), "same fields, same order"
        for key in SAMPLE_KEYS:
            assert b[key] == a[key], (key, a["doc"]["id"])
            assert type(b[key]) is type(a[key]), key
        assert b["arguments"]["gen_args_0"]["arg_1"].startswith(" ")  # " garden", not "garden"
        for field in ("resps", "filtered_resps"):
            ra, rb = a[field], b[field]
            assert len(ra) == len(rb) == 2 * len(a["doc"]["options"])  # options, then unconditional
            flat_a = [r[0] if field == "resps" else r for r in ra]
            flat_b = [r[0] if field == "resps" else r for r in rb]
            for x, y in zip(flat_a, flat_b, strict=True):
                assert all(
                    isinstance(v, str) for v in x + y
                )  # lm-eval writes str(loglik), str(is_greedy)
                # fp32 noise between two forward passes (batching differs)
                assert float(y[0]) == pytest.approx(float(x[0]), abs=2e-4)
                # is_greedy as lm-eval writes it: "True"/"False", the same answer per request
                assert x[1] in ("True", "False") and y[1] == x[1]


def test_export_lines_in_doc_id_order_and_results_block_shaped_like_lm_evals(
    peer: dict[str, Any],
) -> None:
    assert (
        [s["doc_id"] for s in peer["ours"]]
        == [s["doc_id"] for s in peer["lm"]]
        == list(range(N_DOCS))
    )
    theirs = peer["lm_results_file"]["results"]["mc_peer"]
    ours = peer["ours_results"]["results"]["mc_peer"]
    assert list(ours) == list(theirs), "same keys, same order"
    assert (ours["name"], ours["alias"], ours["sample_len"]) == (
        theirs["name"],
        theirs["alias"],
        theirs["sample_len"],
    )
    assert peer["ours_results"]["n-samples"] == peer["lm_results_file"]["n-samples"]


def _report_accuracy(db: Path, run_id: str, capsys: pytest.CaptureFixture[str]) -> dict[str, float]:
    capsys.readouterr()
    assert main_db(db, "report", "--run", run_id, "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    return {
        r["group"]["method"]: r["value"]
        for r in rows
        if r["metric"] == "accuracy" and set(r["group"]) == {"method"}
    }


def _run_of(db: Path, backend: str) -> list[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return [
            r[0]
            for r in con.execute(
                "select run_id from runs where backend = ? order by started_at", [backend]
            ).fetchall()
        ]
    finally:
        con.close()


def test_import_reports_lm_evals_acc_norm_under_its_name_and_export_gives_the_file_back(
    peer: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """lm-eval's samples file imported: acc_norm and acc_mutual_info reported under those names
    with lm-eval's values; exported again: lm-eval's fields as lm-eval wrote them."""
    db = tmp_path / "imp.duckdb"
    assert main_db(db, "import", "lm-eval", str(peer["lm_file"]), "--model", "smol") == 0
    (run_id,) = _run_of(db, "import")
    acc = _report_accuracy(db, run_id, capsys)
    for name in ("acc_norm", "acc_mutual_info"):
        assert acc[name] == pytest.approx(peer["lm_results"][f"{name},none"], abs=1e-12), name
    assert acc["raw"] == pytest.approx(peer["lm_results"]["acc,none"], abs=1e-12)
    con = duckdb.connect(str(db), read_only=True)
    (scores,) = con.execute("select option_scores from results where item_id = '0'").fetchone()  # type: ignore[misc]
    con.close()
    first = peer["lm"][0]
    n = len(first["doc"]["options"])
    uncond = [float(r[0]) for r in first["filtered_resps"][n:]]
    assert [json.loads(scores)[o]["uncond_logprob"] for o in first["doc"]["options"]] == uncond
    out = tmp_path / "back"
    assert main_db(db, "export", "--run", run_id, "--format", "lm-eval", "-o", str(out)) == 0
    (back_file,) = out.glob("samples_*.jsonl")
    back = [json.loads(x) for x in back_file.read_text().splitlines()]
    assert len(back) == len(peer["lm"])
    for a, b in zip(peer["lm"], back, strict=True):
        for key in ("doc_id", "resps", "filtered_resps", *SAMPLE_KEYS):
            assert b[key] == a[key], (key, a["doc_id"])
    block = json.loads(next(out.glob("results_*.json")).read_text())["results"]["mc_peer"]
    for name in ("acc", "acc_norm", "acc_mutual_info"):
        assert block[f"{name},none"] == pytest.approx(
            peer["lm_results"][f"{name},none"], abs=1e-12
        ), name


def test_llmscope_run_exported_and_imported_back_keeps_acc_norm(
    peer: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run with lm-eval's schemes, exported as lm-eval samples and imported back: the same
    acc_norm and acc_mutual_info under those names, the same as lm-eval's."""
    (ours_file,) = (peer["dir"] / "ours").glob("samples_*.jsonl")
    db = tmp_path / "back.duckdb"
    assert main_db(db, "import", "lm-eval", str(ours_file), "--model", "smol") == 0
    (run_id,) = _run_of(db, "import")
    back = _report_accuracy(db, run_id, capsys)
    orig = _report_accuracy(peer["db"], peer["run_id"], capsys)
    for name in ("raw", "acc_norm", "acc_mutual_info"):
        assert back[name] == pytest.approx(orig[name], abs=1e-12), name
    assert back["acc_norm"] == pytest.approx(peer["lm_results"]["acc_norm,none"], abs=1e-12)
