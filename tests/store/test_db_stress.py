"""The database under stress: locked, read-only, full, too old, too new, not a database.

Every case goes through the CLI and must end with one `llmscope: error: ...` line, exit
status 2, no traceback, and no half-written state (the file unchanged, or every write
either complete or absent). The model is the local OpenAI-wire test server, so no
weights are loaded. Read-only folders and full disks need real mounts (root); elsewhere
those tests skip with the reason (see RELIABILITY.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from llmscope.store.db import Store
from llmscope.store.schema import SCHEMA_VERSION
from tests.helpers.cli import (
    api_run,
    assert_clean_error,
    cli,
    hold_db,
    module_figures,
    snapshot,
    write_yesno_suite,
)
from tests.helpers.oai import OAIServer, oai_server  # noqa: F401

pytestmark = pytest.mark.reliability

FIGURES, _figures = module_figures(
    "database", summary=lambda f: {"cases": len(f), "outcomes": dict(sorted(f.items()))}
)


def _run(spec: Path, db: Path, server: OAIServer, *extra: str) -> subprocess.CompletedProcess[str]:
    return api_run(spec, db, server.base_url, "--no-report", "--quiet", *extra)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _mount(*args: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _make_db(path: Path, spec: Path, server: OAIServer) -> None:
    proc = _run(spec, path, server)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_locked_by_another_process(tmp_path: Path, oai_server: OAIServer) -> None:
    spec = write_yesno_suite(tmp_path / "s", 5)
    db = tmp_path / "locked.duckdb"
    holder = hold_db(db, "CREATE TABLE mine (x INT)")
    try:
        assert_clean_error(_run(spec, db, oai_server), "in use by another process", str(db))
        assert_clean_error(cli("runs", "--db", str(db)), "in use by another process")
        assert_clean_error(cli("report", "--db", str(db)), "in use by another process")
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    con = duckdb.connect(str(db), read_only=True)
    tables = {
        r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    }
    con.close()
    assert tables == {"mine"}, "the refused run must not have written anything"
    FIGURES["locked"] = "refused, exit 2, file untouched"


@pytest.fixture
def ro_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder that is really read-only, even for root: a read-only bind mount."""
    d = tmp_path / "ro"
    d.mkdir()
    yield d
    _umount(d)


def test_read_only_folder(tmp_path: Path, ro_dir: Path, oai_server: OAIServer) -> None:
    spec = write_yesno_suite(tmp_path / "s", 5)
    existing = ro_dir / "existing.duckdb"
    _make_db(existing, spec, oai_server)
    before = _sha(existing)
    if not (
        _mount("--bind", str(ro_dir), str(ro_dir)) and _mount("-o", "remount,ro,bind", str(ro_dir))
    ):
        if os.geteuid() != 0:
            os.chmod(ro_dir, 0o555)
            os.chmod(existing, 0o444)
        else:
            pytest.skip("needs `mount -o remount,ro,bind` (root in a container that allows mounts)")
    assert_clean_error(_run(spec, existing, oai_server), "read-only", str(existing))
    assert_clean_error(_run(spec, ro_dir / "new.duckdb", oai_server), "read-only")
    assert not (ro_dir / "new.duckdb").exists()
    # Reading still works from a read-only folder.
    ok = cli("runs", "--db", str(existing))
    assert ok.returncode == 0 and "rel-yesno" in ok.stdout, ok.stderr
    assert _sha(existing) == before
    FIGURES["read_only"] = "refused, exit 2, file unchanged; reads still work"


def test_missing_folder(tmp_path: Path, oai_server: OAIServer) -> None:
    spec = write_yesno_suite(tmp_path / "s", 5)
    db = tmp_path / "nowhere" / "x.duckdb"
    assert_clean_error(_run(spec, db, oai_server), "does not exist")
    assert not db.parent.exists()
    assert_clean_error(cli("runs", "--db", str(db)), "no database")
    FIGURES["missing_folder"] = "refused, exit 2, nothing created"


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "tmpfs"
    d.mkdir()
    # 4 MiB: a new file of the current schema is 0.8 MiB (its tables are checkpointed when it
    # is created), the big suite below 1.2 MiB, its results 2.4 MiB
    if not _mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)):
        pytest.skip(
            "needs `mount -t tmpfs` (root in a container that allows mounts) for a full disk"
        )
    yield d
    _umount(d)


