"""No JSON decoding of stored columns outside store/: every `json.loads` /
`orjson.loads` outside store/ must be one of the listed decoders of other JSON (source files,
HTTP bodies, the live channel's files, the response cache), each with its reason. Stored
columns are decoded by `llmscope.store.codec.decode_json` or come back decoded from `Store`."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from llmscope.engine.types import Item, Result
from llmscope.store.codec import decode_frame, decode_json
from llmscope.store.db import Store
from tests.helpers.paths import ROOT

CODE_DIRS = ("llmscope", "engine", "data", "analysis", "tui", "bench", "scripts")
LOADS = re.compile(r"\b(?:orjson|json)\.loads\b")

# (file, the line's text) -> why it is not a stored column
ALLOWED = {
    (
        "bench/vllm_server.py",
        'return [m["id"] for m in json.loads(r.read())["data"]]',
    ): "HTTP response body",
    (
        "bench/server_throughput.py",
        'child = json.loads(fig.pop("stdout").strip().splitlines()[-1])',
    ): "the lm-eval child process's figures (its stdout)",
    (
        "bench/server_throughput.py",
        "spec = json.loads(Path(spec_path).read_text())",
    ): "the lm-eval child process's work, written by its parent",
    ("engine/config.py", "out[k] = json.loads(v)"): "a --opt value typed by the user",
    (
        "llmscope/runs/start.py",
        "return dict(json.loads(json.dumps(desc, default=str)))",
    ): "a backend's description, copied as plain JSON values",
    (
        "llmscope/runs/where.py",
        "return dict(json.loads(raw))",
    ): "DuckDB's parse tree of a --where filter",
    (
        "llmscope/cli/probeval.py",
        'data = json.loads(Path(path).read_text(encoding="utf-8"))',
    ): "a ProbEval answer pool file (probeval-validate --pool)",
    (
        "engine/openai/client.py",
        "data = json.loads(raw.http_response.content)",
    ): "HTTP response body",
    ("engine/cache.py", "return json.loads(v)"): "the response cache's own SQLite file",
    (
        "engine/cache.py",
        "return None if row is None else json.loads(row[0])",
    ): "the response cache's own SQLite file",
    ("engine/models.py", "known = json.loads(idx.read_text())"): "model index file",
    (
        "data/syntaxgym.py",
        'data = json.loads(path.read_text(encoding="utf-8"))',
    ): "suite source file",
    ("data/worldsense.py", "_loads = orjson.loads"): "suite source file",
    ("data/worldsense.py", "_loads = json.loads"): "suite source file",
    ("data/suites.py", "raw = json.loads(s)"): "suite source file (an options cell)",
    (
        "data/safety.py",
        '"""`json.loads` with a nesting limit, 64-bit integers and (unless allow_nan) '
        "finite numbers.",
    ): "docstring",
    ("data/safety.py", "obj = json.loads(text, **kw)"): "source files, guarded parser",
    (
        "data/hf_datasets.py",
        'data = json.loads(path.read_text(encoding="utf-8-sig"))',
    ): "dataset source file",
    ("llmscope/runs/live.py", "row = orjson.loads(line)"): "live channel file",
    ("llmscope/runs/live.py", 'snap = json.loads(data.decode("utf-8"))'): "live channel file",
    ("llmscope/runs/live.py", "row = json.loads(line)"): "live channel file",
    ("llmscope/runs/live.py", "row = json.loads(f.read(n))"): "live channel file",
    ("llmscope/io/importers/published.py", "loads = orjson.loads"): "published results file",
    (
        "llmscope/io/importers/published.py",
        'data = json.loads(f.read_text(encoding="utf-8"))',
    ): "answer-set file",
    (
        "llmscope/io/importers/lm_eval.py",
        'data = json.loads(res.read_text(encoding="utf-8"))',
    ): "lm-eval results file",
    (
        "analysis/worldsense.py",
        "return pd.DataFrame([json.loads(line) for line in f if line.strip()])",
    ): "published results file",
    ("analysis/probeval.py", "r = json.loads(line)"): "CFC targets file",
    ("analysis/commonsense.py", "r = json.loads(line)"): "published results file",
    (
        "bench/scale.py",
        'return {**json.loads(out.read_text()), "proc_wall": wall, "proc_cpu": cpu}',
    ): "a child process's figures",
    (
        "llmscope/studies/checks.py",
        'return bool(json.loads(cfg.read_text(encoding="utf-8")).get("chat_template"))',
    ): "a model folder's tokenizer config",
    (
        "llmscope/studies/store.py",
        'body = json.loads(_manifest(db, name).read_text(encoding="utf-8"))',
    ): "a study's published grid beside the live channel",
    (
        "llmscope/studies/store.py",
        'body = json.loads(f.read_text(encoding="utf-8"))',
    ): "a study's published grid beside the live channel",
    (
        "bench/readers.py",
        "out = json.loads(w.communicate()[0].strip().splitlines()[-1])",
    ): "a child process's figures",
    (
        "bench/study_matrix.py",
        "return dict(json.loads(out.stdout.strip().splitlines()[-1]))",
    ): "a child process's figures",
}


