"""Hostile suite input: property-based malformed specs and items.

Each generated input is either rejected with a SuiteError naming the file, line and
field of the first defect (computed here from what the test wrote), or accepted and
stored byte for byte (round-tripped through the Store). A handful of representative
cases also go through the CLI: exit 2, no traceback, and no suite or item rows.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmscope.data.suites import SuiteError, load_suite
from llmscope.store.db import Store
from tests.helpers.cli import api_run, assert_clean_error, cli_env, record
from tests.helpers.oai import running_server

pytestmark = pytest.mark.reliability

COUNTS = {"items_jsonl": 0, "items_csv": 0, "specs": 0, "rejected": 0, "accepted": 0, "cli": 0}
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)

NASTY = [
    "[bold red]alarm[/bold red]",
    "[link=file:///etc/passwd]x[/link]",
    "[/]",
    "\\[escaped]",
    "\x1b[31mred\x1b[0m",
    "\x1b[2J\x1b[H",
    "\x1b]0;title\x07",
    "\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\",
    "line\u2028sep",
    "para\u2029sep",
    "nel\x85x",
    "fs\x1cgs\x1drs\x1e",
    "vt\x0bff\x0c",
    "cr\rlf",
    "\ufeffbom",
    "\u202eevil\u202c",
    "e\u0301\u0301\u0301",
    "\U0001f600\U0001f469\u200d\U0001f4bb",
    "nul\x00byte",
    "tab\tinside",
    "\\n not a newline",
    '"quoted", comma',
    "{braces} {text}",
    "x" * 100_000,
]
TEXT = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
    st.sampled_from(NASTY),
    st.lists(st.sampled_from(NASTY), min_size=1, max_size=3).map("".join),
)
IDS = st.one_of(
    st.integers(0, 50), st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6)
)
KINDS = ["ok"] * 6 + [
    "blank",
    "badjson",
    "nonobj",
    "noid",
    "badid",
    "badtext",
    "badgold",
    "notext",
    "dup",
    "surrogate",
]
PARSE_KINDS = {"badjson", "nonobj", "noid", "badid", "badtext", "badgold", "surrogate"}


@st.composite
def jsonl_file(draw: Any) -> tuple[list[str], list[tuple[str, dict[str, Any] | None]]]:
    """Lines of an items file, and for each line its kind and record."""
    lines: list[str] = []
    meta: list[tuple[str, dict[str, Any] | None]] = []
    n = draw(st.integers(0, 8))
    ids_so_far: list[Any] = []
    for _ in range(n):
        kind = draw(st.sampled_from(KINDS))
        if kind == "dup" and not ids_so_far:
            kind = "ok"
        rec: dict[str, Any] | None = None
        if kind in ("ok", "notext", "dup", "badtext", "badgold", "surrogate"):
            rid = draw(st.sampled_from(ids_so_far)) if kind == "dup" else draw(IDS)
            rec = {"id": rid, "text": draw(TEXT), "note": draw(TEXT)}
            if draw(st.booleans()):
                rec["gold"] = draw(st.sampled_from(["yes", "no", 1, True, None, 0.5]))
            if kind == "notext":
                del rec["text"]
            elif kind == "badtext":
                rec["text"] = draw(st.sampled_from([5, 1.5, ["a"], {"a": 1}, True]))
            elif kind == "badgold":
                rec["gold"] = draw(st.sampled_from([["yes"], {"v": "yes"}]))
            elif kind == "surrogate":
                rec["text"] = rec["text"] + "\udc80"
            # A raw surrogate cannot be encoded as UTF-8 at all: only the \\udc80 escape reaches the parser.
            line = json.dumps(rec, ensure_ascii=kind == "surrogate" or draw(st.booleans()))
            if kind in ("ok", "dup", "notext"):
                ids_so_far.append(rid)
        elif kind == "blank":
            line = draw(st.sampled_from(["", "   ", "\t"]))
        elif kind == "badjson":
            line = draw(
                st.sampled_from(
                    ['{"id": "x", "text": ', "{id: 1}", "{'id': 1}", '{"id": 1,}', "nul\x00"]
                )
            )
        elif kind == "nonobj":
            line = draw(st.sampled_from(["[1, 2]", '"a string"', "42", "null", "true"]))
        elif kind == "noid":
            rec = {"text": draw(TEXT), draw(st.sampled_from(["id_", "ID", "Id"])): 1}
            if draw(st.booleans()):
                rec["id"] = draw(st.sampled_from([None, ""]))
            line = json.dumps(rec)
        else:  # badid
            rec = {"id": draw(st.sampled_from([1.5, [1], {"a": 1}, True, False])), "text": "t"}
            line = json.dumps(rec)
        lines.append(line)
        meta.append((kind, rec))
    return lines, meta


def _expected_error(
    meta: list[tuple[str, dict[str, Any] | None]],
) -> tuple[int | None, str | None] | None:
    """(line, field) of the first defect the loader must report, or None if the file is valid."""
    field_of = {
        "badjson": None,
        "nonobj": None,
        "noid": "id",
        "badid": "id",
        "badtext": "text",
        "badgold": "gold",
        "surrogate": "text",
    }
    for n, (kind, _) in enumerate(meta, 1):
        if kind in PARSE_KINDS:
            return n, field_of[kind]
    if not any(k != "blank" for k, _ in meta):
        return None, None  # "no items"
    seen: set[str] = set()
    for n, (kind, rec) in enumerate(meta, 1):
        if kind == "blank":
            continue
        assert rec is not None
        rid = str(rec["id"])
        if rid in seen:
            return n, "id"
        seen.add(rid)
        if kind == "notext":
            return n, "text"
        # A yes/no gold must be one of the answers: JSON true reads as "yes"; 1 and 0.5 are defects.
        if rec.get("gold") not in (None, "yes", "no", True):
            return n, "gold"
    return None


class _Sandbox:
    """One folder and one Store for all examples of a test (hypothesis re-runs the body)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="llmscope-hostile-"))
        self.store = Store(self.dir / "h.duckdb")
        self.n = 0

    def folder(self) -> Path:
        self.n += 1
        d = self.dir / f"case{self.n}"
        d.mkdir()
        return d


