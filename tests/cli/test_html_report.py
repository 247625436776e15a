"""`llmscope report --html`, looked at as a person would: the page rendered by headless
Chromium, every metric it shows checked against `report --json`, no request possible, its
figures present, hostile item text shown as text."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from llmscope.engine.types import Item
from llmscope.figures.html_report import CSP
from llmscope.store.db import Store
from tests.helpers.bulk import finished_run
from tests.helpers.cli import cli
from tests.helpers.tui import SUITE_ID, make_db, p_yes_for, toy_result

CHROMIUM = next(
    (
        p
        for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
        if p and Path(p).is_file()
    ),
    None,
)
# markup, a URL, and a mathtext fragment (matplotlib would parse "$...$" in a label)
EVIL = '$\\frac{$ <script>document.title="pwned"</script><img src="http://127.0.0.1:9/x.png"> & "q"'
N = 10


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[dict[str, Any]]]:
    """A database with the toy yes/no run and a run whose items and model name are hostile
    text, its page and its `report --json` rows."""
    tmp = tmp_path_factory.mktemp("html")
    db = make_db(tmp / "t.duckdb", n_items=N)
    with Store(db) as st:
        items = [
            Item(
                item_id=f"e{i}",
                text=EVIL,
                gold="yes" if i % 2 == 0 else "no",
                fields={"id": f"e{i}", "category": EVIL, "human_q1": i % 2},
            )
            for i in range(N)
        ]
        spec = {**st.suite_spec(SUITE_ID), "name": "evil"}  # grouped and clustered as the toy suite
        st.add_suite("evil@1", "evil", "yesno", spec, "tests", items)
        finished_run(st, "run-evil", "evil@1", "evil", N, model="m<b>x</b>", backend="test")
        st.write_results("run-evil", [toy_result(it, i, "q1") for i, it in enumerate(items)])
    html = tmp / "page.html"
    out = cli("report", "--db", str(db), "--html", str(html))
    assert out.returncode == 0, out.stderr
    js = cli("report", "--db", str(db), "--json")
    assert js.returncode == 0, js.stderr
    return db, html, json.loads(js.stdout)


class _Dom(HTMLParser):
    """Metric rows per run section, figures, and every element and attribute of the page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.section: str | None = None
        self.rows: dict[str, list[list[str]]] = {}
        self.figures: dict[str, list[str]] = {}
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.cell: list[str] | None = None
        self.row: list[str] | None = None
        self.texts: list[str] = []  # every text node, entities decoded
        self.meta_csp: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "section" and (a.get("id") or "").startswith("run-"):
            self.section = str(a["id"])[4:]
        if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy":
            self.meta_csp = a.get("content")
        if tag == "figure" and self.section:
            self.figures.setdefault(self.section, []).append(str(a.get("data-kind")))
        if tag == "tr" and a.get("data-metric") is not None and self.section:
            self.row = []
        if tag == "td" and self.row is not None:
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self.cell is not None and self.row is not None:
            self.row.append("".join(self.cell).strip())
            self.cell = None
        if tag == "tr" and self.row is not None and self.section:
            self.rows.setdefault(self.section, []).append(self.row)
            self.row = None

    def handle_data(self, data: str) -> None:
        self.texts.append(data)
        if self.cell is not None:
            self.cell.append(data)


def _render(html: Path, tmp: Path) -> str:
    if CHROMIUM is None:
        pytest.skip(
            "Chromium not found (Debian: apt-get install chromium); the page is not rendered"
        )
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--dump-dom",
        html.resolve().as_uri(),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "<body" in out.stdout
    return out.stdout


def _fmt(v: float | None, counts: bool) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if counts else f"{v:.3f}"


