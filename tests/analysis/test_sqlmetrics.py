"""The metrics pipeline in SQL (analysis/sqlmetrics.py) against the row pipeline and by hand.

A WorldSense-shaped suite is stored in a real DuckDB file; the SQL form must give the row
pipeline's (``compute_metrics`` over the per-row frame) numbers to the last bit, and the
hand values below are recomputed from the rows written here, not from either pipeline.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import llmscope.analysis.metrics as metrics
from llmscope.analysis.metrics import run_metrics
from llmscope.analysis.queries import result_profile
from llmscope.analysis.sqlmetrics import sql_run_metrics
from llmscope.engine.types import Item, Result
from llmscope.store.db import Store

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ANSWERS = {"Infer.normal": ["TRUE", "FALSE"], "Compl.trivial": ["1", "2", "3"]}
# Predictions cycle through valid, padded and invalid answers (the authors strip whitespace).
PREDICTIONS = ["TRUE", " FALSE", "maybe", "1", "3\n", "2", "FALSE", None]


def _spec(**over: Any) -> dict[str, Any]:
    spec = {
        "name": "worldsense",
        "task": "constrained",
        "group_by": ["problemname", "problemsize"],
        "cluster_field": "tuple_ID",
        "gold_field": "goldresp",
        "options_field": "expectedresp",
    }
    spec.update(over)
    return spec


def build(
    path: Path,
    *,
    n_tuples: int = 9,
    int_ids: bool = False,
    drop: int | None = None,
    variants: tuple[str, ...] = ("basic",),
    extra_field: Any = None,
    fraction: bool = False,
    no_size: int | None = None,
    ghost: bool = False,
    spec: dict[str, Any] | None = None,
) -> list[Result]:
    """A WorldSense-shaped run: tuples of 2 (TRUE/FALSE) or 3 (1/2/3) trials, two problems,
    two sizes, some errors and invalid answers; ``drop`` leaves one trial out (an incomplete
    tuple)."""
    items: list[Item] = []
    for t in range(n_tuples):
        pname = "Infer.normal" if t % 2 == 0 else "Compl.trivial"
        opts = ANSWERS[pname]
        for j, gold in enumerate(opts):
            f: dict[str, Any] = {
                "tuple_ID": t * 7 if int_ids else f"tup-{t}",
                "expectedresp": opts,
                "problemname": pname,
                "problemsize": 3 + t % 2,
                "goldresp": gold,
            }
            if extra_field is not None:
                f["flag"] = extra_field
            if t == no_size:
                del f["problemsize"]
            items.append(Item(f"k{t}-{j}", f, gold=gold, options=opts, text=f"trial {t}.{j}"))
    results, seq = [], 0
    for v in variants:
        for i, it in enumerate(items):
            if drop is not None and i == drop:
                continue
            pred = PREDICTIONS[(i * 3 + len(v)) % len(PREDICTIONS)]
            err = "timeout" if i % 11 == 5 else None
            correct = None if err else float(pred is not None and pred.strip() == it.gold)
            if fraction and i == 1:
                correct = 0.5
            results.append(
                Result(
                    item_id=it.item_id,
                    variant=v,
                    prompt="",
                    prediction=None if err else pred,
                    gold=it.gold,
                    correct=correct,
                    error=err,
                )
            )
            seq += 1
    if ghost:  # a row whose item is not in the suite
        results.append(
            Result(
                item_id="ghost",
                variant=variants[0],
                prompt="",
                prediction="TRUE",
                gold="TRUE",
                correct=1.0,
            )
        )
    with Store(path) as st:
        st.add_suite("ws-suite", "worldsense", "constrained", spec or _spec(), "tests", items)
        st.create_run(
            {
                "run_id": "r",
                "suite_id": "ws-suite",
                "suite_name": "worldsense",
                "task": "constrained",
                "model": "m",
                "backend": "test",
                "n_total": len(results),
                "status": "completed",
                "started_at": T0,
                "updated_at": T0,
                "options": {},
                "meta": {},
            }
        )
        st.write_results("r", results)
    return results


def both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """The run's metrics through SQL (asserting the SQL form took it) and through the rows."""
    with Store(path, read_only=True) as st:
        run = st.get_run("r")
        spec = st.suite_spec("ws-suite")
        direct = sql_run_metrics(
            st, run, spec, spec["group_by"], metrics.BOOTSTRAP, None, result_profile(st, "r")
        )
        assert direct is not None, "the SQL form declined a run it covers"
        sql = run_metrics(st, run, cache=False)
        monkeypatch.setattr(metrics, "SQL_METRICS", False)
        rows = run_metrics(st, run, cache=False)
        monkeypatch.setattr(metrics, "SQL_METRICS", True)
    return sql, rows


