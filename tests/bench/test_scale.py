"""bench.scale runs "before" steps on real old code extracted from git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import scale  # noqa: E402
from tests.helpers.paths import ROOT


def _git_ok() -> bool:
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD~1"], capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(not _git_ok(), reason="needs a git checkout with history")
def test_old_code_is_extracted_and_imported_instead_of_the_working_tree(tmp_path: Path) -> None:
    ref = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD~1"], capture_output=True, text=True, check=True
    ).stdout.strip()
    tree = scale.extract_tree(ref, tmp_path / "old")
    # The package-dir layout: engine/ becomes llmscope/engine and so on.
    assert (tree / "llmscope" / "engine" / "backend.py").is_file()
    assert (tree / "llmscope" / "store" / "db.py").is_file()
    old_src = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:engine/backend.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (tree / "llmscope" / "engine" / "backend.py").read_text() == old_src
    out = scale._child(
        "import llmscope.engine.backend as h, llmscope.store.db as d\n_done(h=h.__file__, d=d.__file__)\n",
        tree,
    )
    assert out["h"].startswith(str(tree)) and out["d"].startswith(str(tree))
    assert out["wall"] >= 0 and out["peak_mb"] > 0


def test_a_bad_ref_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert scale.main(["--n", "3", "--before", "no-such-ref-xyz", "--keep", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("--before no-such-ref-xyz: cannot read that commit from git")
        and err.count("\n") == 1
    )
