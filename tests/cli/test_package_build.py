"""The package that `pip install .` builds: every Python package of the source
tree is in pyproject's `packages` (a package left out is missing from the wheel and its imports
fail only after installation), every built-in suite file is package data, and the wheel itself
carries data/builtin and builds without setuptools warnings.
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

REPO = ROOT
CONF = tomllib.loads((REPO / "pyproject.toml").read_text())
SETUP = CONF["tool"]["setuptools"]


def _source_packages() -> set[str]:
    """Dotted names of every folder with an __init__.py under the package-dir mapping."""
    out = set()
    for name, folder in SETUP["package-dir"].items():
        root = REPO / folder
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            if any(p.startswith((".", "_")) or p == "__pycache__" for p in rel.parts):
                continue
            out.add(".".join([name, *rel.parts]))
    return out


def test_every_source_package_is_declared() -> None:
    declared = set(SETUP["packages"])
    missing = _source_packages() - declared
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    # a declared package that does not exist breaks the build
    assert declared <= _source_packages() | {"llmscope.data.builtin"}


def test_every_builtin_suite_file_is_package_data() -> None:
    patterns = CONF["tool"]["setuptools"]["package-data"]["llmscope.data.builtin"]
    root = REPO / "data" / "builtin"
    files = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    suites = {f.split("/")[0] for f in files if f.endswith("/suite.yaml")}
    assert len(suites) >= 8  # the built-in suites (`llmscope suites`)
    left_out = [
        f
        for f in files
        if f != "__init__.py" and not any(fnmatch.fnmatch(f, pat) for pat in patterns)
    ]
    assert not left_out, f"not in the wheel (package-data patterns {patterns}): {left_out}"


@pytest.mark.slow
def test_wheel_builds_without_warnings_and_carries_the_builtin_suites(tmp_path: Path) -> None:
    # build from a clean copy of the source files: setuptools builds in-tree and a stale build/
    # folder would carry modules that no longer exist into the wheel
    src = tmp_path / "src"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for rel in listed:
        f = REPO / rel
        if f.is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, src / rel)
    out = tmp_path / "wheel"
    p = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if p.returncode != 0 and "No matching distribution found for setuptools" in p.stdout + p.stderr:
        pytest.skip(
            "pip cannot fetch setuptools>=77 for the isolated build (no package index reachable)"
        )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    log = p.stdout + p.stderr
    # setuptools' own warnings (absent packages, license config); pip's byte-compiling notes are not ours
    warnings = [
        ln.strip()
        for ln in log.splitlines()
        if ("Warning" in ln or "warning:" in ln) and "byte-compiling is disabled" not in ln
    ]
    assert not warnings, warnings
    (whl,) = out.glob("llmscope-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    root = REPO / "data" / "builtin"
    for suite in root.glob("*/suite.yaml"):
        for f in suite.parent.iterdir():
            assert f"llmscope/data/builtin/{suite.parent.name}/{f.name}" in names
    assert "llmscope/tui/app.tcss" in names
    assert any(n.endswith("entry_points.txt") for n in names)
