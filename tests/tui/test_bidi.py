"""Bidi controls in item and response text are shown as <U+XXXX> escapes, never raw.

An RTL override makes a bidi terminal show "\\u202egnp.exe" as "exe.png": the TUI must show
what is stored, so the run's item list and the drill-down render every bidi control visibly
(tui/widgets.py `clean`), while the database keeps the text unchanged."""

from __future__ import annotations

from pathlib import Path

import duckdb

from llmscope.engine.types import Item
from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.screens import ItemScreen
from llmscope.tui.widgets import clean
from tests.helpers.tui import SUITE_ID, create_run, screen_text, settle, toy_result
from tests.helpers.tui_pilot import on_dashboard, started

BIDI = [
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
]
TEXT = "Open \u202egnp.exe now \u2067x\u2069"
PRED = "y\u200fes"


def test_clean_escapes_every_bidi_control() -> None:
    for ch in BIDI:
        assert clean(f"a{ch}b") == f"a<U+{ord(ch):04X}>b"
    assert clean("plain العربية text") == "plain العربية text"  # RTL letters themselves are fine


async def test_table_and_drill_down_show_bidi_escapes(tmp_path: Path) -> None:
    path = tmp_path / "bidi.duckdb"
    items = [
        Item(
            item_id=f"s{i:03d}",
            fields={
                "id": f"s{i:03d}",
                "statement": TEXT if i == 0 else f"plain {i}",
                "category": "a",
            },
            gold="yes",
            text=TEXT if i == 0 else f"plain {i}",
        )
        for i in range(4)
    ]
    with Store(path) as s:
        s.add_suite(
            SUITE_ID,
            "toy",
            "yesno",
            {"name": "toy", "task": "yesno", "answers": ["yes", "no"]},
            "tests",
            items,
        )
        create_run(s, "run-b", 4)
        r = toy_result(items[0], 0)
        r.correct, r.prediction = 0.0, PRED
        s.write_results("run-b", [r])
    app = LlmscopeApp(path)
    async with on_dashboard(app, (140, 40)) as pilot:
        text = screen_text(app)
        assert "<U+202E>gnp.exe" in text, text
        assert not any(ch in text for ch in BIDI)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ItemScreen)
        text = screen_text(app)
        assert "Open <U+202E>gnp.exe now <U+2067>x<U+2069>" in text  # item text and prompt
        assert "y<U+200F>es" in text  # the prediction
        assert not any(ch in text for ch in BIDI)
    con = duckdb.connect(str(path), read_only=True)
    stored = con.execute("SELECT text FROM items WHERE item_id = 's000'").fetchone()[0]
    pred = con.execute("SELECT prediction FROM results").fetchone()[0]
    con.close()
    assert (stored, pred) == (TEXT, PRED)  # shown escaped, stored as given


async def test_study_screen_shows_bidi_escapes(tmp_path: Path) -> None:
    """A shared study file's labels (suites, models, grid levels) are drawn escaped too."""
    from llmscope.studies.spec import load_study
    from llmscope.studies.store import record_study
    from llmscope.tui.screens.study import StudyScreen
    from tests.helpers.cli import write_yesno_suite

    yn = write_yesno_suite(tmp_path / "yn", 3)
    (tmp_path / "s.yaml").write_text(
        f'name: bidi\nsuites: [{{suite: {yn}, label: "yn \\u202egnp.exe"}}]\n'
        'models:\n  - {model: default, label: "base\\u2067x\\u2069"}\n'
        'grid:\n  prompt:\n    "pl\\u200fain": {}\n',
        encoding="utf-8",
    )
    path = tmp_path / "study.duckdb"
    with Store(path) as s:
        record_study(s, load_study(tmp_path / "s.yaml"))
    app = LlmscopeApp(path, study="bidi")
    async with started(app, (160, 40)):
        assert isinstance(app.screen, StudyScreen)
        text = screen_text(app)
        assert "<U+202E>gnp" in text and "<U+2067>x<U+2069>" in text, text
        assert not any(ch in text for ch in BIDI), [
            ascii(ln) for ln in text.splitlines() if any(c in BIDI for c in ln)
        ]
