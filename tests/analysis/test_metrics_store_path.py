"""The metrics pipeline over a stored run: the lean SQL loader, the per-run cache, the
dashboard's first frame, and the layering rule (analysis never imports the CLI).

Expected values are recomputed by hand from the toy suite's generating rule
(tests/test_tui_fixtures.py), not from the pipeline.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest

from llmscope.analysis.metrics import compute_metrics, display, results_with_fields, run_metrics  # noqa: E402
from llmscope.analysis.queries import decode_json_column, metric_frame, result_profile  # noqa: E402
from llmscope.store.db import Store  # noqa: E402
from tests.helpers.paths import ROOT
from tests.helpers.tui import add_suite, create_run, expected_accuracy, make_db, toy_result  # noqa: E402


def test_stored_run_metrics_match_hand_values_and_the_full_frame(tmp_path: Path) -> None:
    db = make_db(tmp_path / "a.duckdb", n_items=12)
    with Store(db, read_only=True) as st:
        run = st.get_run("run-a")
        rm = run_metrics(st, run, cache=False)
        assert rm.get("accuracy").value == pytest.approx(expected_accuracy(12))
        # per category (the suite's group_by), by hand: items i with i % 3 == k
        for k, cat in enumerate(("animals", "food", "weather")):
            right = [
                (0.05 + ((i * 37) % 81) / 100 > 0.9 - (0.05 + ((i * 37) % 81) / 100))
                == (i % 2 == 0)
                for i in range(12)
                if i % 3 == k
            ]
            assert rm.get("accuracy", {"category": cat}).value == pytest.approx(
                sum(right) / len(right)
            )
        # the lean loader gives the same numbers as the whole stored rows with every field expanded
        full = compute_metrics(
            results_with_fields(st, "run-a"), run, st.suite_spec(run["suite_id"]), store=st
        )
        assert [(m.name, m.group, m.value, m.lo, m.hi, m.n, m.n_clusters) for m in rm.metrics] == [
            (m.name, m.group, m.value, m.lo, m.hi, m.n, m.n_clusters) for m in full.metrics
        ]


def test_lean_frame_reads_only_named_fields_and_columns(tmp_path: Path) -> None:
    db = make_db(tmp_path / "a.duckdb", n_items=6, variants=("q1",))
    with Store(db, read_only=True) as st:
        run = st.get_run("run-a")
        df = metric_frame(st, run, ["category", "human_q1", "no_such_field"], columns=["p_yes"])
        assert "prompt" not in df and "top_tokens" not in df and "probs" not in df
        assert "f.no_such_field" not in df  # no item has it
        assert df["f.category"].tolist() == ["animals", "food", "weather"] * 2
        assert df["f.human_q1"].tolist() == [1, 0, 1, 0, 1, 0]
        prof = result_profile(st, "run-a")
        assert prof.n == 6 and prof.has("p_yes") and not prof.has("option_scores")


def test_cache_follows_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "c.duckdb"
    with Store(path) as st:
        items = add_suite(st, 6)
        create_run(st, "r", 6)
        st.write_results("r", [toy_result(it, i) for i, it in enumerate(items[:3])])
        run = st.get_run("r")
        first = run_metrics(st, run)
        assert run_metrics(st, run) is first  # unchanged rows: the cached value
        st.write_results(
            "r", [toy_result(it, i) for i, it in enumerate(items) if i >= 3], start_seq=3
        )
        second = run_metrics(st, run)
        assert second is not first
        assert first.get("accuracy").n == 3 and second.get("accuracy").n == 6
        assert second.get("accuracy").value == pytest.approx(expected_accuracy(6, ("q1",)))


def test_decode_json_column_by_hand() -> None:
    s = pd.Series(['"a"', '"a\\"b"', "[1, 2]", "3", None, '"a"', "true"])
    assert decode_json_column(s).tolist() == ["a", 'a"b', [1, 2], 3, None, "a", True]


def test_dashboard_first_frame_counts(tmp_path: Path) -> None:
    from llmscope.tui.data.store import quick_snapshot

    path = tmp_path / "q.duckdb"
    with Store(path) as st:
        items = add_suite(st, 5)
        create_run(st, "r", 5)
        res = [toy_result(it, i) for i, it in enumerate(items)]
        res[1].error, res[1].correct = "boom", None
        res[2].gold, res[2].correct = None, None
        st.write_results("r", res)
    with Store(path, read_only=True) as st:
        run, snap = quick_snapshot(st, "r")
    assert run is not None and run["run_id"] == "r"
    assert snap.pending and (snap.n, snap.n_errors, snap.n_scored) == (5, 1, 3)


def test_worldsense_metrics_print_at_three_decimals() -> None:
    # a fraction (the authors' tables print it x100): 0.5556 is their 55.6, not "0.6"
    assert display("worldsense_accuracy", 0.5556) == "0.556"
    assert display("worldsense_bias", -0.0234) == "-0.023"


def test_analysis_never_imports_the_cli_layer() -> None:
    banned = (
        "llmscope.report",
        "llmscope.cli",
        "llmscope.compare",
        "llmscope.io.export",
        "llmscope.tui",
    )
    for path in sorted((ROOT / "analysis").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for n in names:
                assert not n.startswith(banned), f"{path.name} imports {n}"


def test_live_progress_accuracy_equals_the_report(tmp_path: Path) -> None:
    # The run loop's running accuracy (console, run list while a run streams) and the report's
    # `accuracy` of the finished run: two code paths, one definition.
    import asyncio
    import json

    from llmscope.data.suites import load_suite
    from llmscope.engine.hf import HFBackend
    from llmscope.engine.runner import Runner, RunPlan
    from tests.helpers.tinymodel import make_tiny_model, tiny_spec

    lines = [
        json.dumps(
            {"id": f"s{i}", "text": f"The sky is number {i}.", "gold": "yes" if i % 3 else "no"}
        )
        for i in range(9)
    ]
    (tmp_path / "items.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "suite.yaml").write_text(
        "name: tiny\ntask: yesno\nitems: items.jsonl\ntext_field: text\n"
        "templates:\n  a: 'Is it true? {text}'\n  b: 'Do you agree? {text}'\n"
    )
    model, tok = make_tiny_model(tmp_path)
    backend = HFBackend(
        tiny_spec(tmp_path), model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=4
    )
    plan = RunPlan(suite=load_suite(tmp_path / "suite.yaml"), model_label="tiny", model_arg="tiny")

    async def main():  # type: ignore[no-untyped-def]
        try:
            return await Runner(plan, backend, store).run()
        finally:
            await backend.aclose()

    with Store(tmp_path / "p.duckdb") as store:
        prog = asyncio.run(main())
        rm = run_metrics(store, store.get_run(prog.run_id))
    acc = rm.get("accuracy")
    assert prog.accuracy is not None and acc is not None and prog.scored == acc.n == 18
    assert display("accuracy", prog.accuracy) == display("accuracy", acc.value)
    assert prog.accuracy == pytest.approx(acc.value, abs=1e-12)


def test_vectorised_cluster_bootstrap_gives_the_loops_interval() -> None:
    import numpy as np

    from llmscope.analysis.metric_stats import cluster_bootstrap_mean, cluster_bootstrap_stat
    from llmscope.analysis.metrics import BootstrapConfig

    rng = np.random.default_rng(5)
    v = rng.random(57)
    cl = rng.integers(0, 23, size=57).astype(str)  # uneven clusters, an odd count
    cfg = BootstrapConfig(resamples=400, seed=3)
    loop = cluster_bootstrap_stat(lambda ix: float(v[ix].mean()), len(v), cl, cfg)
    fast = cluster_bootstrap_mean(v, cl, cfg)
    assert fast[3] == loop[3] and fast[0] == pytest.approx(loop[0], abs=1e-15)
    assert fast[1] == pytest.approx(loop[1], abs=1e-12) and fast[2] == pytest.approx(
        loop[2], abs=1e-12
    )
