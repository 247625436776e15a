"""A run's headline alone (analysis/headline.py) against the full computation and by hand.

The study matrix shows `run_headline`; the report leads with `headline(run_metrics(...))`.
Both must be the same Metric for every kind of run, and no producer outside
HEADLINE_PRODUCERS may emit a headline metric (else the shortcut would miss it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest

import llmscope.analysis.metrics as metrics
from llmscope.analysis.headline import HEADLINE_PRODUCERS, run_headline
from llmscope.analysis.metric_values import HEADLINE, headline
from llmscope.analysis.metrics import run_metrics
from llmscope.store.db import Store
from tests.analysis.test_sqlmetrics import build as build_worldsense
from tests.helpers.mixed import write_labels_db, write_mixed_db, write_yesno_db


def _worldsense(path: Path) -> Path:
    build_worldsense(path)  # its headline is the authors' worldsense_accuracy
    return path


@pytest.mark.parametrize("write", [write_mixed_db, write_labels_db, write_yesno_db, _worldsense])
def test_headline_alone_equals_the_full_computations(
    tmp_path: Path, write: Callable[[Path], Path]
) -> None:
    db = write(tmp_path / "runs.duckdb")
    metrics._CACHE.clear()
    with Store(db, read_only=True) as st:
        runs = [
            st.get_run(str(rid))
            for (rid,) in st.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()
        ]
        assert runs and all(r is not None for r in runs)
        alone = {
            r["run_id"]: run_headline(st, r) for r in runs if r
        }  # no metrics cache beside the file
        assert not Path(str(db) + ".metrics.sqlite").exists()
        metrics._CACHE.clear()
        for run in runs:
            assert run is not None
            full = run_metrics(st, run, cache=False)
            want = headline(full)
            got = alone[run["run_id"]]
            assert want is not None and got is not None
            assert asdict(got) == asdict(want), run["run_id"]
            # every headline-named overall metric comes from a producer the shortcut runs
            for m in full.metrics:
                if m.name in HEADLINE and not m.group:
                    assert m.producer in HEADLINE_PRODUCERS, (m.name, m.producer)


def test_yes_no_headline_by_hand_and_from_the_cache(tmp_path: Path) -> None:
    db = write_yesno_db(tmp_path / "yn.duckdb")
    metrics._CACHE.clear()
    with Store(db) as st:
        run = st.get_run("yn-err")
        assert run is not None
        h = run_headline(st, run)
        # rows i0..i2 answered "yes" with gold yes, yes, no; i3 an error row, left out
        assert (
            h is not None and h.name == "accuracy" and h.value == pytest.approx(2 / 3) and h.n == 3
        )
        run_metrics(st, run)  # a full computation, as `llmscope report` stores it beside the file
    metrics._CACHE.clear()
    with Store(db, read_only=True) as st:
        run = st.get_run("yn-err")
        assert run is not None
        cached = run_headline(st, run)
    assert cached is not None and asdict(cached) == asdict(h)
