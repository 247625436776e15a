"""Report, import, export and compare on hand-made and published data."""

from __future__ import annotations

import csv
import json
import math

import pytest

from llmscope.engine.types import Item, Result
from llmscope.report import build_report
from llmscope.store.db import Store
from tests.helpers.cli import cli
from tests.helpers.paths import shared_path


def _mk_run(
    st: Store, run_id: str, suite_id: str, rows: list[tuple[str, str, float | None, float, float]]
):
    st.create_run(
        {
            "run_id": run_id,
            "suite_id": suite_id,
            "suite_name": "hand",
            "task": "yesno",
            "model": run_id,
            "n_total": len(rows),
        }
    )
    st.write_results(
        run_id,
        [
            Result(
                item_id=i,
                variant=v,
                probs={"yes": py, "no": pn},
                other=1 - py - pn,
                prediction="yes" if py > pn else "no",
                gold="yes",
                correct=c,
                confidence=max(py, pn) / (py + pn),
            )
            for i, v, c, py, pn in rows
        ],
    )


def test_report_numbers_by_hand(db_path):
    with Store(db_path) as st:
        items = [
            Item(item_id=str(i), fields={"id": i, "topic": "a" if i < 3 else "b"}, gold="yes")
            for i in range(5)
        ]
        st.add_suite("hand@1", "hand", "yesno", {"group_by": ["topic"]}, "", items)
        rows = [
            ("0", "q", 1.0, 0.6, 0.3),
            ("1", "q", 1.0, 0.7, 0.2),
            ("2", "q", 0.0, 0.2, 0.7),
            ("3", "q", 1.0, 0.5, 0.1),
            ("4", "q", None, 0.4, 0.4),
        ]
        _mk_run(st, "r1", "hand@1", rows)
        rep = build_report(st, st.get_run("r1"))
    by = {(r["metric"], json.dumps(r["group"], sort_keys=True)): r for r in rep}
    acc = by[("accuracy", "{}")]
    assert acc["value"] == pytest.approx(3 / 4) and acc["n"] == 4
    # Wilson 95% for 3/4 by hand: (p + z²/2n ± z√(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    z, n, p = 1.959963984540054, 4, 0.75
    centre, half = (
        (p + z * z / (2 * n)) / (1 + z * z / n),
        z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n),
    )
    assert acc["ci95"] == pytest.approx([centre - half, centre + half], abs=1e-9)
    assert by[("accuracy", '{"topic": "a"}')]["value"] == pytest.approx(2 / 3)
    assert by[("accuracy", '{"topic": "b"}')]["value"] == pytest.approx(1.0)
    assert by[("mean_p_yes", "{}")]["value"] == pytest.approx((0.6 + 0.7 + 0.2 + 0.5 + 0.4) / 5)
    assert by[("mean_p_other", "{}")]["value"] == pytest.approx((0.1 + 0.1 + 0.1 + 0.4 + 0.2) / 5)
    # Brier on the yes/no probabilities (gold yes) over the 4 scored items: mean of (1-py)² + pn²
    brier = sum((1 - py) ** 2 + pn**2 for _, _, c, py, pn in rows if c is not None) / 4
    assert by[("brier", "{}")]["value"] == pytest.approx(brier)


def test_variants_of_one_item_are_clustered(db_path):
    with Store(db_path) as st:
        items = [Item(item_id=str(i), fields={"id": i}, gold="yes") for i in range(40)]
        st.add_suite("hand@2", "hand", "yesno", {}, "", items)
        # three perfectly dependent variants per item: the interval must equal the one-variant interval
        rows = [
            (str(i), v, float(i % 3 != 0), 0.6, 0.3) for i in range(40) for v in ("a", "b", "c")
        ]
        _mk_run(st, "r3", "hand@2", rows)
        _mk_run(st, "r1", "hand@2", [r for r in rows if r[1] == "a"])
        three = next(
            r
            for r in build_report(st, st.get_run("r3"))
            if r["metric"] == "accuracy" and not r["group"]
        )
        one = next(
            r
            for r in build_report(st, st.get_run("r1"))
            if r["metric"] == "accuracy" and not r["group"]
        )
    assert three["value"] == pytest.approx(one["value"])
    w3 = three["ci95"][1] - three["ci95"][0]
    w1 = one["ci95"][1] - one["ci95"][0]
    # a naive interval over 120 rows would be ~√3 narrower; clustering keeps it about as wide
    assert w3 > 0.85 * w1


