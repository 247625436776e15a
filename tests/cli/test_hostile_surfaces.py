"""Hostile input on the import, study and output surfaces, through the real CLI.

- imports: a model column given twice, a cell not exactly 0/1, an lm-eval target that is no
  option index, a positive log-likelihood: one line naming file, line and field, exit 2, and
  the database already there unchanged;
- studies: a grid over the cell cap is refused before it is built (`--max-cells` raises it);
- terminal output: ESC and a bidi override in a model name, an import and a study label reach
  no terminal raw (import, study run/status/dry-run, runs, report, export to stdout);
- a 5,000-character `--templates` name: one line, no traceback.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.cli import cli, cli_env

pytestmark = pytest.mark.reliability

ESC, RLO = "\x1b", "\u202e"
HOSTILE = f"m{ESC}]0;pwned\x07{RLO}gnp"  # sets a terminal's title, reverses what follows


def _one_line(p: subprocess.CompletedProcess[str], *parts: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stderr)
    err = p.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for part in parts:
        assert part in err, err
    return err


def _samples(folder: Path, lines: list[dict[str, object]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "samples_toy_2024-01-01T00-00-00.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return f


def _sample(doc_id: int, target: object, lls: tuple[float, float, float]) -> dict[str, object]:
    opts = ["red", "green", "blue"]
    return {
        "doc_id": doc_id,
        "doc": {"q": f"question {doc_id}"},
        "target": target,
        "arguments": {
            f"gen_args_{i}": {"arg_0": f"Question {doc_id}?", "arg_1": f" {o}"}
            for i, o in enumerate(opts)
        },
        "filtered_resps": [[str(v), "False"] for v in lls],
        "acc": 1.0,
    }


def _counts(db: Path) -> list[tuple[str, int]]:
    out = cli("runs", "--db", str(db), "--json")
    assert out.returncode == 0, out.stderr
    return sorted((r["run_id"], r["n_done"]) for r in json.loads(out.stdout))


def _raw_controls(text: str) -> list[str]:
    return [f"U+{ord(c):04X}" for c in text if c in (ESC, RLO, "\x07")]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database holding one good lm-eval import whose model name carries ESC and RLO."""
    tmp = tmp_path_factory.mktemp("hostile")
    good = _samples(
        tmp / "good", [_sample(i, i % 3, (-1.0 - i % 2, -2.0, -0.5 - i)) for i in range(4)]
    )
    db = tmp / "h.duckdb"
    p = cli("import", "lm-eval", str(good), "--model", HOSTILE, "--db", str(db))
    assert p.returncode == 0, p.stderr
    assert _raw_controls(p.stdout + p.stderr) == [] and "\\x1b]0;pwned\\x07<U+202E>gnp" in p.stdout
    return db


@pytest.mark.parametrize(
    ("target", "lls", "field", "says"),
    [
        ("7", (-1.0, -2.0, -3.0), "target", "target 7 is not an option index (0 to 2)"),
        ("-1", (-1.0, -2.0, -3.0), "target", "target -1 is not an option index"),
        ("1.5", (-1.0, -2.0, -3.0), "target", "neither an option index"),
        (1, (-1.0, 0.25, -3.0), "filtered_resps", "log-likelihood '0.25' is positive"),
    ],
)
def test_lm_eval_import_refuses_a_bad_gold_or_likelihood(
    imported: Path, target: object, lls: tuple[float, float, float], field: str, says: str
) -> None:
    before = _counts(imported)
    f = _samples(
        imported.parent / f"bad-{field}-{target}",
        [_sample(0, 0, (-1.0, -2.0, -3.0)), _sample(1, target, lls)],
    )
    p = cli("import", "lm-eval", str(f), "--model", "x", "--db", str(imported))
    _one_line(p, f"{f.name}, line 2, field '{field}'", says)
    assert _counts(imported) == before


@pytest.mark.parametrize(
    ("header", "row", "says"),
    [
        (
            "id,human_q1,A_q1,A_q2,A_q1,A_q2",
            "1,1,1,0,0,1",
            "line 1, field 'A_q1': column 'A_q1' appears twice",
        ),
        ("id,human_q1,A_q1,A_q2", "1,1,1.0,0", "line 2, field 'A_q1': expected 0 or 1, got '1.0'"),
        ("id,human_q1,A_q1,A_q2", "1,1,1, 1", "line 2, field 'A_q2': expected 0 or 1, got ' 1'"),
    ],
)
def test_commonsense_models_import_refuses_repeats_and_inexact_cells(
    imported: Path, header: str, row: str, says: str
) -> None:
    before = _counts(imported)
    f = imported.parent / f"cm-{abs(hash(header + row))}.csv"
    f.write_text(f"{header}\n{row}\n")
    p = cli("import", "commonsense-models", str(f), "--db", str(imported))
    _one_line(p, f.name, says)
    assert _counts(imported) == before
    # on a new path: no database is left behind
    new = imported.parent / "new.duckdb"
    _one_line(cli("import", "commonsense-models", str(f), "--db", str(new)), says)
    assert not new.exists()


@pytest.mark.slow
def test_outputs_of_a_hostile_model_name_are_escaped(imported: Path) -> None:
    for args in (
        ("runs",),
        ("report",),
        ("export", "--run", "last", "--format", "csv"),
        ("export", "--run", "last", "--format", "jsonl"),
    ):
        p = cli(*args, "--db", str(imported))
        assert p.returncode == 0, (args, p.stderr)
        assert _raw_controls(p.stdout + p.stderr) == [], args
        assert "pwned" in p.stdout, args
    rows = [
        json.loads(ln)
        for ln in cli(
            "export", "--db", str(imported), "--run", "last", "--format", "jsonl"
        ).stdout.splitlines()
    ]
    assert {r["model"] for r in rows} == {HOSTILE}  # JSON keeps the data, escaped


