"""Human vs model side by side (tui/panels/human.py): each kind of human data, numbers checked
by hand or with scipy, the screen and the drill-down driven through the app."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from scipy import stats

from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.panels.human import (
    HumanScreen,
    human_data,
    human_kind,
    render_human_item,
)
from tests.helpers.paths import shared_path
from tests.helpers.tui import make_db, p_yes_for, settle, wait_until
from tests.helpers.tui_pilot import open_run, press_until, started
from tests.helpers.tui_runs import add_suite_run


def _text(parts: list) -> str:
    con = Console(width=140, file=io.StringIO(), record=True)
    for p in parts:
        con.print(p)
    return con.export_text()


def test_kinds_of_human_data() -> None:
    assert human_kind({"human_q1": "0.8"}, {}, "yesno") == "agreement"
    assert (
        human_kind({"human_counts": "[4, 1, 15]"}, {"human_counts_field": "human_counts"}, "choice")
        == "counts"
    )
    assert human_kind({"raw": {}, "clusters": {}}, {}, "generation") == "clusters"
    assert human_kind({"gold": "3.4"}, {}, "rating") == "rating"
    assert human_kind({"gold": "yes"}, {}, "yesno") is None


# choice_frame and rating_frame (the per-row tables) are tested in tests/analysis/test_human.py.


def test_cluster_drill_down_shows_both_distributions_and_kl() -> None:
    first = {
        "item_id": "q1",
        "fields": {
            "raw": {"a": 2},
            "clusters": {"q1.1": {"count": 3, "answers": ["dawn", "sunrise"]}},
        },
    }
    pe = {
        "questions": {
            "q1": {
                "kl": 0.4321,
                "n_model": 5,
                "n_wrong": 1,
                "table": [
                    {
                        "cluster": "q1.1",
                        "human_count": 3,
                        "human_p": 0.75,
                        "model_count": 4,
                        "model_p": 0.6,
                    },
                    {
                        "cluster": "wrong",
                        "human_count": 0,
                        "human_p": 0.25,
                        "model_count": 1,
                        "model_p": 0.4,
                    },
                ],
            }
        }
    }
    det = [
        {
            "run_id": "r",
            "variants": [
                {"variant": "v", "extra": {"samples": [{"text": "dawn"}, {"text": "noon"}]}}
            ],
        }
    ]
    out = _text(render_human_item(first, det, {}, "generation", pe))
    assert "KL(human || model) 0.432" in out and "matched to no cluster 1" in out
    assert "0.75 (3)" in out and "0.60 (4)" in out  # counts as integers (the one number format)
    assert "dawn, sunrise" in out and "dawn | noon" in out


async def test_agreement_screen_uses_the_pipeline_correlation(tmp_path: Path) -> None:
    db = make_db(tmp_path / "h.duckdb", n_items=12)
    # by hand: human_q1 = 1 for even items (gold yes), P(yes) of variant q1 from the generating rule
    human = [1.0 if i % 2 == 0 else 0.0 for i in range(12)]
    py = [p_yes_for(i) for i in range(12)]
    r = stats.pearsonr(human, py).statistic
    with Store(db, read_only=True) as st:
        d = human_data(st, st.get_run("run-a"))
    got = {m["metric"]: m["value"] for m in d.metrics}
    assert d.kind == "agreement" and got["human_pearson"] == pytest.approx(r)
    app = LlmscopeApp(db, refresh_s=0.2)
    async with app.run_test(size=(140, 45)) as pilot:
        await settle(pilot)
        app.push_screen(HumanScreen("run-a"))
        assert await wait_until(
            pilot, lambda: isinstance(app.screen, HumanScreen) and app.screen.data is not None
        )
        scr = app.screen
        assert isinstance(scr, HumanScreen) and scr.data is not None
        a = scr.data.agreement
        assert a is not None and len(a) == 12
        far = max(range(12), key=lambda i: abs(py[i] - human[i]))
        table = _text([scr._table(scr.data)])
        first_row = next(line for line in table.splitlines() if line.strip().startswith("s0"))
        assert first_row.strip().startswith(f"s{far:03d}")
        assert f"human_pearson {r:.3f}" in str(scr.query_one("#human-scatter").plt.build())  # type: ignore[attr-defined]


@pytest.mark.slow
def test_choice_counts_beside_model_probabilities_in_a_real_run(tmp_path: Path) -> None:
    from llmscope.cli import main
    from tests.helpers.cli import tiny_model_dir

    folder = tiny_model_dir(tmp_path)
    db = tmp_path / "pc.duckdb"
    assert (
        main(
            [
                "run",
                "--db",
                str(db),
                "--suite",
                "pragmatics-choice",
                "--model",
                f"hf:{folder}",
                "--limit",
                "3",
                "--device",
                "cpu",
                "--quiet",
                "--no-report",
            ]
        )
        == 0
    )
    with Store(db, read_only=True) as st:
        run = st.runs().to_dict("records")[0]
        run = st.get_run(run["run_id"])
        d = human_data(st, run)
        res = st.query_df(
            "SELECT r.item_id, r.variant, r.probs, i.fields, i.options FROM results r "
            "JOIN items i ON i.item_id = r.item_id AND i.suite_id = ? WHERE r.run_id = ? "
            "AND r.error IS NULL",
            [run["suite_id"], run["run_id"]],
        )
    assert d.kind == "counts" and d.choices is not None and len(d.choices) == len(res)
    for rec in res.to_dict("records"):
        f = json.loads(rec["fields"])
        counts = (
            json.loads(f["human_counts"])
            if isinstance(f["human_counts"], str)
            else f["human_counts"]
        )
        probs = json.loads(rec["probs"])
        opts = json.loads(rec["options"])
        row = d.choices[
            (d.choices.item_id == rec["item_id"]) & (d.choices.variant == rec["variant"])
        ].iloc[0]
        assert row["human"] == pytest.approx([c / sum(counts) for c in counts])
        total = sum(probs[o] for o in opts)
        assert row["model"] == pytest.approx([probs[o] / total for o in opts])


def test_probeval_summary_equals_the_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KL and its interval from the stored per-question tables equal the pipeline's probeval_kl."""
    import llmscope.report as report
    from llmscope.analysis.metrics import results_with_fields, run_metrics
    from llmscope.data.suites import load_suite
    from llmscope.engine.types import Result

    shared_path("data", "cfc")  # the CFC questions with their human answers
    monkeypatch.setattr(
        report, "_default_embedder", lambda: None
    )  # exact matching: no model download
    suite = load_suite("cfc")
    items = suite.items()[:8]
    db = tmp_path / "cfc.duckdb"
    with Store(db) as st:
        add_suite_run(st, suite, "cfc", "generation", items, "g1")
        res = []
        for k, it in enumerate(items):
            raw = list(it.fields["raw"]) if isinstance(it.fields["raw"], dict) else []
            samples = raw[: 1 + k % 3] + ["zzz unmatched"] * (k % 2 + 1)
            res.append(
                Result(
                    item_id=it.item_id,
                    variant="default",
                    prompt="p",
                    prediction=samples[0],
                    extra={"samples": [{"text": s} for s in samples]},
                )
            )
        st.write_results("g1", res)
        run = st.get_run("g1")
        assert run is not None
        d = human_data(st, run)  # computes and stores the per-question tables once
        assert st.load_analysis("g1", "probeval") is not None
        pipe = run_metrics(st, run)
        assert len(results_with_fields(st, "g1")) == len(items)
    kl = pipe.get("probeval_kl")
    assert kl is not None and d.kind == "clusters"
    ours = {m["metric"]: m for m in d.metrics}
    assert ours["probeval_kl"]["value"] == pytest.approx(kl.value)
    assert ours["probeval_kl"]["ci95"] == pytest.approx(kl.ci95)
    share = pipe.get("probeval_wrong_share")
    assert share is not None and ours["probeval_wrong_share"]["value"] == pytest.approx(share.value)


