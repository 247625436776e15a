"""The metrics cache (analysis/metrics.py `run_metrics`): stored per run in the file beside
the database (store/metrics_cache.py), keyed by the run's configuration and a fingerprint of
its rows, read by the next process, invalidated by any row change; the runs list shows the
cached headline metric; reading a run never writes (or locks) the database itself."""

from __future__ import annotations

from pathlib import Path

import pytest

import llmscope.analysis.metric_cache as metric_cache
import llmscope.analysis.metrics as metrics
from llmscope.analysis.metrics import run_metrics
from llmscope.engine.types import Result
from llmscope.store.db import Store
from tests.helpers.tui import expected_accuracy, make_db


def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the in-memory cache and fail any recomputation: only the stored cache answers."""
    metrics._CACHE.clear()

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("recomputed instead of reading the stored cache")

    monkeypatch.setattr(metrics, "compute_metrics", boom)


def test_a_writable_store_keeps_the_metrics_for_the_next_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = make_db(tmp_path / "c.duckdb", n_items=12)
    want = expected_accuracy(12)  # by hand from the generating rule
    with Store(db) as st:
        first = run_metrics(st, st.get_run("run-a"))
        assert first.get("accuracy").value == pytest.approx(want)
    with monkeypatch.context() as m:
        _fresh_process(m)
        with Store(db, read_only=True) as st:
            again = run_metrics(st, st.get_run("run-a"))
    assert again.rows() == first.rows()
    with Store(db, read_only=True) as st:
        runs = st.runs()
    assert runs["metric"].tolist() == ["accuracy"] and runs["accuracy"].tolist() == pytest.approx(
        [want]
    )


def test_a_changed_row_invalidates_the_stored_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = make_db(tmp_path / "c.duckdb", n_items=12)
    with Store(db) as st:
        before = run_metrics(st, st.get_run("run-a")).get("accuracy")
        n = int(st.execute("SELECT count(*) FROM results WHERE run_id = 'run-a'").fetchone()[0])
        k = int(st.execute("SELECT sum(correct) FROM results WHERE run_id = 'run-a'").fetchone()[0])
        item = st.execute("SELECT item_id FROM results WHERE run_id = 'run-a' LIMIT 1").fetchone()[
            0
        ]
        st.write_results(
            "run-a",
            [
                Result(
                    item_id=item,
                    variant="extra",
                    prompt="p",
                    prediction="yes",
                    gold="yes",
                    correct=1.0,
                )
            ],
            start_seq=10_000,
        )
    with Store(db, read_only=True) as st:
        runs = (
            st.runs()
        )  # the stored entry no longer matches the rows: plain accuracy, recomputed in SQL
        assert runs["accuracy"].tolist() == pytest.approx([(k + 1) / (n + 1)])
    metrics._CACHE.clear()
    with Store(db) as st:
        after = run_metrics(st, st.get_run("run-a")).get("accuracy")
    assert before is not None and after is not None
    assert before.value == pytest.approx(k / n) and after.value == pytest.approx((k + 1) / (n + 1))


def test_a_read_only_store_caches_beside_the_file_and_never_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report reads the file read-only and leaves it byte for byte as it was;
    its entries are in the sidecar, read by the next process."""
    import hashlib

    from llmscope.store.metrics_cache import sidecar_path

    db = make_db(tmp_path / "c.duckdb", n_items=12)
    before = (hashlib.sha256(db.read_bytes()).hexdigest(), db.stat().st_mtime_ns)
    metrics._CACHE.clear()
    with Store(db, read_only=True) as st:
        rm = run_metrics(st, st.get_run("run-a"))
    assert (hashlib.sha256(db.read_bytes()).hexdigest(), db.stat().st_mtime_ns) == before
    assert not Path(str(db) + ".wal").exists()
    assert sidecar_path(db).exists()
    with monkeypatch.context() as m:
        _fresh_process(m)
        with Store(db, read_only=True) as st:
            assert run_metrics(st, st.get_run("run-a")).rows() == rm.rows()


def test_a_damaged_sidecar_costs_a_recomputation_only(tmp_path: Path) -> None:
    from llmscope.store.metrics_cache import sidecar_path

    db = make_db(tmp_path / "c.duckdb", n_items=12)
    sidecar_path(db).write_bytes(b"not a database" * 100)
    metrics._CACHE.clear()
    with Store(db, read_only=True) as st:
        first = run_metrics(st, st.get_run("run-a"))
    assert first.get("accuracy").value == pytest.approx(expected_accuracy(12))
    metrics._CACHE.clear()
    calls: list[int] = []
    real = metrics.compute_metrics
    metrics.compute_metrics = lambda *a, **k: calls.append(1) or real(*a, **k)  # type: ignore[assignment]
    try:
        with Store(db, read_only=True) as st:
            again = run_metrics(st, st.get_run("run-a"))
    finally:
        metrics.compute_metrics = real  # type: ignore[assignment]
    assert again.rows() == first.rows() and calls == []  # the sidecar was rebuilt and read


def test_the_runs_list_names_the_published_metric_of_a_worldsense_run(tmp_path: Path) -> None:
    """A cached WorldSense run lists worldsense_accuracy (the authors' metric), not avg(correct)."""
    from llmscope.analysis.metric_cache import save_cached
    from llmscope.analysis.metric_values import Metric, RunMetrics
    from llmscope.analysis.metrics import BOOTSTRAP
    from llmscope.analysis.queries import rows_signature

    db = make_db(tmp_path / "c.duckdb", n_items=4)
    with Store(db) as st:
        rm = RunMetrics(
            "run-a",
            "m",
            "worldsense",
            "constrained",
            "tuple",
            BOOTSTRAP,
            [Metric("worldsense_accuracy", 0.556), Metric("item_accuracy", 0.545)],
        )
        save_cached(st.metrics_cache, rm, "cfg", str(rows_signature(st, "run-a")[0]))
        runs = st.runs()
    assert runs["metric"].tolist() == ["worldsense_accuracy"] and runs["accuracy"].tolist() == [
        0.556
    ]


def test_a_subset_of_producers_is_read_from_the_stored_full_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = make_db(tmp_path / "c.duckdb", n_items=12)
    with Store(db) as st:
        run = st.get_run("run-a")
        sub = run_metrics(st, run, producers=["accuracy"])  # not stored: computed
        full = run_metrics(st, run)  # stored
    with monkeypatch.context() as m:
        _fresh_process(m)
        with Store(db, read_only=True) as st:
            again = run_metrics(st, st.get_run("run-a"), producers=["accuracy"])
    assert {m.producer for m in again.metrics} == {"accuracy", "errors"}
    assert again.rows() == sub.rows()
    assert [
        r
        for r, m in zip(full.rows(), full.metrics, strict=True)
        if m.producer in ("accuracy", "errors")
    ] == again.rows()


def test_other_metrics_code_never_reads_a_stored_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry stored by other metrics code (a fixed producer) is recomputed, not read."""
    db = make_db(tmp_path / "c.duckdb", n_items=12)
    with Store(db) as st:
        first = run_metrics(st, st.get_run("run-a"))
    metrics._CACHE.clear()
    monkeypatch.setattr(metric_cache, "_CODE_FP", ["other code"])
    calls: list[int] = []
    real = metrics.compute_metrics
    monkeypatch.setattr(
        metrics, "compute_metrics", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    with Store(db, read_only=True) as st:
        again = run_metrics(st, st.get_run("run-a"))
    assert calls == [1] and again.rows() == first.rows()