def _study(folder: Path, grid: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "items.jsonl").write_text('{"id": 1, "text": "c"}\n')
    (folder / "suite.yaml").write_text("name: s\ntask: yesno\nitems: items.jsonl\n")
    f = folder / "st.yaml"
    f.write_text(
        'name: hostile\nsuites: [{suite: suite.yaml, label: "s\\e[31m\\u202e"}]\n'
        'models: [{model: "openai:m", base_url: "http://127.0.0.1:9/v1", max_retries: 0, '
        'label: "lab\\e]0;pwned\\a\\u202egnp"}]\n' + grid
    )
    return f


def test_study_labels_reach_no_terminal_raw(tmp_path: Path) -> None:
    f = _study(tmp_path / "st")
    db = tmp_path / "st" / "st.duckdb"
    home = cli_env(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME="")
    outs = [
        cli("study", "run", str(f), "--db", str(db), "--dry-run"),
        # its own HOME: the endpoint it trusts is remembered there, not in the user's list
        cli("study", "run", str(f), "--db", str(db), "--trust-study", "--jobs", "1", env=home),
        cli("study", "status", str(f), "--db", str(db)),
        cli("study", "status", "hostile", "--db", str(db)),
    ]
    for p in outs:
        assert "Traceback" not in p.stderr, p.stderr
        assert _raw_controls(p.stdout + p.stderr) == [], (p.args, p.stdout, p.stderr)
    assert "lab\\x1b]0;pwned\\x07<U+202E>gnp" in outs[1].stdout + outs[1].stderr


def test_a_grid_over_the_cell_cap_is_refused_before_it_is_built(tmp_path: Path) -> None:
    levels = ", ".join(str(i) for i in range(1000))
    prompts = ", ".join(f'"p{i}"' for i in range(1000))
    f = _study(tmp_path / "big", f"grid:\n  seed: [{levels}]\n  system_prompt: [{prompts}]\n")
    for extra in ((), ("--dry-run",)):
        p = cli("study", "run", str(f), *extra)
        _one_line(
            p,
            "1 models x 1 suites x 1000 seed x 1000 system_prompt make 1,000,000 cells",
            "limit of 10,000",
            "--max-cells",
        )
    small = _study(tmp_path / "small", "grid:\n  seed: [0, 1, 2, 3]\n")
    _one_line(
        cli("study", "run", str(small), "--dry-run", "--max-cells", "3"),
        "make 4 cells, over the limit of 3",
    )
    ok = cli("study", "run", str(small), "--dry-run", "--max-cells", "4")
    assert ok.returncode == 0 and ok.stdout.count("new run") == 4, ok.stderr


def test_a_templates_name_too_long_is_one_line(tmp_path: Path) -> None:
    f = _study(tmp_path / "t")
    suite = str(f.parent / "suite.yaml")
    name = "a" * 5000
    for arg in (name, f"{name}=x.yaml", f"lvl={name}.yaml"):
        p = cli(
            "run",
            "--suite",
            suite,
            "--model",
            "openai:m",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--db",
            str(tmp_path / "t.duckdb"),
            "--templates",
            arg,
        )
        err = _one_line(p, "field '--templates'", "too long")
        assert len(err) < 300, err


def test_study_on_a_full_disk_ends_in_one_line(tmp_path: Path) -> None:
    """Five API cells on an 8 MiB tmpfs, checkpoints every 0.3 s: DuckDB's failed checkpoint
    invalidates the connection under every cell at once."""
    import os
    import random
    import shutil

    from tests.helpers.oai import start_server, stop_server

    disk = tmp_path / "disk"
    disk.mkdir()
    if (
        os.geteuid() != 0
        or shutil.which("mount") is None
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], capture_output=True
        ).returncode
    ):
        pytest.skip(
            "needs `mount -t tmpfs` (root in a container that allows mounts) for a full disk"
        )
    server = start_server()
    try:
        rng = random.Random(1)
        folder = tmp_path / "suite"
        folder.mkdir()
        with open(folder / "items.jsonl", "w") as f:  # incompressible 3 kB prompts
            for i in range(600):
                text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(3000))
                f.write(json.dumps({"id": f"q{i}", "text": text, "gold": "yes"}) + "\n")
        (folder / "suite.yaml").write_text(
            "name: big\ntask: yesno\nitems: items.jsonl\ntask_options:\n  chat: false\n"
        )
        models = "".join(
            f'  - {{model: "openai:m{k}", base_url: "{server.base_url}", label: m{k}}}\n'
            for k in range(5)
        )
        study = tmp_path / "st.yaml"
        study.write_text(
            f"name: fd\nsuites: [{{suite: {folder / 'suite.yaml'}, label: s}}]\nmodels:\n{models}"
        )
        env = cli_env(
            OPENAI_API_KEY="sk-test",
            HOME=str(tmp_path / "home"),
            XDG_CONFIG_HOME="",
            LLMSCOPE_CHECKPOINT_S="0.3",
        )
        p = cli(
            "study", "run", str(study), "--db", str(disk / "s.duckdb"), "--trust-study", env=env
        )
        err = p.stderr
        assert p.returncode == 2 and "Traceback" not in err, err[-3000:]
        assert (
            err.count("llmscope: error:") == 1
            and "study fd stopped" in err
            and "disk is full" in err
        )
    finally:
        stop_server(server)
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