LIVE_WRITER = """
import os, socket, sys, datetime as dt
sys.path.insert(0, {root!r})
from llmscope.data.suites import load_suite
from llmscope.engine.progress import Progress
from llmscope.engine.types import Result
from llmscope.runs.live import LiveWriter
from llmscope.store.db import Store

suite = load_suite("pragmatics-choice")
items = suite.items()[:{n}]
store = Store({db!r})  # holds DuckDB's write lock, as `llmscope run` does
store.add_suite(suite.suite_id, "pragmatics-choice", "choice", suite.spec, "tests", suite.items())
now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
store.create_run({{"run_id": "run-h", "suite_id": suite.suite_id, "suite_name": "pragmatics-choice",
                  "task": "choice", "model": "m", "backend": "test", "n_total": {n}, "status": "running",
                  "started_at": now, "updated_at": now, "options": {{}}, "versions": {{}},
                  "meta": {{"suite": {{"name": "pragmatics-choice"}}}},
                  "owner_pid": os.getpid(), "owner_host": socket.gethostname(), "heartbeat_at": now}})
live = LiveWriter({db!r}, interval_s=0.0)
prog = Progress(run_id="run-h", total={n})
live.on_start(store.get_run("run-h"), prog)
res = []
for i, it in enumerate(items):
    w = [float((i + j) % 3 + 1) for j in range(len(it.options))]
    probs = {{o: x / sum(w) for o, x in zip(it.options, w)}}
    pred = max(probs, key=probs.get)
    res.append(Result(item_id=it.item_id, variant="qa", prompt="p", probs=probs, prediction=pred,
                      gold=it.gold, correct=float(pred == it.gold)))
store.write_results("run-h", res)
prog.done = len(res)
live.on_results(res, prog)
live.on_progress(prog)
print("ready", flush=True)
sys.stdin.readline()
store.update_run("run-h", status="completed")
store.close()
prog.status = "completed"
live.on_end(prog)
"""


