"""What the CLI prints fits the terminal it is read in: a resume hint that can be pasted (it names
llmscope as this shell can run it, llmscope/cli/common.py `invocation`, and --db only when not the
default), report lines that fit 80/100 columns or stay whole in a pipe, no hard wrapping off a terminal."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from llmscope.cli.common import DEFAULT_DB, invocation
from llmscope.cli.run import resume_hint


def _script(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "llmscope"
    p.write_text("#!/bin/sh\n")
    p.chmod(0o755)
    return p


def test_a_script_not_on_path_is_named_by_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script(tmp_path / ".venv" / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    monkeypatch.chdir(tmp_path)
    assert invocation(".venv/bin/llmscope") == ".venv/bin/llmscope"
    assert invocation(str(script)) == shlex.quote(str(script))


def test_the_llmscope_on_path_is_named_bare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert invocation(str(script)) == "llmscope"
    # another llmscope earlier on PATH: this one by its path
    _script(tmp_path / "other")
    monkeypatch.setenv("PATH", f"{tmp_path / 'other'}:{tmp_path / 'bin'}")
    assert invocation(str(script)) == shlex.quote(str(script))


def test_a_module_start_is_python_dash_m(monkeypatch: pytest.MonkeyPatch) -> None:
    assert invocation("/x/llmscope/__main__.py") == f"{shlex.quote(sys.executable)} -m llmscope"


def test_resume_hint_names_db_only_when_not_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(sys, "argv", [str(script), "run"])
    assert resume_hint("abc123", DEFAULT_DB) == "llmscope run --resume abc123"
    assert (
        resume_hint("abc123", "my runs.duckdb")
        == "llmscope run --resume abc123 --db 'my runs.duckdb'"
    )


def test_report_lines_fit_the_terminal_or_stay_whole() -> None:
    """`llmscope report` on an 80- or 100-column terminal: no line longer than the terminal (a
    group too long for the line goes on a line of its own, numbers beneath); to a pipe, one line
    a row and no group cut (once cut at 44 characters)."""
    from llmscope.report import format_rows

    long_group = {"category": "Technology and applied sciences, and a little more besides"}
    rows = [
        {
            "run": "r1",
            "suite": "s",
            "model": "m",
            "group": {},
            "metric": "accuracy",
            "value": 0.5,
            "ci95": [0.25, 0.75],
            "n": 60,
            "n_clusters": 30,
        },
        {
            "run": "r1",
            "suite": "s",
            "model": "m",
            "group": long_group,
            "metric": "human_majority_agreement",
            "value": 0.125,
            "ci95": [0.0, 0.5],
            "n": 8,
        },
    ]
    for width in (80, 100):
        text = format_rows(rows, width)
        assert all(len(ln) <= width for ln in text.splitlines()), text
        assert (
            "  category=Technology and applied sciences, and a little more besides\n"
            "      human_majority_agreement    0.125 [0.000, 0.500] n=8" in text
        )
        assert "  overall " in text and "accuracy" in text
    piped = format_rows(rows).splitlines()
    assert len(piped) == 4  # the note, the run, two rows
    assert piped[3].startswith(
        "  category=Technology and applied sciences, and a little more besides "
    )
    assert piped[3].split()[-4:] == ["0.125", "[0.000,", "0.500]", "n=8"]


def test_progress_lines_are_not_hard_wrapped_off_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Written to a file or pipe (not a terminal), a long start line stays one line (Rich once
    wrapped it at 80 columns: "on cpu/float32, 729⏎prompts")."""
    from llmscope.console import ConsoleReporter
    from llmscope.engine.progress import Progress

    model = "hf:" + "/very/long/path/to/a/local/model/folder" * 3
    rep = ConsoleReporter()
    rep.on_start(
        {"suite_name": "commonsense-sample", "model": model, "device": "cpu", "dtype": "float32"},
        Progress(run_id="abc123", total=729),
    )
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and err.endswith("on cpu/float32, 729 prompts\n") and model in err
    ), err


def test_a_plan_s_hypothesis_line_fits_the_terminal() -> None:
    """A pre-registered run's verdict line (~110 characters) once broke at the terminal's edge
    inside its interval; at 80 and 100 columns it wraps between parts, the interval whole;
    to a pipe it stays one line."""
    from llmscope.report import format_rows

    hyp = {
        "run": "r1",
        "suite": "s",
        "model": "m",
        "metric": "hypothesis",
        "group": {
            "id": "H1",
            "hypothesis": "accuracy(q1) > accuracy(q2)",
            "verdict": "not supported",
        },
        "value": -0.132,
        "ci95": [-0.213, -0.051],
        "p_value": 0.999,
        "test": "paired t over clusters",
        "n": 243,
        "preregistered": True,
    }
    for width in (80, 100):
        text = format_rows([hyp], width)
        lines = text.splitlines()
        assert all(len(ln) <= width for ln in lines), text
        assert any("[-0.213, -0.051]" in ln for ln in lines), text
        assert "  H1: accuracy(q1) > accuracy(q2)  -> not supported" in text
        joined = " ".join(" ".join(lines).split())
        assert (
            "(difference -0.132 [-0.213, -0.051], p = 0.999, paired t over clusters, n=243)"
            in joined
        )
    piped = format_rows([hyp]).splitlines()
    assert piped[-1] == (
        "  H1: accuracy(q1) > accuracy(q2)  -> not supported  (difference -0.132 [-0.213, -0.051], "
        "p = 0.999, paired t over clusters, n=243)"
    )


def test_suites_list_cuts_no_description_silently() -> None:
    """`llmscope suites` keeps a line short by cutting long descriptions; a cut one ends in
    "…" (once "... Whiting & Watts (stratif"), and --json has every description whole."""
    import json

    from tests.helpers.cli import cli

    listed = cli("suites")
    whole = cli("suites", "--json")
    assert listed.returncode == 0 and whole.returncode == 0, listed.stderr + whole.stderr
    full = {r["name"]: r["description"] for r in json.loads(whole.stdout)}
    lines = {ln.split()[0]: ln for ln in listed.stdout.splitlines() if ln.strip()}
    assert set(lines) == set(full)
    cut = 0
    for name, desc in full.items():
        shown = lines[name].split("  ")[-1].strip()
        if shown != desc:
            cut += 1
            assert shown.endswith("…") and desc.startswith(shown[:-1]), (name, shown, desc)
    assert cut  # the built-in suites have descriptions longer than a line


def test_suites_list_without_the_shared_data(tmp_path: Path) -> None:
    """Where ../shared is absent (a user's clone), `llmscope suites` still lists every suite, and
    the loaders of third-party corpora as needing --suite-path."""
    import json

    from llmscope.data.registry import SUITES, suite_names
    from tests.helpers.cli import cli, cli_env

    env = cli_env(LLMSCOPE_SHARED=str(tmp_path / "no-shared"))
    listed, whole = cli("suites", env=env), cli("suites", "--json", env=env)
    assert listed.returncode == 0 and whole.returncode == 0, listed.stderr + whole.stderr
    rows = {r["name"]: r for r in json.loads(whole.stdout)}
    assert list(rows) == suite_names()
    assert {ln.split()[0] for ln in listed.stdout.splitlines() if ln.strip()} == set(rows)
    for name, entry in SUITES.items():
        assert rows[name]["task"] == entry.task and rows[name]["items"] is None, rows[name]
        assert "--suite-path" in rows[name]["description"], rows[name]