def same(a: Any, b: Any) -> None:
    key = [
        (m.name, m.group, m.value, m.lo, m.hi, m.n, m.n_clusters, m.interval_method, m.producer)
        for m in a.metrics
    ]
    assert key == [
        (m.name, m.group, m.value, m.lo, m.hi, m.n, m.n_clusters, m.interval_method, m.producer)
        for m in b.metrics
    ]
    assert a.rows() == b.rows()
    assert set(a.artifacts) == set(b.artifacts)
    for k, v in a.artifacts.items():
        if isinstance(v, pd.DataFrame):
            cols = [c for c in v.columns if c != "Key"]
            pd.testing.assert_frame_equal(
                v[cols].astype(object), b.artifacts[k][cols].astype(object), check_exact=True
            )
        else:
            assert v == b.artifacts[k]


def test_sql_form_equals_the_row_pipeline_and_hand_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = build(tmp_path / "w.duckdb")
    sql, rows = both(tmp_path / "w.duckdb", monkeypatch)
    same(sql, rows)
    # by hand: per-trial accuracy over scored rows, clusters = tuples with a scored row
    scored = [r for r in res if r.error is None]
    acc = sql.get("item_accuracy")
    assert acc.value == sum(r.correct for r in scored) / len(scored)
    assert acc.n == len(scored) and acc.n_clusters == len({r.item_id.split("-")[0] for r in scored})
    assert sql.get("errors").value == sum(r.error is not None for r in res)
    # the authors' per-tuple accuracy of tuple 1 (1/2/3, weights 0.25/0.25/0.5): trial k1-j
    # answers PREDICTIONS[3j + 5 % 8]; errors count as invalid (0)
    tup = sql.artifacts["worldsense_tuples"].set_index("tuple_ID").loc["tup-1"]
    w = {"1": 0.25, "2": 0.25, "3": 0.5}
    know = {"1": "K", "2": "K", "3": "U"}
    num = den = 0.0
    for j, gold in enumerate(["1", "2", "3"]):
        i = 2 + j  # tuple 0 has two trials
        pred = None if i % 11 == 5 else PREDICTIONS[(i * 3 + 5) % 8]
        resp = (pred or "").strip()
        den += w[gold]
        num += w[gold] * (know.get(resp) == know[gold])
    assert tup["acc"] == num / den and tup["n_trials"] == 3


def test_int_tuple_ids_and_an_incomplete_tuple(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build(tmp_path / "v.duckdb", int_ids=True, drop=4)
    sql, rows = both(tmp_path / "v.duckdb", monkeypatch)
    same(sql, rows)
    # tuple 1 (items 2, 3, 4) lost its third trial: its two trials are left out
    assert sql.artifacts["worldsense_incomplete"] == 2
    tuples = sql.artifacts["worldsense_tuples"]
    assert 7 not in set(tuples["tuple_ID"]) and tuples["tuple_ID"].map(type).eq(int).all()


def test_items_without_a_group_field_are_in_no_group_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = build(tmp_path / "g.duckdb", no_size=3)
    sql, rows = both(tmp_path / "g.duckdb", monkeypatch)
    same(sql, rows)
    sizes = [m.n for m in sql.by_group("item_accuracy", "problemsize")]
    scored = [r for r in res if r.error is None]
    assert sum(sizes) == len(scored) - sum(r.item_id.startswith("k3-") for r in scored)


def test_prompt_variants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = build(tmp_path / "p.duckdb", variants=("basic", "alt"))
    sql, rows = both(tmp_path / "p.duckdb", monkeypatch)
    same(sql, rows)
    # every tuple has twice its trials (two variants): the authors' table excludes them all,
    # so the plain per-trial accuracy is the run's accuracy, per variant too
    assert sql.get("worldsense_accuracy") is None
    alt = [r for r in res if r.variant == "alt" and r.error is None]
    assert sql.get("accuracy", {"variant": "alt"}).value == sum(r.correct for r in alt) / len(alt)
    assert sql.get("variant_acc_range") is not None


def _sql_declines(st: Store) -> Any:
    """Run "r" of `st`, once the SQL path has declined it (None: the rows decide its metrics)."""
    run = st.get_run("r")
    spec = st.suite_spec("ws-suite")
    profile = result_profile(st, "r")
    assert (
        sql_run_metrics(st, run, spec, spec["group_by"], metrics.BOOTSTRAP, None, profile) is None
    )
    return run


@pytest.mark.parametrize(
    "kw",
    [
        dict(extra_field=True, spec=_spec(group_by=["flag"])),  # booleans: "True" vs "true"
        dict(extra_field=1e5, spec=_spec(group_by=["flag"])),  # floats: "100000.0"
        dict(fraction=True),  # a fractional score
        dict(spec=_spec(group_by=["gold"])),
    ],
)  # a result column wins over a field
def test_what_sql_does_not_cover_exactly_goes_through_the_rows(
    tmp_path: Path, kw: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    build(tmp_path / "f.duckdb", **kw)
    with Store(tmp_path / "f.duckdb", read_only=True) as st:
        run = _sql_declines(st)
        got = run_metrics(st, run, cache=False)
        monkeypatch.setattr(metrics, "SQL_METRICS", False)
        same(got, run_metrics(st, run, cache=False))


def test_a_row_without_its_item_is_left_to_the_rows(tmp_path: Path) -> None:
    build(tmp_path / "o.duckdb", ghost=True)
    with Store(tmp_path / "o.duckdb", read_only=True) as st:
        _sql_declines(st)
