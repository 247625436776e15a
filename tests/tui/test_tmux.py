"""Terminal smoke test: `llmscope` in a real terminal (tmux), open a run, open an item."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.tui import make_db

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(
    TMUX is None, reason="tmux is not installed (apt-get install -y tmux)"
)


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(
        [TMUX, "-L", sock, "-f", "/dev/null", *args], capture_output=True, text=True, timeout=20
    ).stdout


def _wait_for(sock: str, text: str, timeout: float = 30.0) -> str:
    end = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < end:
        screen = _tmux(sock, "capture-pane", "-p", "-t", "smoke")
        if text in screen:
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not on screen after {timeout}s:\n{screen}")


def test_llmscope_in_tmux(tmp_path: Path) -> None:
    make_db(tmp_path / "t.duckdb")
    exe = Path(sys.executable).with_name("llmscope")
    assert exe.exists()
    sock = f"llmscope-test-{os.getpid()}"
    cmd = f"cd {tmp_path} && TERM=xterm-256color {exe} --db t.duckdb; echo EXITED-$?; sleep 30"
    subprocess.run(
        [
            TMUX,
            "-L",
            sock,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "smoke",
            "-x",
            "120",
            "-y",
            "40",
            cmd,
        ],
        check=True,
        timeout=20,
    )
    try:
        screen = _wait_for(sock, "run-a")
        assert "completed" in screen and "24/24" in screen
        _tmux(sock, "send-keys", "-t", "smoke", "Enter")
        screen = _wait_for(sock, "Failing items")  # the first frame (counts) comes before the panels
        assert "model-A" in screen and "Failing items" in screen
        _tmux(sock, "send-keys", "-t", "smoke", "Enter")
        screen = _wait_for(sock, "prompt (exactly as rendered for the model)")
        assert "variant q1" in screen
        _tmux(sock, "send-keys", "-t", "smoke", "C-q")
        _wait_for(sock, "EXITED-0")
    finally:
        _tmux(sock, "kill-server")