def test_no_json_decoding_of_stored_columns_outside_store() -> None:
    found = []
    for d in CODE_DIRS:
        for f in sorted((ROOT / d).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
                if LOADS.search(line) and (rel, line.strip()) not in ALLOWED:
                    found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, (
        "decode stored JSON with llmscope.store.codec.decode_json or a Store API:\n"
        + "\n".join(found)
    )


def test_every_allowed_decoder_still_exists() -> None:
    # an entry whose line is gone would silently allow that line back anywhere in its file
    present = set()
    for d in CODE_DIRS:
        for f in sorted((ROOT / d).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            present |= {
                (rel, ln.strip())
                for ln in f.read_text(encoding="utf-8").splitlines()
                if LOADS.search(ln)
            }
    stale = sorted(set(ALLOWED) - present)
    assert not stale, "remove allow-list entries whose line is gone:\n" + "\n".join(map(str, stale))


def test_the_check_finds_a_new_decoder() -> None:
    # the pattern the check relies on matches the forms in use, and not decode_json itself
    assert LOADS.search("x = json.loads(rec['extra'])") and LOADS.search("orjson.loads(b)")
    assert not LOADS.search("x = decode_json(rec['extra'])")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": [1, 2.5, null]}', {"a": [1, 2.5, None]}),
        ("NaN", "nan"),  # the stdlib's reading, which orjson refuses
        ("123456789012345678901234567890", 123456789012345678901234567890),
        ("{not json", None),
        (None, None),
    ],
)
def test_decode_json(text: str | None, value: object) -> None:
    got = decode_json(text)
    assert (str(got) if value == "nan" else got) == value
    assert decode_json({"already": 1}) == {"already": 1}


def test_stored_rows_come_back_decoded_and_typed(db_path: Path) -> None:
    r1 = Result(
        item_id="a",
        variant="q1",
        prompt="Is it?",
        probs={"yes": 0.75, "no": 0.25},
        other=0.0,
        top_tokens=[{"token": " yes", "id": 7, "prob": 0.75}],
        prediction="yes",
        gold="no",
        correct=0.0,
        confidence=0.75,
        n_tokens=9,
        latency_ms=2.0,
        extra={"k": [1]},
    )
    r2 = Result(item_id="a", variant="q2", option_scores={"A": {"loglik": -0.5}}, error="timeout")
    with Store(db_path) as st:
        st.add_suite(
            "s@1",
            "s",
            "yesno",
            {"name": "s"},
            "",
            [Item("a", {"g": "x"}, "no", ["yes", "no"], "A?")],
        )
        st.create_run({"run_id": "r", "suite_id": "s@1", "task": "yesno"})
        st.write_results("r", [r1, r2])
        back = st.results("r")
        frame = st.results_decoded("r")
        detail = st.item_detail("r", "a")
        items = st.suite_items("s@1")
    assert back == [r1, r2]
    assert frame["probs"].tolist() == [{"yes": 0.75, "no": 0.25}, None]
    assert frame["fields"].tolist() == [{"g": "x"}, {"g": "x"}]
    assert frame["options"].tolist() == [["yes", "no"], ["yes", "no"]]
    assert (detail.item_id, detail.text, detail.fields, detail.options) == (
        "a",
        "A?",
        {"g": "x"},
        ["yes", "no"],
    )
    assert [v["variant"] for v in detail.variants] == ["q1", "q2"]
    assert detail.variants[0]["top_tokens"] == [{"token": " yes", "id": 7, "prob": 0.75}]
    assert (
        detail.variants[1]["option_scores"] == {"A": {"loglik": -0.5}}
        and detail.variants[1]["p_yes"] is None
    )
    assert items == [Item("a", {"g": "x"}, "no", ["yes", "no"], "A?")]
    df = decode_frame(pd.DataFrame({"extra": ['{"x": 1}', None], "text": ['{"x": 1}', "t"]}))
    assert df["extra"].tolist() == [{"x": 1}, None] and df["text"].tolist() == ['{"x": 1}', "t"]
