"""Bidi controls in stored text are shown, never obeyed, outside the TUI too.

An item "Open \\u202egnp.exe" reads "Open exe.png" in a bidi terminal or a browser. A real run
against the scripted server stores such items (and a model name with an RTL override); then
`llmscope report` (text), `runs`, `export --format jsonl` to stdout and `report --html` must
contain no raw bidi control: the text report, the runs list and the page write `<U+202E>`,
the JSON lines write the `\\u202e` escape (the same data once parsed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import cli, cli_env
from tests.helpers.oai import OAIServer, oai_server  # noqa: F401

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
TEXTS = ["Open \u202egnp.exe now \u2067x\u2069", "plain \u200fitem", "an \u202bembedding"]
MODEL = "test\u202emodel"


@pytest.fixture(scope="module")
def db(oai_server: OAIServer, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    folder = tmp_path_factory.mktemp("bidi")
    items = [{"id": f"b{i}", "text": t, "group": t[:8], "gold": "no"} for i, t in enumerate(TEXTS)]
    (folder / "items.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    (folder / "suite.yaml").write_text(
        "name: bidi\ntask: yesno\nitems: items.jsonl\n"
        "templates:\n  a: 'Question: {text}? Answer:'\ntask_options:\n  chat: false\n"
    )
    path = folder / "b.duckdb"
    proc = cli(
        "run",
        "--suite",
        str(folder / "suite.yaml"),
        "--db",
        str(path),
        "--model",
        f"openai:{MODEL}",
        "--base-url",
        oai_server.base_url,
        "--no-report",
        env=_env(folder),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return path


def _env(folder: Path) -> dict[str, str]:
    return cli_env(
        OPENAI_API_KEY="sk-test-0000000000",
        HOME=str(folder),
        XDG_CONFIG_HOME=str(folder / "xdg"),
        LLMSCOPE_RESPONSE_CACHE="off",
    )


def _raw(text: str) -> list[str]:
    return [f"U+{ord(c):04X}" for c in text if c in BIDI]


def test_report_text_and_runs_show_bidi_escapes(db: Path) -> None:
    rep = cli("report", "--db", str(db), "--by", "group", env=_env(db.parent))
    assert rep.returncode == 0, rep.stderr
    assert _raw(rep.stdout) == [] and "Open <U+202E>g" in rep.stdout, rep.stdout
    assert "test<U+202E>model" in rep.stdout
    runs = cli("runs", "--db", str(db), env=_env(db.parent))
    assert runs.returncode == 0 and _raw(runs.stdout) == [], runs.stdout
    assert "test<U+202E>model" in runs.stdout


def test_jsonl_export_escapes_bidi_and_keeps_the_data(db: Path) -> None:
    out = cli("export", "--db", str(db), "--run", "last", "--format", "jsonl", env=_env(db.parent))
    assert out.returncode == 0, out.stderr
    assert _raw(out.stdout) == [] and "\\u202e" in out.stdout
    rows = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert sorted(r["prompt"] for r in rows) == sorted(f"Question: {t}? Answer:" for t in TEXTS)
    assert {r["model"] for r in rows} == {MODEL}


def test_html_page_shows_bidi_escapes(db: Path) -> None:
    page = db.parent / "page.html"
    proc = cli("report", "--db", str(db), "--html", str(page), env=_env(db.parent))
    assert proc.returncode == 0, proc.stderr
    html = page.read_text(encoding="utf-8")
    assert _raw(html) == []
    assert "Open &lt;U+202E&gt;gnp.exe now &lt;U+2067&gt;x&lt;U+2069&gt;" in html
