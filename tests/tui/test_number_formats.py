"""Numbers as papers print them, on every TUI screen at 80x24, 160x50 and 200x60: snapshots of
home, the dashboard (a limited choice run and a minimal-pairs run), the item drill-down and the
study screen, each also read as text and checked for what a reviewer would flag: a raw float
(more than six decimals), a name cut without an ellipsis, a JSON object shown twice, a count
printed as a float, a limited run's progress without the suite's size.

Fixed data (tests/helpers/formats.py, tests/helpers/study.py): no clocks, rates or temporary
paths on screen. Update after an intended change with
`pytest tests/tui/test_number_formats.py --snapshot-update` and review the SVGs under
tests/tui/__snapshots__/.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from llmscope.tui.app import LlmscopeApp
from tests.helpers.formats import LIMIT, N_CHOICE, make_format_db
from tests.helpers.study import NAME, write_study_db
from tests.helpers.tui import settle

SIZES = {"80x24": (80, 24), "160x50": (160, 50), "200x60": (200, 60)}
SUITES = ["commonsense-sample", "mc-sample", "minimal-pairs"]
NAMES = [
    *SUITES,
    "commonsense",
    "worldsense",
    "lim-choice",
    "lim-choice-suite",
    "mp-run",
    "minimal-pairs-demo",
    "SmolLM2-135M-Instruct",
    "completed",
]
RAW_FLOAT = re.compile(r"\d\.\d{7,}")


def screen_text(svg: str) -> str:
    """The characters of a Textual SVG screenshot, row by row, at their columns."""
    rows: dict[int, list[tuple[float, str]]] = {}
    for m in re.finditer(
        r'<text[^>]*?x="([\d.]+)"[^>]*?clip-path="url\(#[\w-]*?line-(\d+)\)"[^>]*>(.*?)</text>',
        svg,
        re.S,
    ):
        rows.setdefault(int(m.group(2)), []).append(
            (float(m.group(1)), html.unescape(m.group(3)).replace("\xa0", " "))
        )
    out = []
    for _, parts in sorted(rows.items()):
        line = ""
        for x, t in sorted(parts):
            line = line.ljust(round(x / 12.2)) + t
        out.append(line.rstrip())
    return "\n".join(out)


def check_text(text: str, names: list[str]) -> None:
    """What the module docstring lists, on one screen's text."""
    raw = RAW_FLOAT.findall(text)
    assert not raw, f"raw floats on screen: {raw}"
    for name in names:
        for k in range(3, len(name)):
            part = name[:k]
            if part in names:
                continue
            # a cell that ends in the cut name (a table column or the screen edge), not prose
            cut = re.search(r"(?<![\w.@-])" + re.escape(part) + r"(?=  |[ ]?│|[ ]?$)", text, re.M)
            assert cut is None, f"{name!r} cut to {part!r} without an ellipsis:\n{text}"
    objs = re.findall(r'\{"[^{}]{20,}', text)
    assert len(objs) == len(set(objs)), f"a JSON object shown twice: {objs}"


@pytest.fixture
def fmt_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LlmscopeApp:
    monkeypatch.chdir(tmp_path)  # the DB path shown in the header is then just its name
    import llmscope.data.suites as suites

    monkeypatch.setattr(
        suites, "builtin_names", lambda: SUITES
    )  # new built-in suites leave it alone
    make_format_db(Path("f.duckdb"))
    return LlmscopeApp("f.duckdb", refresh_s=3600)  # no refresh ticks mid-snapshot


def _run(snap_compare: Any, app: LlmscopeApp, size: str, keys: tuple[str, ...]) -> str:
    seen: dict[str, str] = {}

    async def before(pilot: Any) -> None:
        await settle(pilot)
        for k in keys:
            await pilot.press(k)
            await settle(pilot)
        seen["text"] = screen_text(pilot.app.export_screenshot())

    assert snap_compare(app, terminal_size=SIZES[size], run_before=before)
    return seen["text"]


@pytest.mark.parametrize("size", SIZES)
def test_home(snap_compare: Any, fmt_app: LlmscopeApp, size: str) -> None:
    text = _run(snap_compare, fmt_app, size, ())
    check_text(text, NAMES)
    if size != "80x24":  # the narrow list leaves out the share; the count is there
        assert f"{LIMIT}/{LIMIT} 100% ({LIMIT} of {N_CHOICE} items)" in text
    else:
        assert (
            f"{LIMIT}/{LIMIT} ({LIMIT}/{N_CHOICE}" in text
        )  # the list scrolls sideways for the rest
    assert "commonsense-sample" in text  # the suites list keeps names whole


@pytest.mark.parametrize("size", SIZES)
def test_dashboard_of_a_limited_choice_run(
    snap_compare: Any, fmt_app: LlmscopeApp, size: str
) -> None:
    text = _run(snap_compare, fmt_app, size, ("enter",))
    check_text(text, NAMES)
    assert f"{LIMIT}/{LIMIT} results ({LIMIT} of {N_CHOICE} items)" in text
    assert re.search(r"accuracy 0\.\d{3} \[0\.\d{3}, 0\.\d{3}\]", text)
    if size != "80x24":  # the failing list: where gold and prediction differ, not one shared prefix
        assert "…lowered" in text or "… lowered" in text
        assert "The pil…" not in text


@pytest.mark.parametrize("size", SIZES)
def test_dashboard_of_minimal_pairs_shows_calibration_numbers(
    snap_compare: Any, fmt_app: LlmscopeApp, size: str
) -> None:
    keys = ("down", "enter") if size != "80x24" else ("down", "enter", "tab")
    text = _run(snap_compare, fmt_app, size, keys)
    check_text(text, NAMES)
    if size != "80x24":  # one panel at a time there
        assert re.search(r"ece \d\.\d{3}\s+mce \d\.\d{3}", text), text
        assert re.search(r"brier \d\.\d{3}", text)


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_item_drill_down(snap_compare: Any, fmt_app: LlmscopeApp, size: str) -> None:
    text = _run(snap_compare, fmt_app, size, ("enter", "enter"))
    check_text(text, NAMES)
    assert "2.0000" not in text and "2.0 " not in text  # counts as integers
    assert '"raw":' not in text  # methods as a table, not as JSON
    if size != "80x24":
        assert re.search(r"raw\s+The pilot lowered the gear over field 0\s+no\s+0\.088", text), text
        assert re.search(r"-14\.848\s+2\s+39\s+39", text), text


@pytest.fixture
def study_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LlmscopeApp:
    monkeypatch.chdir(tmp_path)
    write_study_db(Path("g.duckdb"), Path("files"))
    return LlmscopeApp("g.duckdb", study=NAME, refresh_s=3600)


@pytest.mark.parametrize("size", SIZES)
def test_study_cell_detail(snap_compare: Any, study_app: LlmscopeApp, size: str) -> None:
    text = _run(snap_compare, study_app, size, ())
    check_text(text, ["grid"])
    if size != "80x24":
        assert re.search(r"accuracy 0\.917 \[0\.646, 0\.985\] wilson n=12", text), text


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_study_compare_labels_each_cell(
    snap_compare: Any, study_app: LlmscopeApp, size: str
) -> None:
    text = _run(snap_compare, study_app, size, ("space", "down", "space", "c"))
    check_text(text, ["grid"])
    if size != "80x24":
        assert "prompt=plain" in text and "prompt=careful" in text, text
