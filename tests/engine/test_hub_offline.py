"""A hub id when the Hugging Face hub cannot be reached: an immediate error naming the cache when
the model is not in it (not a minute of retries), the cached copy when it is, said in the run."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import duckdb
import pytest

from tests.helpers.cli import assert_clean_error, cli, cli_env
from tests.helpers.tinymodel import make_tiny_model


def _closed_endpoint() -> str:
    """A loopback URL where nothing listens: the hub is unreachable (connection refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def _env(hf_home: Path) -> dict[str, str]:
    env = cli_env(HF_HOME=str(hf_home), HF_ENDPOINT=_closed_endpoint())
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    return env


def test_an_uncached_hub_id_fails_at_once(tmp_path: Path) -> None:
    proc = cli(
        "run",
        "--suite",
        "mc-sample",
        "--model",
        "hf:nobody/not-cached",
        "--limit",
        "1",
        "--db",
        str(tmp_path / "r.duckdb"),
        env=_env(tmp_path / "hf"),
    )
    err = assert_clean_error(proc, "cannot be reached", "'nobody/not-cached' is not in its cache")
    assert "Retrying" not in err  # huggingface_hub's back-off never started


@pytest.mark.slow
def test_a_cached_hub_id_loads_from_the_cache(tmp_path: Path) -> None:
    make_tiny_model(tmp_path, save=True)
    hf_home = tmp_path / "hf"
    # the layout huggingface_hub writes: refs/main names the snapshot holding the files
    repo = hf_home / "hub" / "models--tiny--llama"
    shutil.copytree(tmp_path / "tiny-llama", repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    db = tmp_path / "r.duckdb"
    proc = cli(
        "run",
        "--suite",
        "mc-sample",
        "--model",
        "hf:tiny/llama",
        "--limit",
        "2",
        "--db",
        str(db),
        "--no-report",
        env=_env(hf_home),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Retrying" not in proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    try:
        (n,) = con.execute("SELECT count(*) FROM results WHERE error IS NULL").fetchone()
        (meta,) = con.execute("SELECT CAST(meta AS VARCHAR) FROM runs").fetchone()
    finally:
        con.close()
    assert n == 2
    assert "unreachable" in meta and "the cached copy was loaded" in meta
    assert "revision:0123abcd" in meta  # the snapshot loaded is the run's identity
