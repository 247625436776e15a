"""Published per-item results (../shared/data/...) imported by the real CLI into a DuckDB file.

- import_published: `llmscope import KIND FILES --suite-path SUITES --db DB`
- commonsense_models_db: the first N statements of the commonsense models' answers, imported
- published_models: the model columns of the commonsense answers file
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from tests.helpers.cli import cli
from tests.helpers.paths import shared_path


def import_published(
    kind: str, files: Iterable[str | Path], suite_path: Path, db: Path
) -> subprocess.CompletedProcess[str]:
    """`llmscope import KIND FILES --suite-path SUITE_PATH --db DB`, run to completion."""
    return cli("import", kind, *map(str, files), "--suite-path", str(suite_path), "--db", str(db))


def commonsense_models_db(folder: Path, n_statements: int) -> tuple[Path, Path]:
    """(the answers file cut to its first `n_statements` rows, the database it was imported
    into); skips when ../shared lacks the commonsense data."""
    full = shared_path("data", "commonsense", "all_models_binarythresh.csv")
    statements = shared_path("data", "commonsense", "statements_and_prompts.csv")
    lines = full.read_text(encoding="utf-8").splitlines(keepends=True)
    subset = folder / "models.csv"
    subset.write_text("".join(lines[: n_statements + 1]), encoding="utf-8")
    db = folder / "cs.duckdb"
    proc = import_published("commonsense-models", [subset], statements, db)
    assert proc.returncode == 0, proc.stderr
    return subset, db


def published_models(df: pd.DataFrame) -> list[str]:
    """The models of a commonsense answers frame: each has a `<model>_q1` column (humans excepted)."""
    return [c[: -len("_q1")] for c in df.columns if c.endswith("_q1") and c != "human_q1"]
