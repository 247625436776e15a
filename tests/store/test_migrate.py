"""A file of an older schema: read-only commands leave it alone and name the command that
upgrades it; `llmscope migrate` upgrades it, and the old rows read back."""

from __future__ import annotations

import hashlib
from pathlib import Path

from llmscope.store.db import Store
from llmscope.store.schema import SCHEMA_VERSION, file_schema_version
from tests.helpers.cli import assert_clean_error, cli
from tests.store.test_top_tokens_blob import _downgrade_to_schema_4


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_read_only_command_names_migrate_then_migrate_upgrades(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    _downgrade_to_schema_4(db)
    before = _sha(db)
    assert file_schema_version(db) == 4
    # the way an upgraded user arrives: last version's file and a read-only command
    assert_clean_error(cli("runs", "--db", str(db)), "older", f"llmscope migrate --db {db}")
    assert _sha(db) == before and file_schema_version(db) == 4

    res = cli("migrate", "--db", str(db))
    assert res.returncode == 0, res.stderr
    assert f"schema 4 -> {SCHEMA_VERSION}" in res.stdout
    assert file_schema_version(db) == SCHEMA_VERSION
    again = cli("migrate", "--db", str(db))
    assert again.returncode == 0 and "already at schema" in again.stdout

    listed = cli("runs", "--db", str(db))  # the run row has no suite or model: shown as "-"
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:2] == ["r", "-"] for line in listed.stdout.splitlines()), listed.stdout
    with Store(db, read_only=True) as st:
        rows = {r.item_id: r.top_tokens for r in st.results("r")}
    assert rows == {"old": [{"token": " yes", "id": 5, "prob": 0.75}], "none": None}


def test_migrate_refuses_a_missing_file(tmp_path: Path) -> None:
    assert_clean_error(cli("migrate", "--db", str(tmp_path / "nope.duckdb")), "no database at")
    assert not (tmp_path / "nope.duckdb").exists()
