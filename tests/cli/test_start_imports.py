"""What each command imports before it answers: the first things a user types start fast.

`--help`, `suites`, `runs`, `view`'s first screen and every mistake that needs no model are
answered without torch, transformers, scipy or pandas (seconds of start-up on a small
machine); the heavy libraries load when a feature uses them. Each case runs in a fresh
interpreter and reads `sys.modules` once the command has answered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "transformers", "scipy", "pandas", "openai", "matplotlib")

# Runs `llmscope ARGV...` in this interpreter, then prints its exit status and the heavy
# modules it loaded (last line, JSON).
_CLI = (
    "import contextlib, io, json, sys\n"
    "from llmscope.cli import main\n"
    "buf = io.StringIO()\n"
    "try:\n"
    "    with contextlib.redirect_stdout(buf):\n"
    "        rc = main(sys.argv[1:])\n"
    "except SystemExit as e:\n"
    "    rc = e.code\n"
    f"print(json.dumps([rc, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
)


def _cli(args: list[str], tmp_path: Path, **env: str) -> tuple[int, list[str], str]:
    full_env = {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
        **env,
    }
    res = subprocess.run(
        [sys.executable, "-c", _CLI, *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=tmp_path,
        timeout=600,
    )
    rc, heavy = json.loads(res.stdout.strip().splitlines()[-1])
    return int(rc), heavy, res.stderr


@pytest.fixture(scope="module")
def db_with_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file with one stored run, written through the store (no model)."""
    from llmscope.engine.types import Item, Result
    from llmscope.store.db import Store

    path = tmp_path_factory.mktemp("db") / "runs.duckdb"
    with Store(path) as st:
        items = [Item(item_id=i, fields={}, gold="yes") for i in ("a", "b")]
        st.add_suite("toy@1", "toy", "yesno", {}, "", items)
        st.create_run(
            {
                "run_id": "r1",
                "suite_id": "toy@1",
                "suite_name": "toy",
                "task": "yesno",
                "model": "m",
                "n_total": 2,
                "status": "completed",
            }
        )
        st.write_results(
            "r1",
            [
                Result(item_id="a", variant="q", prediction="yes", gold="yes", correct=1.0),
                Result(item_id="b", variant="q", prediction="no", gold="yes", correct=0.0),
            ],
        )
    return path


@pytest.mark.parametrize("args", [["--help"], ["suites"], ["suites", "--json"]], ids=" ".join)
def test_listing_commands_import_no_heavy_library(args: list[str], tmp_path: Path) -> None:
    rc, heavy, err = _cli(args, tmp_path)
    assert rc == 0, err
    assert heavy == [], f"`llmscope {' '.join(args)}` imported {heavy}"


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_runs_imports_no_heavy_library(
    json_flag: list[str], db_with_run: Path, tmp_path: Path
) -> None:
    rc, heavy, err = _cli(["--db", str(db_with_run), "runs", *json_flag], tmp_path)
    assert rc == 0, err
    assert heavy == [], f"`llmscope runs` imported {heavy}"


def test_runs_json_lists_the_stored_run(db_with_run: Path, tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "llmscope", "--db", str(db_with_run), "runs", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        check=True,
    )
    (row,) = json.loads(res.stdout)
    # two rows stored, one correct: avg(correct) by hand
    assert (row["run_id"], row["n_done"], row["n_total"], row["accuracy"], row["metric"]) == (
        "r1",
        2,
        2,
        0.5,
        "accuracy",
    )
    assert row["status"] == "completed"
    assert isinstance(row["started_at"], str) and row["started_at"][10] == "T"


def _errors(tmp_path: Path) -> list[tuple[list[str], str]]:
    db = str(tmp_path / "none.duckdb")
    return [
        (["--db", db, "run", "--suite", "no-such-suite"], "no-such-suite"),
        (["--db", db, "run", "--suite", "mc-sample", "--bogus-flag"], "--bogus-flag"),
        (
            [
                "--db",
                db,
                "run",
                "--suite",
                "mc-sample",
                "--model",
                str(tmp_path / "missing-folder"),
            ],
            "missing-folder",
        ),
        (
            ["--db", db, "run", "--suite", "mc-sample", "--model", "hf:nobody-xyz/not-cached"],
            "not-cached",
        ),
        (["--db", db, "run", "--suite", str(tmp_path / "missing.yaml")], "missing.yaml"),
        (["--db", db, "runs"], "none.duckdb"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_user_errors_are_reported_before_torch(case: int, tmp_path: Path) -> None:
    """A typo, a bad flag, a missing file or an uncached hub id with the hub off: one line,
    exit 2, and torch never imported (it would cost seconds before the answer)."""
    args, named = _errors(tmp_path)[case]
    hub = tmp_path / "hf-home"
    hub.mkdir()
    rc, heavy, err = _cli(args, tmp_path, HF_HUB_OFFLINE="1", HF_HOME=str(hub))
    assert rc == 2, err
    assert named in err and "Traceback" not in err, err
    assert not {"torch", "transformers"} & set(heavy), (
        f"`{' '.join(args)}` imported {heavy} before failing"
    )


_TUI = (
    "import asyncio, json, sys\n"
    "from llmscope.tui.app import LlmscopeApp\n"
    "from llmscope.tui.screens import HomeScreen\n"
    "async def main():\n"
    "    app = LlmscopeApp(sys.argv[1], watch=sys.argv[2] == 'watch')\n"
    "    async with app.run_test(size=(120, 40)) as pilot:\n"
    "        for _ in range(600):\n"
    "            if isinstance(app.screen, HomeScreen) and app.screen.rows:\n"
    "                break\n"
    "            await pilot.pause(0.1)\n"
    "        await pilot.pause()\n"
    "        rows = len(app.screen.rows)\n"
    f"    print(json.dumps([rows, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    "asyncio.run(main())\n"
)


@pytest.mark.parametrize("mode", ["tui", "watch"])
def test_first_screen_imports_no_model_or_scipy(
    mode: str, db_with_run: Path, tmp_path: Path
) -> None:
    """The TUI's (and `llmscope view`'s) first screen lists the runs without torch,
    transformers, scipy or the openai package."""
    res = subprocess.run(
        [sys.executable, "-c", _TUI, str(db_with_run), mode],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    rows, heavy = json.loads(res.stdout.strip().splitlines()[-1])
    assert rows == 1
    assert not {"torch", "transformers", "scipy", "openai"} & set(heavy), (
        f"the first screen imported {heavy}"
    )
