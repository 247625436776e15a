"""The command line as a package user meets it: --version, help for every option, config files,
and `compare` across databases."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
from pathlib import Path

import pytest

from llmscope.cli import build_parser
from llmscope.cli.common import config_from_args
from llmscope.engine.types import Item, Result
from llmscope.runs.settings import SettingsError, load_settings
from llmscope.store.db import Store
from tests.helpers.cli import cli
from tests.helpers.paths import ROOT

REPO = ROOT


def _cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, **(env or {})}
    for k in ("LLMSCOPE_DB", "LLMSCOPE_CONFIG", "OPENAI_BASE_URL"):
        if not env or k not in env:
            e.pop(k, None)
    e["XDG_CONFIG_HOME"] = str(cwd or REPO) + "/.no-user-config"
    return cli(*args, env=e, timeout=120, cwd=cwd)


def test_version_matches_installed_metadata():
    proc = _cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"llmscope {importlib.metadata.version('llmscope')}"


def _actions(p: argparse.ArgumentParser, path: str = "llmscope"):
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                yield from _actions(sp, f"{path} {name}")
        else:
            yield path, a


def test_every_option_of_every_command_has_help():
    missing = [
        f"{path}: {'/'.join(a.option_strings) or a.dest}"
        for path, a in _actions(build_parser())
        if not (a.help and a.help.strip())
    ]
    assert missing == []
    # and the walk really reached the subcommands' options
    seen = {f"{p} {'/'.join(a.option_strings)}" for p, a in _actions(build_parser())}
    assert "llmscope run --batch-size" in seen and "llmscope compare --db" in seen


def test_config_file_supplies_defaults_beneath_flags_and_env(tmp_path: Path):
    (tmp_path / "llmscope.toml").write_text(
        'db = "from-file.duckdb"\nconcurrency = 3\nmodel = "openai:m"\n'
    )
    proc = _cli("runs", cwd=tmp_path)
    assert proc.returncode == 2 and "from-file.duckdb" in proc.stderr
    proc = _cli("runs", "--db", "from-flag.duckdb", cwd=tmp_path)
    assert (
        proc.returncode == 2
        and "from-flag.duckdb" in proc.stderr
        and "from-file" not in proc.stderr
    )
    proc = _cli("runs", cwd=tmp_path, env={"LLMSCOPE_DB": "from-env.duckdb"})
    assert proc.returncode == 2 and "from-env.duckdb" in proc.stderr
    env = {"HOME": str(tmp_path / "home")}
    s = load_settings(cwd=tmp_path, env=env)
    args = build_parser(s).parse_args(["run", "--suite", "x"])
    cfg = config_from_args(args)  # a new run: the file's values beneath the flags
    assert (cfg.concurrency, cfg.model, args.db) == (3, "openai:m", "from-file.duckdb")
    cfg = config_from_args(
        build_parser(s).parse_args(["run", "--suite", "x", "--concurrency", "5"])
    )
    assert cfg.concurrency == 5 and cfg.model == "openai:m"
    # a resume takes the run's stored config, not the file's
    from llmscope.engine.config import BackendConfig

    stored = BackendConfig(model="openai:stored", concurrency=2)
    cfg = config_from_args(build_parser(s).parse_args(["run", "--resume", "r"]), stored)
    assert (cfg.model, cfg.concurrency) == ("openai:stored", 2)


def test_project_file_overrides_user_file_and_env_base_url_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    user = tmp_path / "xdg" / "llmscope"
    user.mkdir(parents=True)
    (user / "llmscope.toml").write_text('base_url = "http://user/v1"\ntimeout = 7\n')
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "llmscope.toml").write_text('base_url = "http://project/v1"\n')
    s = load_settings(cwd=proj, env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    # a project file never chooses where the key goes (tests/cli/test_endpoint_trust.py): the
    # user's base_url stays, the project's is kept aside so the CLI can say it was ignored
    assert s.values == {"base_url": "http://user/v1", "timeout": 7.0}
    assert s.untrusted == {"base_url": ("http://project/v1", proj / "llmscope.toml")}
    assert s.sources["timeout"] == user / "llmscope.toml"
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert config_from_args(build_parser(s).parse_args(["run"])).base_url == ["http://user/v1"]
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env/v1")
    # the environment wins over files: the base URL stays unset and the backend reads the variable
    assert config_from_args(build_parser(s).parse_args(["run"])).base_url is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("concurency = 4\n", "unknown key 'concurency'"),
        ('concurrency = "4"\n', "concurrency must be int"),
        ("concurrency = 0\n", "concurrency must be >= 1"),
        ('api_key = "sk-123"\n', "never read from files"),
        ("db = \n", "not valid TOML"),
    ],
)
def test_bad_config_file_is_one_clear_line(tmp_path: Path, text: str, needle: str):
    (tmp_path / "llmscope.toml").write_text(text)
    with pytest.raises(SettingsError, match=needle):
        load_settings(cwd=tmp_path, env={"HOME": str(tmp_path)})
    proc = _cli("runs", cwd=tmp_path)
    assert proc.returncode == 2
    assert needle in proc.stderr and str(tmp_path / "llmscope.toml") in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def _one_run(path: Path, run_id: str, correct: list[int]) -> None:
    with Store(path) as st:
        items = [Item(item_id=str(i), fields={"id": i}, gold="yes") for i in range(len(correct))]
        st.add_suite("hand@x", "hand", "yesno", {}, "", items)
        st.create_run(
            {
                "run_id": run_id,
                "suite_id": "hand@x",
                "suite_name": "hand",
                "task": "yesno",
                "model": f"model-{run_id}",
                "n_total": len(correct),
            }
        )
        st.write_results(
            run_id,
            [
                Result(
                    item_id=str(i),
                    variant="q",
                    prediction="yes" if c else "no",
                    gold="yes",
                    correct=float(c),
                )
                for i, c in enumerate(correct)
            ],
        )


@pytest.mark.slow
def test_compare_runs_from_two_databases(tmp_path: Path):
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    _one_run(a, "runa", [1, 1, 0, 0, 1, 0])
    _one_run(b, "runb", [1, 0, 1, 1, 1, 1])
    proc = _cli("compare", "--db", str(a), "--db", str(b), "runa", "runb", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    c = out["comparisons"][0]
    assert out["base"]["db"] == str(a) and c["run"]["db"] == str(b)
    assert c["mcnemar"]["b_base_only"] == 1 and c["mcnemar"]["c_run_only"] == 3
    assert c["acc_base"] == pytest.approx(3 / 6) and c["acc_run"] == pytest.approx(5 / 6)
    # the same run id in both files is ambiguous unless FILE:RUN picks one
    _one_run(b, "runa", [0, 0, 0, 0, 0, 0])
    proc = _cli("compare", "--db", str(a), "--db", str(b), "runa", "runb")
    assert proc.returncode == 2 and "several databases" in proc.stderr
    proc = _cli("compare", "--db", str(a), "--db", str(b), f"{b}:runa", "runb", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["comparisons"][0]["acc_base"] == 0.0
    proc = _cli("compare", "--db", str(a), "--db", str(b), "nosuch", "runb")
    assert proc.returncode == 2 and "no run 'nosuch'" in proc.stderr