@pytest.fixture(scope="module")
def sandbox() -> Any:
    sb = _Sandbox()
    yield sb
    sb.store.close()
    record(
        "hostile_input",
        inputs_tried=sum(COUNTS[k] for k in ("items_jsonl", "items_csv", "specs")),
        **COUNTS,
        half_imported=0,
    )


def _round_trip(
    sb: _Sandbox, spec_path: Path, texts: list[str], recs: list[dict[str, Any]]
) -> None:
    suite = load_suite(spec_path)
    items = suite.items()
    assert [it.text for it in items] == texts
    sb.store.add_suite(suite.suite_id, suite.name, suite.task, suite.spec, "", items)
    rows = sb.store.execute(
        "SELECT text, fields FROM items WHERE suite_id = ? ORDER BY idx", [suite.suite_id]
    ).fetchall()
    assert [r[0].encode("utf-8") for r in rows] == [t.encode("utf-8") for t in texts]
    assert [json.loads(r[1]) for r in rows] == recs
    COUNTS["accepted"] += 1


@SETTINGS
@given(data=jsonl_file(), crlf=st.booleans())
def test_hostile_jsonl_items(sandbox: _Sandbox, data: Any, crlf: bool) -> None:
    lines, meta = data
    COUNTS["items_jsonl"] += 1
    d = sandbox.folder()
    (d / "items.jsonl").write_bytes(
        ("\r\n" if crlf else "\n").join(lines).encode("utf-8", "surrogatepass")
    )
    (d / "suite.yaml").write_text(
        "name: hostile\ntask: yesno\nitems: items.jsonl\ntemplates:\n  a: 'Q: {text}'\n"
    )
    expected = _expected_error(meta)
    if expected is None:
        recs = [r for k, r in meta if k != "blank"]
        _round_trip(sandbox, d / "suite.yaml", [r["text"] for r in recs], recs)  # type: ignore[index]
        return
    with pytest.raises(SuiteError) as ei:
        load_suite(d / "suite.yaml").items()
    e = ei.value
    assert e.path == str((d / "items.jsonl").resolve())
    assert (e.line, e.field) == expected, str(e)
    assert str(e).startswith(e.path)
    COUNTS["rejected"] += 1


