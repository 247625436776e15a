"""Prompt templates as a study factor (derived suites `<suite>~<level>`, data/derived.py),
`llmscope run --templates` making the same run as a study cell, and study names held by
another study file.

Real parts: the CLI in a subprocess, a real DuckDB file, the scripted OpenAI-wire server
(tests/helpers/oai_server.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from llmscope.data.derived import Derivation
from llmscope.store.db import Store
from llmscope.studies.spec import StudyError, load_study
from llmscope.studies.store import study_cells, study_conflict
from tests.helpers.cli import (
    assert_clean_error,
    cli,
    cli_env,
    write_choice_suite,
    write_file,
    write_yesno_suite,
)
from tests.helpers.oai import OAIServer, start_server, stop_server

ENV = {"OPENAI_API_KEY": "sk-test"}
TERSE_YN = {"a": "Yes or no: {text}", "b": "True? {text}"}
TERSE_CH = "Q: {text}\nA:"


@pytest.fixture(scope="module")
def suites(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("suites")
    return write_yesno_suite(base / "yn", 6), write_choice_suite(base / "ch", 4)


@pytest.fixture(scope="module")
def server() -> OAIServer:
    srv = start_server()
    yield srv
    stop_server(srv)


def _study(tmp_path: Path, yn: Path, ch: Path, base_url: str, name: str = "tpl") -> Path:
    return write_file(
        tmp_path / f"{name}.yaml",
        f"""name: {name}
suites: [{{suite: {yn}, label: yn}}, {{suite: {ch}, label: ch}}]
models:
  - {{model: "openai:test-model", base_url: "{base_url}", label: api}}
options: {{limit: 3}}
grid:
  template:
    own: {{}}
    terse:
      templates:
        yn: {json.dumps(TERSE_YN)}
        ch: {json.dumps(TERSE_CH)}
""",
    )


# -- the file ------------------------------------------------------------------------------------
def test_cells_carry_each_suites_templates(tmp_path, suites):
    yn, ch = suites
    study = load_study(_study(tmp_path, yn, ch, "http://127.0.0.1:9/v1"))
    got = {c.key: c.templates for c in study.cells}
    assert got == {
        "yn | api | template=own": None,
        "yn | api | template=terse": Derivation("terse", TERSE_YN),
        "ch | api | template=own": None,
        "ch | api | template=terse": Derivation("terse", TERSE_CH),
    }
    assert all("templates" not in c.options for c in study.cells)
    # one set for every suite (the fields must suit each), and a suite entry's own set
    one = load_study(
        write_file(
            tmp_path / "one.yaml",
            f"""name: one
suites:
  - {{suite: {yn}, label: yn-plain, templates: {{a: "{{text}}"}}}}
  - {{suite: {ch}, label: ch}}
grid:
  template:
    bare: {{templates: {{a: "{{text}}"}}}}
    partial: {{templates: {{ch: "{{text}}?"}}}}
""",
        )
    )
    by = {c.key: c.templates for c in one.cells}
    assert by["yn-plain | default | template=partial"] == Derivation("yn-plain", {"a": "{text}"})
    assert by["ch | default | template=bare"] == Derivation("bare", {"a": "{text}"})
    assert by["ch | default | template=partial"] == Derivation("partial", "{text}?")


def test_docs_templates_example_is_a_valid_study(tmp_path):
    """The templates example in docs/studies.md reads (built-in suites), 3 suites x 2 levels."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "studies.md").read_text("utf-8")
    blocks = [b.split("```")[0] for b in text.split("```yaml\n")[1:]]
    block = next(b for b in blocks if "templates:" in b)
    study = load_study(write_file(tmp_path / "ex.yaml", "name: ex\n" + block))
    got = {c.key: c.templates.level if c.templates else None for c in study.cells}
    assert len(got) == 6 and sorted(v for v in got.values() if v) == ["terse"] * 3


@pytest.mark.parametrize(
    ("body", "line", "field", "needles"),
    [
        (
            "grid:\n  template:\n    own: {}\n    terse:\n      templates:\n"
            "        yn: {a: '{nosuch}'}\n        ch: '{text}'\n",
            10,
            "grid.template.terse.templates.yn",
            ["cell [yn | default | template=terse]", "names field 'nosuch'"],
        ),
        (
            "grid:\n  template:\n    terse: {templates: 'Q: {text}'}\n",
            7,
            "grid.template.terse.templates",
            ["cell [yn | default | template=terse]", "has 2 prompt variants (a, b)"],
        ),
        (
            "grid:\n  template:\n    terse:\n      templates: {yn: {a: '{text}'}, zz: '{text}'}\n",
            8,
            "grid.template.terse.templates.zz",
            ["'zz' is not a suite label"],
        ),
        (
            "grid:\n  template:\n    bad name: {templates: {ch: '{text}'}}\n",
            7,
            "grid.template.bad name.templates.ch",
            ["becomes part of the suite's name"],
        ),
        ("grid:\n  templates: ['{text}']\n", 6, "grid.templates", ["named levels"]),
        (
            "options:\n  opt: {templates: {a: '{text}'}}\n",
            6,
            "options.opt.templates",
            ["give them as `templates:`"],
        ),
        ("options:\n  templates: '{text}'\n", 6, "options.templates", ["unknown key"]),
    ],
)
def test_bad_templates_name_file_line_field_and_cell(tmp_path, suites, body, line, field, needles):
    yn, ch = suites
    path = write_file(
        tmp_path / "bad.yaml",
        f"name: s\nsuites:\n  - {{suite: {yn}, label: yn}}\n  - {{suite: {ch}, label: ch}}\n"
        + body,
    )
    with pytest.raises(StudyError) as ei:
        load_study(path)
    msg = str(ei.value)
    assert msg.startswith(f"{path}:{line}, field '{field}'"), msg
    for n in needles:
        assert n in msg, msg
    assert "\n" not in msg


