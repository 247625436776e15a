"""WorldSense loader: the real file (slow) and malformed hand-written files."""

from __future__ import annotations

import bz2
import json
from pathlib import Path

import pytest

from llmscope.data.suites import SuiteError
from llmscope.data.worldsense import load_worldsense, load_worldsense_suite, suite_spec
from tests.helpers.paths import SHARED

TRIALS = SHARED / "data" / "worldsense" / "test_set" / "trials.jsonl.bz2"


def rec(**over):
    r = {
        "Key": 11,
        "problemname": "Infer.trivial",
        "tuple_ID": "t1",
        "text": "Is it TRUE or FALSE?",
        "expectedresp": ["TRUE", "FALSE"],
        "problemsize": 3,
        "skin": "people",
        "qskin": "q",
        "complexity": "Complexity_0",
        "goldresp_obfusc": "Megi",
    }
    r.update(over)
    return r


def write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "trials.jsonl.bz2"
    with bz2.open(p, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return p


def test_small_file_roundtrip(tmp_path):
    p = write(
        tmp_path,
        [
            json.dumps(rec()),
            "",
            json.dumps(rec(Key=-5, expectedresp=["1", "2", "3"], goldresp_obfusc="Yoda")),
        ],
    )
    items = load_worldsense(tmp_path)  # a folder works too
    assert [i.item_id for i in items] == ["11", "-5"]
    assert items[0].gold == "FALSE" and items[0].options == ["TRUE", "FALSE"]
    assert items[1].gold == "3" and items[1].line == 3
    assert (
        items[0].fields["problemname"] == "Infer.trivial"
        and items[0].text == "Is it TRUE or FALSE?"
    )
    suite = load_worldsense_suite(p)
    assert suite.task == "constrained" and suite.cluster_field == "tuple_ID"
    assert suite.group_by == ["problemname", "problemsize"]
    work = suite.work()
    assert (
        work[0].prompt == "Is it TRUE or FALSE?"
        and work[0].gold == "FALSE"
        and work[0].options == ["TRUE", "FALSE"]
    )
    assert suite_spec()["templates"] == {"default": "{text}"}


@pytest.mark.parametrize(
    "line,field,msg",
    [
        ("{not json", None, "invalid JSON"),
        ("[1, 2]", None, "JSON object"),
        (json.dumps(rec(goldresp_obfusc="Bob")), "goldresp_obfusc", "unknown obfuscated gold"),
        (json.dumps(rec(goldresp_obfusc="Mark")), "goldresp_obfusc", "not among the allowed"),
        (json.dumps({k: v for k, v in rec().items() if k != "text"}), "text", "missing field"),
        (json.dumps({k: v for k, v in rec().items() if k != "skin"}), "skin", "missing field"),
        (json.dumps(rec(expectedresp="TRUE")), "expectedresp", "expected list"),
        (json.dumps(rec(expectedresp=[])), "expectedresp", "non-empty"),
        (json.dumps(rec(Key=None)), "Key", "expected int/str"),
    ],
)
def test_malformed_lines(tmp_path, line, field, msg):
    p = write(tmp_path, [json.dumps(rec()), line])
    with pytest.raises(SuiteError, match=msg) as ei:
        load_worldsense(p)
    assert ei.value.path == str(p) and ei.value.line == 2 and ei.value.field == field


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(SuiteError, match="no WorldSense trials file"):
        load_worldsense(tmp_path)
    bad = tmp_path / "trials.jsonl.bz2"
    bad.write_bytes(b"this is not bzip2")
    with pytest.raises(SuiteError, match="cannot read"):
        load_worldsense(bad)


@pytest.mark.slow
@pytest.mark.skipif(not TRIALS.is_file(), reason=f"WorldSense data not present at {TRIALS}")
def test_real_file():
    items = load_worldsense(TRIALS)
    assert len(items) == 87048
    assert len({i.item_id for i in items}) == 87048
    by_line = {i.line: i for i in items}
    # golds checked by reading the texts: line 1 "history in between economics and computer science"
    # (economics < history < computer science) -> (1); line 7 restates a premise -> TRUE; line 8
    # Robert < Grace < Emily, "Emily between Robert and Grace" -> FALSE; line 9 consistent -> POSSIBLE;
    # line 10 contradicts itself -> IMPOSSIBLE; line 15 asks about Grace, never mentioned -> (3)
    expect = {1: "1", 2: "2", 7: "TRUE", 8: "FALSE", 9: "POSSIBLE", 10: "IMPOSSIBLE", 15: "3"}
    for line, gold in expect.items():
        assert by_line[line].gold == gold, line
    assert by_line[1].item_id == "-276741083417243227"
    assert by_line[7].options == ["TRUE", "FALSE"] and by_line[9].options == [
        "POSSIBLE",
        "IMPOSSIBLE",
    ]
    assert by_line[1].fields["tuple_ID"] == "fast_spec_r5_seed06_results_10-11-2023_10h36m12s_6109"
    assert by_line[1].fields["problemsize"] == 3


@pytest.mark.parametrize("number", ["NaN", "Infinity", "1e999"])
def test_non_finite_number_is_refused_with_its_line(tmp_path, number):
    """The suite skips the NaN/Infinity scan of the fields because the parser refuses them:
    such a trial is still an error naming the file and line."""
    line = json.dumps(rec(Key=12)).replace('"problemsize": 3', f'"problemsize": {number}')
    p = write(tmp_path, [json.dumps(rec()), line])
    with pytest.raises(SuiteError) as ei:
        load_worldsense_suite(p).items()
    assert ei.value.path == str(p) and ei.value.line == 2


def test_corrupt_block_is_an_error(tmp_path):
    """A flipped bit inside the compressed stream (CRC mismatch) or a cut-off file: 'cannot read'."""
    p = write(tmp_path, [json.dumps(rec(Key=k, text="x" * 50 + str(k))) for k in range(2000)])
    data = bytearray(p.read_bytes())
    cut = tmp_path / "cut" / "trials.jsonl.bz2"
    cut.parent.mkdir()
    cut.write_bytes(bytes(data[: len(data) // 2]))
    data[len(data) // 2] ^= 0x10
    p.write_bytes(bytes(data))
    for f in (p, cut):
        with pytest.raises(SuiteError, match="cannot read") as ei:
            load_worldsense(f)
        assert ei.value.path == str(f)