def _fill(folder: Path) -> None:
    with open(folder / "ballast", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def test_full_disk_when_creating(tmp_path: Path, tiny_fs: Path, oai_server: OAIServer) -> None:
    spec = write_yesno_suite(tmp_path / "s", 5)
    _fill(tiny_fs)
    db = tiny_fs / "new.duckdb"
    assert_clean_error(_run(spec, db, oai_server), "disk is full")
    assert not db.exists() and not [p for p in tiny_fs.iterdir() if p.name != "ballast"]
    (tiny_fs / "ballast").unlink()
    # Room for the run and its final checkpoint (which exits 2 on a disk too small for it).
    assert _mount("-o", "remount,size=40m", str(tiny_fs))
    proc = _run(spec, db, oai_server)
    assert proc.returncode == 0, proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute(
        "SELECT count(*), count(DISTINCT (item_id, variant)) FROM results"
    ).fetchone() == (10, 10)
    con.close()
    FIGURES["full_disk_create"] = "refused, exit 2; later run completes"


@pytest.mark.slow
def test_full_disk_during_a_run_then_resume(
    tmp_path: Path, tiny_fs: Path, oai_server: OAIServer
) -> None:
    # Incompressible 3 kB texts: the suite fits, the results (which store prompts) do not.
    rng = random.Random(1)
    d = tmp_path / "big"
    d.mkdir()
    n = 400
    with open(d / "items.jsonl", "w") as f:
        for i in range(n):
            text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(3000))
            f.write(json.dumps({"id": f"i{i}", "text": text, "gold": "yes"}) + "\n")
    (d / "suite.yaml").write_text("name: big\ntask: yesno\nitems: items.jsonl\n")
    db = tiny_fs / "run.duckdb"
    assert_clean_error(_run(d / "suite.yaml", db, oai_server), "disk is full")
    rows = _rows(snapshot(db, tmp_path / "snap"))
    assert rows["suites"] == 1 and rows["items"] == n, "the suite is stored whole"
    assert 0 <= rows["results"] == rows["distinct"] < n
    assert _mount("-o", "remount,size=40m", str(tiny_fs))
    proc = _run(d / "suite.yaml", db, oai_server)
    assert proc.returncode == 0, proc.stderr
    after = _rows(db)
    assert after["results"] == after["distinct"] == n
    FIGURES["full_disk_mid_run"] = (
        f"stopped at {rows['results']}/{n}, exit 2; resume stored {n}/{n}, 0 lost"
    )


def _rows(db: Path) -> dict[str, int]:
    con = duckdb.connect(str(db))
    try:
        out = {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("suites", "items", "results")
        }
        out["distinct"] = con.execute(
            "SELECT count(DISTINCT (run_id, item_id, variant)) FROM results"
        ).fetchone()[0]
        return out
    finally:
        con.close()