def test_compare_counts_discordant_pairs(db_path, tmp_path):
    with Store(db_path) as st:
        items = [Item(item_id=str(i), fields={"id": i}, gold="yes") for i in range(6)]
        st.add_suite("hand@3", "hand", "yesno", {}, "", items)
        a = [1, 1, 0, 0, 1, 0]
        b = [1, 0, 1, 1, 1, 1]
        _mk_run(st, "ra", "hand@3", [(str(i), "q", float(c), 0.6, 0.3) for i, c in enumerate(a)])
        _mk_run(st, "rb", "hand@3", [(str(i), "q", float(c), 0.6, 0.3) for i, c in enumerate(b)])
    proc = cli("compare", "ra", "rb", "--db", str(db_path), "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["comparisons"][0]
    assert out["mcnemar"]["b_base_only"] == 1 and out["mcnemar"]["c_run_only"] == 3
    # exact two-sided binomial: 2 * P(X <= 1 | n=4, 1/2) = 2 * 5/16
    assert out["mcnemar"]["p"] == pytest.approx(10 / 16)
    assert sorted(d["item_id"] for d in out["disagreements"]) == ["1", "2", "3", "5"]


@pytest.mark.slow
def test_import_published_commonsense_results(tmp_path):
    pub = shared_path("data", "commonsense", "published", "Qwen2-0.5B-Instruct")
    csv_dir = shared_path("data", "commonsense")
    db = tmp_path / "q.duckdb"
    files = sorted(str(p) for p in pub.glob("results_raw_q*.jsonl"))
    proc = cli(
        "import",
        "results",
        *files,
        "--db",
        str(db),
        "--suite-path",
        str(csv_dir / "statements_and_prompts.csv"),
    )
    assert proc.returncode == 0, proc.stderr
    proc = cli("report", "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {(r["metric"], json.dumps(r["group"])): r for r in json.loads(proc.stdout)}

    # Independent computation from the raw files.
    with open(csv_dir / "all_models_binarythresh.csv", newline="") as f:
        table = list(csv.reader(f))
    hdr = table[0]
    human = {r[0]: r[hdr.index("human_q1")] == "1" for r in table[1:]}
    published_q1 = {r[0]: r[hdr.index("Qwen2-0.5B_q1")] == "1" for r in table[1:]}
    ans = {}
    for q in ("q1", "q2"):
        for line in (pub / f"results_raw_{q}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            ans[(str(rec["id"]), q)] = rec["response"]["yes"] > rec["response"]["no"]
    # binarising q1 reproduces the published column exactly
    assert all(ans[(i, "q1")] == published_q1[i] for i in human)
    consensus = sum(ans[(i, "q1")] == human[i] for i in human) / len(human)
    awareness = sum(ans[(i, "q2")] == human[i] for i in human) / len(human)
    assert rows[("consensus", "{}")]["value"] == pytest.approx(consensus)
    assert rows[("awareness", "{}")]["value"] == pytest.approx(awareness)
    assert rows[("commonsensicality", "{}")]["value"] == pytest.approx(
        math.sqrt(consensus * awareness)
    )


@pytest.mark.slow
def test_import_worldsense_report_and_export(tmp_path):
    d = shared_path("data", "worldsense", "test_set")
    db = tmp_path / "ws.duckdb"
    proc = cli("import", "worldsense", str(d), "--db", str(db), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("87048 responses") == 4
    proc = cli("report", "--db", str(db), timeout=600)
    assert proc.returncode == 0, proc.stderr
    for model in ("GPT3.5", "GPT4", "Llama2-FT+1M", "Llama2-chat"):
        assert model in proc.stdout
    assert "accuracy per problem" in proc.stdout and "Infer.trivial" in proc.stdout
    # export --format worldsense writes back exactly the imported responses
    with Store(db, read_only=True) as st:
        run_id = st.execute("SELECT run_id FROM runs WHERE model = 'GPT4'").fetchone()[0]
    out = tmp_path / "gpt4.jsonl"
    proc = cli("export", "--db", str(db), "--run", run_id, "--format", "worldsense", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    orig = {
        (r["Key"], str(r["resp"]).strip())
        for r in map(
            json.loads, (d / "results" / "basic___GPT4___results.jsonl").read_text().splitlines()
        )
    }
    got = {(r["Key"], r["resp"]) for r in map(json.loads, out.read_text().splitlines())}
    assert got == orig


def _ws_store(path, models):
    """A small WorldSense-shaped store: 3 problems x 2 sizes x 4 tuples of 3 trials (classes
    1, 2, 3), one run per entry of ``models`` (model, prompting, seed of its responses)."""
    import numpy as np

    from llmscope.engine.types import Item, Result

    items = []
    for prob in ("Infer.trivial", "Consist.normal", "Compl.trivial"):
        for size in (3, 4):
            for t in range(4):
                for j, gold in enumerate(("1", "2", "3")):
                    items.append(
                        Item(
                            f"{prob}-{size}-{t}-{j}",
                            {
                                "tuple_ID": f"{prob}-{size}-{t}",
                                "expectedresp": ["1", "2", "3"],
                                "problemname": prob,
                                "problemsize": size,
                            },
                            gold=gold,
                            options=["1", "2", "3"],
                        )
                    )
    with Store(path) as st:
        st.add_suite(
            "ws-small", "worldsense", "constrained", {"cluster_field": "tuple_ID"}, "test", items
        )
        responses = {}
        for k, (model, prompting, seed) in enumerate(models):
            rid = f"w{k}"
            st.create_run(
                {
                    "run_id": rid,
                    "suite_id": "ws-small",
                    "suite_name": "worldsense",
                    "task": "constrained",
                    "n_total": len(items),
                    "model": model,
                    "options": {"import": {"prompting": prompting}},
                }
            )
            rng = np.random.default_rng(seed)
            resp = [str(x) for x in rng.integers(1, 4, size=len(items))]
            st.write_results(
                rid,
                [
                    Result(
                        item_id=it.item_id,
                        variant="default",
                        prompt="p",
                        prediction=r,
                        gold=it.gold,
                        correct=float(r == it.gold),
                    )
                    for it, r in zip(items, resp, strict=True)
                ],
            )
            responses[rid] = resp
    return items, responses


@pytest.mark.parametrize(
    "models",
    [
        [
            ("m1", "basic", 1),
            ("m2", "basic", 2),
            ("m1", "cot", 3),
        ],  # one run per (model, prompting): stacked
        [
            ("m1", "basic", 1),
            ("m1", "basic", 2),
        ],  # two runs pooled in one group: rebuilt from tuples
    ],
)
def test_worldsense_tables_over_runs_equal_the_authors_analysis(tmp_path, models):
    """The authors' tables `llmscope report` prints for several runs equal their reference
    analysis (analysis.worldsense.analyse) of all the runs' trials at once."""
    import pandas as pd

    from llmscope.analysis.worldsense import analyse, report_rows, worldsense_frame
    from llmscope.report import worldsense_reports

    items, responses = _ws_store(tmp_path / "ws.duckdb", models)
    trials = pd.DataFrame(
        {
            "Key": [it.item_id for it in items],
            "tuple_ID": [it.fields["tuple_ID"] for it in items],
            "goldresp": [it.gold for it in items],
            "expectedresp": [["1", "2", "3"]] * len(items),
            "problemname": [it.fields["problemname"] for it in items],
            "problemsize": [it.fields["problemsize"] for it in items],
        }
    )
    # each run's tuples are its own (two runs of one model and prompting: twice the tuples)
    trials = pd.concat(
        [
            trials.assign(Key=trials["Key"] + f"#{k}", tuple_ID=trials["tuple_ID"] + f"#{k}")
            for k in range(len(models))
        ],
        ignore_index=True,
    )
    resp = pd.concat(
        [
            pd.DataFrame(
                {
                    "Key": [f"{it.item_id}#{k}" for it in items],
                    "resp": r,
                    "modelname": m,
                    "prompting": p,
                }
            )
            for k, (r, (m, p, _s)) in enumerate(zip(responses.values(), models, strict=True))
        ],
        ignore_index=True,
    )
    ref = analyse(worldsense_frame(trials, resp))
    want = {
        (r["model"], json.dumps(r["group"], sort_keys=True), r["metric"]): (
            r["value"],
            r["ci95"],
            r["n"],
        )
        for r in report_rows(ref, "worldsense")
    }
    import llmscope.analysis.metrics as metrics

    for _ in range(2):  # computed, then from the metrics cache the store keeps (a new process)
        metrics._CACHE.clear()
        with Store(tmp_path / "ws.duckdb") as st:
            runs = [st.get_run(f"w{k}") for k in range(len(models))]
            rows, text = worldsense_reports(st, runs)
        got = {
            (r["model"], json.dumps(r["group"], sort_keys=True), r["metric"]): (
                r["value"],
                r["ci95"],
                r["n"],
            )
            for r in rows
        }
        assert got.keys() == want.keys()
        for k, (v, ci, n) in want.items():
            assert got[k][0] == pytest.approx(v, abs=1e-12) and got[k][2] == n, k
            assert got[k][1] == pytest.approx(ci, abs=1e-12), k
        assert ref.pivot("problem_accuracy").to_string() in "\n".join(text)


def test_lm_eval_export_of_a_worldsense_run_after_a_report_is_the_plain_share(tmp_path):
    """After a report stored the run's metrics (where the plain share is `item_accuracy`), the
    lm-eval export still writes the per-trial share of correct answers, counted here."""
    import llmscope.analysis.metrics as metrics
    from llmscope.analysis.metrics import run_metrics
    from llmscope.io.export import export_run

    items, responses = _ws_store(tmp_path / "ws.duckdb", [("m1", "basic", 1)])
    want = sum(r == it.gold for it, r in zip(items, responses["w0"], strict=True)) / len(items)
    with Store(tmp_path / "ws.duckdb") as st:
        assert run_metrics(st, st.get_run("w0")).get("item_accuracy") is not None  # stored
    metrics._CACHE.clear()
    with Store(tmp_path / "ws.duckdb", read_only=True) as st:
        export_run(st, st.get_run("w0"), "lm-eval", str(tmp_path / "out"))
    res = json.loads((tmp_path / "out" / "results_w0.json").read_text())
    assert res["results"]["worldsense"]["acc,none"] == pytest.approx(want)