def test_the_rendered_page_shows_the_report_numbers_and_makes_no_request(
    page: tuple[Path, Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    db, html, rows = page
    dom = _Dom()
    dom.feed(_render(html, tmp_path))
    # every number in each run's metrics table is the report's, at three decimals
    assert set(dom.rows) == {"run-a", "run-evil"}
    for rid, shown in dom.rows.items():
        want = [r for r in rows if r["run"] == rid]
        assert len(shown) == len(want) > 10
        for cells, r in zip(shown, want, strict=True):
            metric, _group, value, ci, n, clusters = cells[:6]
            assert metric == r["metric"]
            assert value == _fmt(r["value"], r["metric"] == "errors"), (rid, r)
            want_ci = f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]" if r["ci95"] else ""
            assert ci == want_ci, (rid, r)
            assert n == str(r["n"]) and clusters == (
                "" if r["n_clusters"] is None else str(r["n_clusters"])
            )
    # accuracy by hand (tests/helpers/tui.py's rule): the page's first row
    hand = sum((p_yes_for(i) > 0.9 - p_yes_for(i)) == (i % 2 == 0) for i in range(N)) / N
    assert dom.rows["run-a"][0][:3] == ["accuracy", "overall", f"{hand:.3f}"]
    # no request can be made: the policy forbids every fetch, and nothing names a URL
    assert dom.meta_csp == CSP == "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
    for tag, attrs in dom.tags:
        assert tag not in ("script", "link", "img", "iframe", "object", "embed", "base"), (
            tag,
            attrs,
        )
        for k, v in attrs.items():
            # only references inside the page: href="#id", clip-path="url(#id)"
            assert not re.search(r"https?:|//|url\((?!#)", v or ""), (tag, k, v)
            if k in ("href", "src", "xlink:href", "action", "srcset", "poster", "data"):
                assert (v or "").startswith("#"), (tag, k, v)
    raw = html.read_text()
    assert "@import" not in raw and not re.search(r"url\((?!#)", raw)
    # the figures that apply to a yes/no run with human answers, each an inline SVG; run-a has
    # two prompt variants, so consensus and awareness exist and it has a place on the plane
    assert dom.figures["run-a"] == [
        "accuracy",
        "reliability",
        "position",
        "human",
        "commonsense",
        "plane",
    ]
    assert dom.figures["run-evil"] == [
        "accuracy",
        "reliability",
        "position",
        "human",
    ]  # one variant: no q2
    assert sum(1 for t, _ in dom.tags if t == "svg") == 10
    # hostile text is text: the title is the page's, the markup shows literally
    text = "".join(dom.texts)
    assert EVIL in text and "m<b>x</b>" in text
    assert [t for t, _ in dom.tags if t == "title"] == ["title"]
    assert "llmscope report · t.duckdb" in text


def test_failing_items_are_listed_with_prompt_and_count(
    page: tuple[Path, Path, list[dict[str, Any]]],
) -> None:
    _, html, _ = page
    raw = html.read_text()
    # run-a: two variants of each item; an item fails in both when its prediction is wrong
    wrong = sum((p_yes_for(i) > 0.9 - p_yes_for(i)) != (i % 2 == 0) for i in range(N))
    assert f"{2 * wrong} failing rows" in raw
    assert "Consider the statement, &quot;Statement number" in raw
    # the first failing row's answer probabilities and top tokens, as written
    i = next(i for i in range(N) if (p_yes_for(i) > 0.9 - p_yes_for(i)) != (i % 2 == 0))
    py, pn = p_yes_for(i), round(0.9 - p_yes_for(i), 6)
    first = raw[raw.index('<details class="item">') :]
    first = first[: first.index("</details>")]
    assert f"<code>s{i:03d}</code> q1" in first
    assert f"<code>yes</code></td><td class='num'>{py:.3f}</td>" in first
    assert f"<code>no</code></td><td class='num'>{pn:.3f}</td>" in first
    assert f"<code>&#x27;Yes&#x27;</code></td><td class='num'>{py:.3f}</td>" in first
    assert "<th>human_q1</th><td>" in first
    # run-evil (one variant, the same rule) fails on the same items once each
    assert raw.count('<details class="item">') == 3 * wrong
    assert "&lt;script&gt;document.title" in raw and "<script" not in raw


def test_a_large_run_lists_the_first_failing_rows_and_says_how_many(tmp_path: Path) -> None:
    db = make_db(tmp_path / "big.duckdb", n_items=150)
    with Store(db, read_only=True) as st:
        from llmscope.figures.html_report import MAX_FAILING, failing_html

        run = st.get_run("run-a")
        total = st.failing_count("run-a")
        text = failing_html(st, run)
    assert total > MAX_FAILING
    assert f"first {MAX_FAILING} of {total} failing rows" in text
    assert text.count('<details class="item">') == MAX_FAILING


def test_an_unwritable_page_is_a_one_line_error(
    page: tuple[Path, Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    db, _, _ = page
    out = cli(
        "report", "--db", str(db), "--run", "run-a", "--html", str(tmp_path / "no" / "p.html")
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert (
        out.stderr.strip()
        == f"llmscope: error: --html {tmp_path / 'no' / 'p.html'}: cannot write: No such file or directory"
    )