def test_suite_entry_templates_need_a_label(tmp_path, suites):
    yn, _ = suites
    path = write_file(
        tmp_path / "s.yaml", f"name: s\nsuites:\n  - {{suite: {yn}, templates: 'x'}}\n"
    )
    with pytest.raises(StudyError, match=r"s\.yaml:3, field 'suites\[0\]\.templates'.*label"):
        load_study(path)


# -- running -------------------------------------------------------------------------------------
def _status(path: Path | str, db: Path) -> list[dict]:
    proc = cli("study", "status", str(path), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["cells"]


@pytest.mark.slow
def test_template_levels_run_as_derived_suites_and_llmscope_run_makes_the_same_run(
    tmp_path, suites, server
):
    yn, ch = suites
    study = _study(tmp_path, yn, ch, server.base_url)
    db = tmp_path / "t.duckdb"
    proc = cli("study", "run", str(study), "--db", str(db), "--trust-study", env=cli_env(**ENV))
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {c["cell"]: c for c in _status(study, db)}
    assert {c["state"] for c in cells.values()} == {"done"}
    con = duckdb.connect(str(db), read_only=True)
    runs = dict(con.execute("SELECT run_id, suite_name FROM runs").fetchall())
    prompts = con.execute(
        "SELECT r.suite_name, s.variant, s.prompt FROM results s JOIN runs r USING (run_id) "
        "WHERE s.item_id = 'q1' AND r.suite_name LIKE 'rel-yesno%' ORDER BY 1, 2"
    ).fetchall()
    stored = dict(con.execute("SELECT name, spec FROM suites").fetchall())
    con.close()
    names = {k: runs[c["run_id"]] for k, c in cells.items()}
    assert names == {
        "yn | api | template=own": "rel-yesno",
        "yn | api | template=terse": "rel-yesno~terse",
        "ch | api | template=own": "rel-choice",
        "ch | api | template=terse": "rel-choice~terse",
    }
    text = json.loads((yn.parent / "items.jsonl").read_text().splitlines()[1])["text"]
    assert prompts == [
        ("rel-yesno", "a", f"Question: {text}? Answer:"),
        ("rel-yesno", "b", f"Is it true that {text}?"),
        ("rel-yesno~terse", "a", f"Yes or no: {text}"),
        ("rel-yesno~terse", "b", f"True? {text}"),
    ]
    spec = json.loads(stored["rel-choice~terse"])
    assert spec["templates"] == {"q": TERSE_CH}
    assert (
        spec["derived_from"]["suite"] == "rel-choice" and spec["derived_from"]["level"] == "terse"
    )
    # report prints the derived suite's name; its headline is the matrix's
    rep = cli("report", "--db", str(db), "--json")
    assert rep.returncode == 0, rep.stderr
    rows = {(r["run"], r["metric"]): r for r in json.loads(rep.stdout) if not r["group"]}
    for c in cells.values():
        r = rows[(c["run_id"], c["metric"])]
        assert (c["value"], c["ci95"], c["n"]) == (r["value"], r["ci95"], r["n"])
    # the two template levels pair up item by item (the derived suite has its parent's items)
    own, terse = cells["yn | api | template=own"], cells["yn | api | template=terse"]
    cmp = cli("compare", own["run_id"], terse["run_id"], "--db", str(db), "--json")
    assert cmp.returncode == 0, cmp.stderr
    pair = json.loads(cmp.stdout)["comparisons"][0]
    assert own["metric"] == terse["metric"] == "accuracy"
    assert pair["n"] == 6 and pair["diff"] == pytest.approx(terse["value"] - own["value"])
    # `llmscope run --templates` names the same run as the study cell (so: complete)
    tfile = write_file(tmp_path / "terse.yaml", json.dumps(TERSE_YN))
    common = ["--model", "openai:test-model", "--base-url", server.base_url, "--db", str(db)]
    again = cli(
        "run", "--suite", str(yn), "--templates", str(tfile), "--limit", "3", *common,
        env=cli_env(**ENV),
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"run {cells['yn | api | template=terse']['run_id']} is already complete" in again.stderr
    # ... and so does the derived suite's name, found in the database
    named = cli("run", "--suite", "rel-yesno~terse", "--limit", "3", *common, env=cli_env(**ENV))
    assert named.returncode == 0, named.stderr[-2000:]
    assert f"run {cells['yn | api | template=terse']['run_id']} is already complete" in named.stderr
    # resuming the derived run without --limit derives it again and scores the rest
    rid = cells["yn | api | template=terse"]["run_id"]
    more = cli(
        "run", "--resume", rid, "--limit", "6", "--db", str(db), "--no-report", env=cli_env(**ENV)
    )
    assert more.returncode == 0, more.stderr[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    n, distinct = con.execute(
        "SELECT count(*), count(DISTINCT (item_id, variant)) FROM results WHERE run_id = ?", [rid]
    ).fetchone()
    (suite_id,) = con.execute("SELECT suite_id FROM runs WHERE run_id = ?", [rid]).fetchone()
    con.close()
    assert n == distinct == 12 and suite_id.startswith("rel-yesno~terse@")
    # other templates under the same level name: another suite of that name, so the name alone
    # no longer says which one
    (tmp_path / "v2").mkdir()
    t2 = write_file(tmp_path / "v2" / "terse.yaml", json.dumps({"a": "Yes/no? {text}"}))
    two = cli(
        "run", "--suite", str(yn), "--templates", str(t2), "--limit", "1", "--no-report", *common,
        env=cli_env(**ENV),
    )  # fmt: skip
    assert two.returncode == 0, two.stderr[-2000:]
    assert_clean_error(
        cli("run", "--suite", "rel-yesno~terse", *common, env=cli_env(**ENV)),
        "holds 2 suites named 'rel-yesno~terse'",
        "--templates",
    )
    # a template naming a missing field: one line
    bad = write_file(tmp_path / "bad.yaml", "a: '{nosuch}'\nb: '{text}'\n")
    err = cli("run", "--suite", str(yn), "--templates", str(bad), *common, env=cli_env(**ENV))
    assert_clean_error(err, "names field 'nosuch'", "templates 'bad'")


# -- names held by another file --------------------------------------------------------------------
def _rows(db: Path) -> list[dict]:
    return [r.to_dict() for r in study_cells(db, "shared")]


@pytest.mark.slow
def test_a_second_file_with_the_same_name_is_refused_unless_replace(tmp_path, suites, server):
    yn, ch = suites
    first = _study(tmp_path, yn, ch, server.base_url, name="shared")
    db = tmp_path / "n.duckdb"
    run = ["--db", str(db), "--trust-study"]
    assert cli("study", "run", str(first), *run, env=cli_env(**ENV)).returncode == 0
    before = _rows(db)
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    second = write_file(
        other_dir / "shared.yaml",
        f"""name: shared
suites: [{{suite: {yn}, label: yn}}]
models:
  - {{model: "openai:test-model", base_url: "{server.base_url}", label: api}}
options: {{limit: 2}}
""",
    )
    err = cli("study", "run", str(second), *run, env=cli_env(**ENV))
    assert_clean_error(err, "study 'shared'", str(first.resolve()), "--replace", "name:")
    assert len(err.stderr.strip().splitlines()) <= 3  # endpoint and start lines, then the error
    assert_clean_error(cli("study", "run", str(second), *run, "--dry-run"), str(first.resolve()))
    assert_clean_error(cli("study", "status", str(second), "--db", str(db)), str(first.resolve()))
    assert _rows(db) == before  # nothing of the second file was recorded
    # a copy of the same file elsewhere is the same study
    copy = write_file(other_dir / "copy.yaml", first.read_text(encoding="utf-8"))
    with Store(db, read_only=True) as store:
        assert study_conflict(store, load_study(copy)) is None
        assert study_conflict(store, load_study(second)) is not None
    # --replace: the second file is the study now; the first file's runs leave it
    rep = cli("study", "run", str(second), *run, "--replace", env=cli_env(**ENV))
    assert rep.returncode == 0, rep.stderr[-2000:]
    now = _rows(db)
    # (its one cell is the first file's `yn | api | template=own` run: limit is no identity)
    assert "already complete: reused" in rep.stderr
    # read on this study's 2 items (x 2 variants), though the run holds 6 results on 3 items
    assert [c["cell"] for c in now] == ["yn | api"] and now[0]["n_done"] == 4
    assert (now[0]["n_items"], now[0]["run_items"]) == (2, 3)
    con = duckdb.connect(str(db), read_only=True)
    tagged = [
        json.loads(m).get("studies", {}).get("shared")
        for (m,) in con.execute("SELECT meta FROM runs").fetchall()
    ]
    con.close()
    assert sorted(t for t in tagged if t) == ["yn | api"]
    # editing the file that holds the name is no conflict
    second.write_text(second.read_text(encoding="utf-8") + "description: edited\n", "utf-8")
    assert cli("study", "run", str(second), *run, env=cli_env(**ENV)).returncode == 0