def _legacy_db(path: Path) -> None:
    """A version-0 file: llmscope's tables with fewer columns, no keys, no schema_version."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE suites (suite_id VARCHAR, name VARCHAR, task VARCHAR, spec VARCHAR)")
    con.execute(
        "CREATE TABLE items (suite_id VARCHAR, item_id VARCHAR, idx INTEGER, text VARCHAR, gold VARCHAR)"
    )
    con.execute(
        "CREATE TABLE runs (run_id VARCHAR, suite_id VARCHAR, model VARCHAR, status VARCHAR)"
    )
    con.execute(
        "CREATE TABLE results (run_id VARCHAR, item_id VARCHAR, variant VARCHAR, "
        "p_yes DOUBLE, p_no DOUBLE, prediction VARCHAR)"
    )
    con.execute("INSERT INTO suites VALUES ('old@1', 'old', 'yesno', '{}')")
    con.execute("INSERT INTO items VALUES ('old@1', 'a', 0, 'Is ice cold?', 'yes')")
    con.execute("INSERT INTO runs VALUES ('r0', 'old@1', 'some-model', 'completed')")
    con.execute(
        "INSERT INTO results VALUES ('r0', 'a', 'default', 0.75, 0.125, 'yes'), "
        "('r0', 'a', 'default', 0.75, 0.125, 'yes')"
    )
    con.close()


@pytest.mark.slow
def test_older_schema_is_migrated(tmp_path: Path, oai_server: OAIServer) -> None:
    db = tmp_path / "old.duckdb"
    _legacy_db(db)
    before = _sha(db)
    # A read-only command cannot migrate: it says so and leaves the file alone.
    assert_clean_error(cli("runs", "--db", str(db)), "older", "open it once for writing")
    assert _sha(db) == before
    spec = write_yesno_suite(tmp_path / "s", 5)
    proc = _run(spec, db, oai_server)
    assert proc.returncode == 0, proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    old = con.execute(
        "SELECT item_id, variant, p_yes, p_no, prediction, probs FROM results WHERE run_id = 'r0'"
    ).fetchall()
    assert old == [("a", "default", 0.75, 0.125, "yes", None)]  # kept once, new columns empty
    assert con.execute("SELECT text, gold FROM items WHERE suite_id = 'old@1'").fetchall() == [
        ("Is ice cold?", "yes")
    ]
    assert con.execute("SELECT count(*) FROM results WHERE run_id <> 'r0'").fetchone()[0] == 10
    tables = {
        r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    }
    con.close()
    assert not any(t.startswith("_llmscope_v0_") for t in tables)
    listed = cli("runs", "--db", str(db), "--json")
    assert listed.returncode == 0 and "r0" in listed.stdout
    FIGURES["older_schema"] = "version 0 migrated to 1, old rows kept (duplicates folded)"


def test_failed_migration_leaves_the_file_unchanged(tmp_path: Path, oai_server: OAIServer) -> None:
    db = tmp_path / "odd.duckdb"
    con = duckdb.connect(str(db))
    # A `results` table llmscope cannot adopt (NULL where the key needs a value).
    con.execute("CREATE TABLE results (run_id VARCHAR, item_id VARCHAR, variant VARCHAR)")
    con.execute("INSERT INTO results VALUES (NULL, 'a', 'default')")
    con.close()
    before = _sha(db)
    spec = write_yesno_suite(tmp_path / "s", 5)
    assert_clean_error(_run(spec, db, oai_server), "migrating")
    assert _sha(db) == before
    con = duckdb.connect(str(db), read_only=True)
    tables = {
        r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    }
    con.close()
    assert tables == {"results"}
    FIGURES["failed_migration"] = "refused, exit 2, file byte-identical"


def test_newer_schema_is_refused(tmp_path: Path, oai_server: OAIServer) -> None:
    db = tmp_path / "new.duckdb"
    with Store(db) as s:
        s.execute("INSERT INTO schema_version VALUES (999, now())")
    before = _sha(db)
    spec = write_yesno_suite(tmp_path / "s", 5)
    assert_clean_error(_run(spec, db, oai_server), "newer llmscope", "schema 999", "not changed")
    assert_clean_error(cli("runs", "--db", str(db)), "newer llmscope")
    assert_clean_error(cli("report", "--db", str(db)), "newer llmscope")
    assert _sha(db) == before
    assert not Path(str(db) + ".wal").exists()
    FIGURES["newer_schema"] = "refused, exit 2, file byte-identical"


def test_not_a_database(tmp_path: Path, oai_server: OAIServer) -> None:
    db = tmp_path / "notes.duckdb"
    db.write_bytes(b"my notes, not a database\n" * 100)
    before = _sha(db)
    spec = write_yesno_suite(tmp_path / "s", 5)
    assert_clean_error(_run(spec, db, oai_server), "not a DuckDB database")
    assert_clean_error(cli("runs", "--db", str(db)), "not a DuckDB database")
    assert _sha(db) == before
    FIGURES["not_a_database"] = "refused, exit 2, file byte-identical"