@st.composite
def csv_file(draw: Any) -> tuple[str, tuple[int | None, str | None] | None, list[list[str]]]:
    header = ["id", "text", "gold"]
    problem = draw(
        st.sampled_from(["none", "none", "columns", "dupheader", "dupid", "empty", "noid"])
    )
    rows = [
        [
            str(i),
            draw(TEXT.filter(lambda t: t.strip() != "")),
            draw(st.sampled_from(["yes", "no", ""])),
        ]
        for i in range(draw(st.integers(1, 5)))
    ]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
    if problem == "empty":
        return "", (1, None), []
    w.writerow(["id", "text", "text"] if problem == "dupheader" else header)
    expected: tuple[int | None, str | None] | None = None
    if problem == "dupheader":
        expected = (1, "text")
    bad_at = draw(st.integers(0, len(rows) - 1))
    for i, r in enumerate(rows):
        if i == bad_at and problem == "columns":
            r = [*r, "extra"]
        if i == bad_at and problem == "dupid" and i > 0:
            r = [rows[0][0], *r[1:]]
        if i == bad_at and problem == "noid":
            r = ["", *r[1:]]
        w.writerow(r)
    text = buf.getvalue()
    # The physical line each record starts on (cells may hold newlines).
    starts, line = [], 2
    for r in rows:
        starts.append(line)
        one = io.StringIO()
        csv.writer(one, lineterminator="\n", quoting=csv.QUOTE_ALL).writerow(r)
        line += one.getvalue().count("\n")
    if problem == "columns":
        expected = (starts[bad_at], None)
    elif problem == "dupid" and bad_at > 0:
        expected = (starts[bad_at], "id")
    elif problem == "noid":
        expected = (starts[bad_at], "id")
    return text, expected, rows


@SETTINGS
@given(data=csv_file())
def test_hostile_csv_items(sandbox: _Sandbox, data: Any) -> None:
    text, expected, rows = data
    COUNTS["items_csv"] += 1
    d = sandbox.folder()
    (d / "items.csv").write_text(text, encoding="utf-8", newline="")
    (d / "suite.yaml").write_text("name: hostile-csv\ntask: yesno\nitems: items.csv\n")
    if expected is None:
        recs = [{"id": r[0], "text": r[1], "gold": r[2]} for r in rows]
        _round_trip(sandbox, d / "suite.yaml", [r[1] for r in rows], recs)
        return
    with pytest.raises(SuiteError) as ei:
        load_suite(d / "suite.yaml").items()
    e = ei.value
    assert e.path == str((d / "items.csv").resolve())
    # csv reports the line a record ends on; a record spanning lines may point at its end.
    assert e.field == expected[1], str(e)
    assert e.line is not None and e.line >= expected[0], str(e)
    COUNTS["rejected"] += 1


SPEC_MUTATIONS = {
    "name": [None, 5, ["a"], ""],
    "task": [None, "yes-no", 3, ["yesno"]],
    "templates": [5, ["a"], {"a": 5}, "{unclosed"],
    "answers": [[], "yes", [["yes"]]],
    "group_by": [5, [1]],
    "task_options": ["chat", [1]],
    "variant_gold": ["x"],
    "items": ["missing.jsonl", 5],
}


@SETTINGS
@given(key=st.sampled_from(sorted(SPEC_MUTATIONS)), data=st.data(), name=TEXT)
def test_hostile_spec_fields(sandbox: _Sandbox, key: str, data: Any, name: str) -> None:
    COUNTS["specs"] += 1
    d = sandbox.folder()
    (d / "items.jsonl").write_text('{"id": 1, "text": "t"}\n')
    spec: dict[str, Any] = {
        "name": name if name.strip() else "n",
        "task": "yesno",
        "items": "items.jsonl",
        "templates": {"a": "{text}"},
    }
    value = data.draw(st.sampled_from(SPEC_MUTATIONS[key]))
    if value is None:
        spec.pop(key, None)
    else:
        spec[key] = value
    text = yaml.safe_dump(spec, allow_unicode=True, sort_keys=False, width=10**6)
    (d / "suite.yaml").write_text(text, encoding="utf-8")
    if value is None:
        line = None
    else:
        line = next(n for n, ln in enumerate(text.split("\n"), 1) if ln.startswith(f"{key}:"))
    with pytest.raises(SuiteError) as ei:
        load_suite(d / "suite.yaml")
    e = ei.value
    assert e.path == str((d / "suite.yaml").resolve())
    assert e.field == key, str(e)
    assert e.line == line, str(e)
    COUNTS["rejected"] += 1


