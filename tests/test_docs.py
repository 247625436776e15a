"""The docs stay a front door: a short README linking docs by topic, links that resolve, and pages
that state today's behaviour rather than the project's history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

DOCS = sorted(
    [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "RELIABILITY.md",
        ROOT / "BENCHMARKS.md",
        *(ROOT / "docs").glob("*.md"),
    ]
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# History words: an issue number, a numbered round, an ordinal followed by "pass" or "round".
HISTORY = re.compile(
    r"\bissues? ?#?\d+|\bround \d+|\b(?:first|second|third|fourth|fifth|sixth) (?:pass|round)\b",
    re.IGNORECASE,
)


def _links(doc: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    linked_docs = {t.split("#")[0] for t in _links(ROOT / "README.md") if t.startswith("docs/")}
    assert len(linked_docs) >= 4, linked_docs
    # The two commands a fresh machine needs, exactly; CI runs the second one.
    assert "bash scripts/setup.sh && .venv/bin/llmscope run --suite commonsense-sample" in text
    test_command = "bash scripts/setup.sh dev && .venv/bin/python -m pytest -q"
    assert test_command in text
    assert test_command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    missing = [t for t in _links(doc) if not (doc.parent / t.split("#")[0]).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links to missing files: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_speak_of_today_not_history(doc: Path) -> None:
    hits = [m.group(0) for m in HISTORY.finditer(doc.read_text(encoding="utf-8"))]
    assert not hits, f"{doc.relative_to(ROOT)} speaks of history: {hits}"


def test_performance_page_is_short() -> None:
    assert len((ROOT / "docs" / "PERFORMANCE.md").read_text(encoding="utf-8").splitlines()) <= 400
