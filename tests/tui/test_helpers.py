"""The TUI test helpers (tests/helpers/tui.py) write what the other TUI tests assume."""

from pathlib import Path

from llmscope.store.db import Store
from tests.helpers.tui import expected_accuracy, make_db


def test_make_db(tmp_path: Path) -> None:
    db = make_db(tmp_path / "t.duckdb")
    with Store(db, read_only=True) as s:
        df = s.runs()
        assert list(df.run_id) == ["run-a"]
        assert int(df.n_done.iloc[0]) == 24
        assert abs(float(df.accuracy.iloc[0]) - expected_accuracy(12)) < 1e-12