@pytest.mark.parametrize(
    "text,line",
    [
        ("name: [unclosed\ntask: yesno\n", 2),
        ("- a\n- b\n", None),
        ("name: a\n  bad: indent\n", 2),
        ("\ttask: yesno\n", 1),
        ("", None),
        ("name: x\x00\n", None),
    ],
)
def test_hostile_spec_syntax(sandbox: _Sandbox, text: str, line: int | None) -> None:
    COUNTS["specs"] += 1
    d = sandbox.folder()
    (d / "suite.yaml").write_text(text)
    with pytest.raises(SuiteError) as ei:
        load_suite(d / "suite.yaml")
    assert ei.value.path == str((d / "suite.yaml").resolve())
    if line is not None:
        assert ei.value.line == line, str(ei.value)
    COUNTS["rejected"] += 1


CLI_CASES = {
    "bad-json": ('{"id": 1, "text": "a"}\n{"id": 2, "text": \n', "line 2"),
    "dup-id": ('{"id": 1, "text": "a"}\n{"id": "1", "text": "b"}\n', "line 2, field 'id'"),
    "surrogate": ('{"id": 1, "text": "a\\udc80"}\n', "line 1, field 'text'"),
    "empty": ("", "no items"),
    "bad-utf8": (b'{"id": 1, "text": "\xff"}\n', "line 1"),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_cli_rejects_without_half_import(tmp_path: Path, case: str) -> None:
    COUNTS["cli"] += 1
    content, needle = CLI_CASES[case]
    items = tmp_path / "items.jsonl"
    items.write_bytes(content if isinstance(content, bytes) else content.encode())
    (tmp_path / "suite.yaml").write_text("name: bad\ntask: yesno\nitems: items.jsonl\n")
    db = tmp_path / "x.duckdb"
    # nothing listens on port 9: the suite must be refused before any request
    proc = api_run(
        tmp_path / "suite.yaml", db, "http://127.0.0.1:9/v1", env=cli_env(OPENAI_API_KEY="sk-x")
    )
    assert_clean_error(proc, str(items.resolve()), needle)
    if db.exists():
        con = duckdb.connect(str(db), read_only=True)
        assert con.execute(
            "SELECT (SELECT count(*) FROM suites) + (SELECT count(*) FROM items)"
        ).fetchone() == (0,)
        con.close()


def test_cli_stores_hostile_text_literally(tmp_path: Path) -> None:
    COUNTS["cli"] += 1
    texts = NASTY[:-1] + ["y" * 20_000]
    with open(tmp_path / "items.jsonl", "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}, ensure_ascii=i % 2 == 0) + "\n")
    (tmp_path / "suite.yaml").write_text(
        'name: "[bold]hostile\\e[31m"\ntask: yesno\nitems: items.jsonl\n'
    )
    db = tmp_path / "x.duckdb"
    with running_server() as server:
        proc = api_run(
            tmp_path / "suite.yaml",
            db,
            server.base_url,
            "--no-report",
            env=cli_env(OPENAI_API_KEY="sk-x"),
        )
    assert proc.returncode == 0, proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    stored = con.execute("SELECT text FROM items ORDER BY idx").fetchall()
    prompts = con.execute("SELECT prompt FROM results ORDER BY CAST(item_id AS INT)").fetchall()
    con.close()
    assert [r[0].encode() for r in stored] == [t.encode() for t in texts]
    assert [r[0].encode() for r in prompts] == [t.encode() for t in texts]


def test_bad_template_conversion_is_rejected_at_load(tmp_path: Path) -> None:
    (tmp_path / "items.jsonl").write_text('{"id": 1, "text": "t"}\n')
    (tmp_path / "suite.yaml").write_text(
        "name: n\ntask: yesno\nitems: items.jsonl\ntemplates: '{text!z}'\n"
    )
    with pytest.raises(SuiteError) as ei:
        load_suite(tmp_path / "suite.yaml").work()
    assert ei.value.field == "templates"