async def test_human_view_of_a_live_run_uses_the_pipeline_on_the_rows_so_far(
    tmp_path: Path,
) -> None:
    """`h` on a live dashboard (another process writes the run): the human panel shows the
    pipeline's human_majority_agreement and human_tv_distance over the rows received so far,
    equal to values computed here from the suite's human counts and the written probabilities."""
    import subprocess
    import sys

    import numpy as np

    from llmscope.data.suites import load_suite
    from tests.helpers.paths import ROOT
    from tests.helpers.tui import screen_text

    n = 5
    db = tmp_path / "live.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", LIVE_WRITER.format(root=str(ROOT), db=str(db), n=n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        tv, agree = [], []
        for i, it in enumerate(load_suite("pragmatics-choice").items()[:n]):
            h = np.asarray(it.fields["human_counts"], float)
            h /= h.sum()
            w = np.asarray([(i + j) % 3 + 1 for j in range(len(it.options))], float)
            m = w / w.sum()
            tv.append(0.5 * np.abs(h - m).sum())
            agree.append(float(np.argmax(h) == np.argmax(m)))
        app = LlmscopeApp(db, watch=True, refresh_s=0.1)
        async with started(app, (140, 45)) as pilot:
            assert await wait_until(pilot, lambda: "running (live)" in screen_text(app))
            dash = await open_run(pilot)
            assert dash.source == "live"
            assert await wait_until(pilot, lambda: f"{n}/{n} results" in screen_text(app))
            await press_until(
                pilot, "h", HumanScreen, lambda s: s.data is not None and s.data.live_rows == n
            )
            text = screen_text(app)
            assert f"live: the {n} rows received so far" in text
            assert f"human_majority_agreement {np.mean(agree):.3f}" in text
            assert f"human_tv_distance {np.mean(tv):.3f}" in text
            scr = app.screen
            assert (
                isinstance(scr, HumanScreen)
                and scr.data is not None
                and scr.data.choices is not None
            )
            assert sorted(scr.data.choices["tv"].round(12)) == sorted(np.round(tv, 12))
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            proc.wait(timeout=30)
