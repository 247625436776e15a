"""`llmscope export`: types kept, flat numeric columns, safe paths, CSV escaping, lm-eval shape.

Every built-in suite is run on the tiny random model (a few items each), exported in parquet,
CSV and JSONL, and loaded back with pandas and duckdb. Expected values are read from the
`results` table with SQL, not from the exporter.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

from llmscope.data.suites import EXTERNAL_SUITES, builtin_names, load_suite
from llmscope.engine.runner import RunPlan
from llmscope.engine.types import Result
from llmscope.io.export import (
    COLUMNS,
    CSV_DTYPES,
    CSV_SQL_TYPES,
    ExportError,
    csv_escape,
    export_run,
)
from llmscope.store.db import Store
from tests.helpers.cli import cli
from tests.helpers.paths import SHARED
from tests.helpers.tinymodel import make_tiny_model, run_plan, tiny_backend

# Every built-in suite that ships its items (the loaders of full corpora are added below when present).
BUILTIN = [n for n in builtin_names() if n not in EXTERNAL_SUITES]
TEXT = {
    "run_id",
    "model",
    "suite",
    "suite_id",
    "task",
    "method",
    "item_id",
    "variant",
    "prediction",
    "gold",
    "chosen_option",
    "error",
    "prompt",
    "probs",
    "top_tokens",
    "option_scores",
    "option_logprobs",
    "extra",
}
FLOAT = {"correct", "confidence", "p_yes", "p_no", "p_other", "chosen_prob", "latency_ms"}


@pytest.fixture(scope="module")
def runs_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """One database holding a short tiny-model run of every built-in suite."""
    tmp = tmp_path_factory.mktemp("export")
    db = tmp / "runs.duckdb"
    model, tok = make_tiny_model(tmp)
    names = list(BUILTIN)
    # The loaders of the full third-party corpora, when ../shared holds them.
    for name in ("worldsense", "commonsense", "cfc"):
        if (SHARED / "data" / name).is_dir():
            names.append(name)
    ids: dict[str, str] = {}
    with Store(db) as store:
        for name in names:
            backend = tiny_backend(tmp, model, tok, batch_size=8)
            opts: dict[str, Any] = (
                {"max_new_tokens": 4}
                if name in ("generation-sample", "cfc", "contamination-sample")
                else {}
            )
            if name == "cfc":
                opts["n"] = 2
            plan = RunPlan(
                suite=load_suite(name),
                model_label="tiny",
                model_arg="tiny",
                limit=2 if name in ("commonsense", "cfc") else 4,
                task_options=opts,
            )

            ids[name] = run_plan(plan, backend, store).run_id
    return db, ids


def _expected(db: Path, run_id: str) -> pd.DataFrame:
    con = duckdb.connect(str(db), read_only=True)
    df = con.execute(
        "SELECT r.*, u.model, u.suite_name, u.task FROM results r JOIN runs u USING (run_id) "
        "WHERE run_id = ? ORDER BY seq",
        [run_id],
    ).df()
    con.close()
    return df


def _same(a: Any, b: Any) -> bool:
    none_a = a is None or (isinstance(a, float) and math.isnan(a))
    none_b = b is None or (isinstance(b, float) and math.isnan(b))
    if none_a or none_b:
        return none_a and none_b
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0)
    return bool(a == b)


def _check_frame(got: pd.DataFrame, exp: pd.DataFrame, csv: bool = False) -> None:
    assert list(got.columns) == COLUMNS
    assert len(got) == len(exp) > 0
    if csv:  # CSV cannot tell an empty string from a missing value: both are an empty cell
        exp = exp.astype(object).where(exp != "", None)
    for g, e in zip(got.to_dict(orient="records"), exp.to_dict(orient="records"), strict=True):
        for col, ecol in (
            ("item_id", "item_id"),
            ("variant", "variant"),
            ("prediction", "prediction"),
            ("gold", "gold"),
            ("correct", "correct"),
            ("p_yes", "p_yes"),
            ("p_no", "p_no"),
            ("p_other", "other"),
            ("confidence", "confidence"),
            ("prompt", "prompt"),
            ("model", "model"),
            ("suite", "suite_name"),
            ("run_id", "run_id"),
        ):
            assert _same(g[col], e[ecol]), (col, g[col], e[ecol])
        for col in TEXT:
            assert (
                g[col] is None
                or isinstance(g[col], str)
                or (isinstance(g[col], float) and math.isnan(g[col]))
            ), col
        probs = json.loads(e["probs"]) if isinstance(e["probs"], str) else None
        if e["task"] in ("yesno", "choice", "rating", "constrained") and _same(e["error"], None):
            assert g["chosen_option"] == e["prediction"]
            assert _same(g["chosen_prob"], probs.get(e["prediction"]) if probs else None)
        else:
            assert _same(g["chosen_option"], None)
        assert g["method"]


def _column_types(select: str, first: int | None = None) -> dict[str, str]:
    """Column name -> type as DuckDB reads the exported file back (the first `first` columns)."""
    con = duckdb.connect()
    try:
        described = con.execute(f"DESCRIBE {select}").fetchall()
    finally:
        con.close()
    return {c: t for c, t, *_ in described[:first]}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_every_builtin_suite_exports_and_loads_back(
    runs_db: tuple[Path, dict[str, str]], tmp_path: Path, fmt: str
) -> None:
    db, ids = runs_db
    for name, run_id in ids.items():
        out = tmp_path / f"{name}.{fmt}"
        with Store(db, read_only=True) as st:
            run = st.find_run(run_id)
            assert run is not None
            export_run(st, run, fmt, str(out), raw=True)  # escaping is tested below
        exp = _expected(db, run_id)
        if fmt == "parquet":
            got = pd.read_parquet(out)
            types = _column_types(f"SELECT * FROM '{out}'", first=len(COLUMNS))
        elif fmt == "csv":
            got = pd.read_csv(out, dtype=CSV_DTYPES, keep_default_na=False, na_values=[""])
            got = got.astype(object).where(got.notna(), None)
            types = _column_types(f"SELECT * FROM read_csv('{out}', types={CSV_SQL_TYPES!r})")
        else:
            recs = [json.loads(line) for line in out.read_text().splitlines()]
            for (
                r
            ) in recs:  # nested detail is JSON in the file; compare as JSON text like the others
                for c in ("probs", "top_tokens", "option_scores", "option_logprobs", "extra"):
                    r[c] = None if r[c] is None else json.dumps(r[c])
            got = pd.DataFrame(recs, columns=COLUMNS).astype(object)
            types = _column_types(f"SELECT * FROM read_json_auto('{out}')")
        _check_frame(got, exp, csv=fmt == "csv")
        for c in ("prediction", "gold", "item_id"):
            if fmt != "jsonl" or types.get(c) != '"NULL"':
                assert types[c] == "VARCHAR", (name, fmt, c, types[c])
        for c in ("p_yes", "p_no", "p_other", "correct"):
            assert (
                types[c] in ("DOUBLE", "BIGINT", '"NULL"', "JSON")
                if fmt == "jsonl"
                else types[c] == "DOUBLE"
            ), (name, fmt, c, types[c])


def _hostile_db(tmp: Path) -> Path:
    db = tmp / "h.duckdb"
    with Store(db) as st:
        st.create_run(
            {
                "run_id": "r1",
                "suite_id": "s@1",
                "suite_name": "s",
                "task": "choice",
                "n_total": 5,
                "model": "m",
            }
        )
        preds = [
            '=HYPERLINK("http://x")',
            "+1",
            "-5",
            "@SUM(A1)",
            "\tx",
            "\rx",
            "5",
            "9.99",
            "TRUE",
            "plain",
        ]
        st.write_results(
            "r1",
            [
                Result(
                    item_id=str(i),
                    variant="v",
                    prompt=p,
                    prediction=p,
                    gold="5",
                    probs={p: 0.25, "other": 0.75},
                    correct=float(p == "5"),
                )
                for i, p in enumerate(preds)
            ],
        )
    return db


def test_text_stays_text_and_csv_escapes_formulas(tmp_path: Path) -> None:
    db = _hostile_db(tmp_path)
    with Store(db, read_only=True) as st:
        run = st.find_run("r1")
        assert run is not None
        for fmt in ("jsonl", "csv", "parquet"):
            export_run(st, run, fmt, str(tmp_path / f"o.{fmt}"))
        export_run(st, run, "csv", str(tmp_path / "raw.csv"), raw=True)
    jl = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["prediction"] for r in jl][6:9] == ["5", "9.99", "TRUE"]
    assert all(r["gold"] == "5" and r["chosen_prob"] == 0.25 for r in jl)
    pq = pd.read_parquet(tmp_path / "o.parquet")
    assert list(pq["prediction"]) == [r["prediction"] for r in jl]
    # CSV: a spreadsheet sees text cells that start with = + - @ tab CR as formulas: prefixed with '
    cs = pd.read_csv(tmp_path / "o.csv", dtype=CSV_DTYPES, keep_default_na=False)
    assert list(cs["prediction"]) == [
        '\'=HYPERLINK("http://x")',
        "'+1",
        "'-5",
        "'@SUM(A1)",
        "'\tx",
        "'\rx",
        "5",
        "9.99",
        "TRUE",
        "plain",
    ]
    raw = pd.read_csv(tmp_path / "raw.csv", dtype=CSV_DTYPES, keep_default_na=False)
    assert list(raw["prediction"]) == list(pq["prediction"])
    # numbers are not escaped: correct stays a number column
    assert list(cs["correct"]) == [0.0] * 6 + [1.0, 0.0, 0.0, 0.0]
    assert csv_escape("-x") == "'-x" and csv_escape("x-") == "x-"


def test_refuses_overwrite_and_bad_paths(tmp_path: Path) -> None:
    db = _hostile_db(tmp_path)
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0:root:/root:/bin/bash\n")
    base = ("export", "--db", str(db), "--run", "r1", "--format", "csv", "-o")
    r = cli(*base, str(victim))
    assert r.returncode == 2 and "exists; pass --force" in r.stderr and "Traceback" not in r.stderr
    assert victim.read_text() == "root:x:0:0:root:/root:/bin/bash\n"
    r = cli(*base, str(victim), "--force")
    assert r.returncode == 0 and victim.read_text().startswith("run_id,")
    r = cli(*base, str(tmp_path))
    assert (
        r.returncode == 2
        and "is a directory" in r.stderr
        and len(r.stderr.strip().splitlines()) == 1
    )
    r = cli(*base, str(tmp_path / "no" / "such" / "x.csv"))
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "no").exists()
    assert (
        sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    )  # no temp left


def _limit_file_size() -> None:
    # A real kernel write failure, as a full disk gives (EFBIG here instead of ENOSPC).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE semantics are Linux's")
def test_write_failure_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    db = _hostile_db(tmp_path)
    out = tmp_path / "big.jsonl"
    r = cli("export", "--db", str(db), "--run", "r1", "-o", str(out), preexec_fn=_limit_file_size)
    assert r.returncode == 2, r.stderr
    assert "cannot write" in r.stderr and "file too large; nothing was written" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert (
        not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".big")] == []
    )


def _mount(*args: str) -> bool:
    # Real EROFS/ENOSPC need real mounts (root in a container that allows them), as in
    # tests/test_reliability_db.py; elsewhere the two tests below are skipped with the reason.
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def test_read_only_file_system(tmp_path: Path) -> None:
    db = _hostile_db(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    if not (_mount("--bind", str(ro), str(ro)) and _mount("-o", "remount,ro,bind", str(ro))):
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)
        pytest.skip("needs `mount -o remount,ro,bind` (root in a container that allows mounts)")
    try:
        r = cli("export", "--db", str(db), "--run", "r1", "-o", str(ro / "x.jsonl"))
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)
    assert r.returncode == 2 and "read-only file system; nothing was written" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_full_disk(tmp_path: Path) -> None:
    db = _hostile_db(tmp_path)
    full = tmp_path / "full"
    full.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)):
        pytest.skip(
            "needs `mount -t tmpfs` (root in a container that allows mounts) for a full disk"
        )
    try:
        (full / "ballast").write_bytes(os.urandom(60 * 1024))
        r = cli("export", "--db", str(db), "--run", "r1", "-o", str(full / "x.jsonl"))
        left = sorted(p.name for p in full.iterdir())
    finally:
        subprocess.run(["umount", "-l", str(full)], capture_output=True)
    assert r.returncode == 2 and "disk full; nothing was written" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert left == ["ballast"]  # no partial file, no temp file


def _sample_run(st: Store, n_total: int) -> Any:
    """The commonsense-sample suite stored with an empty yes/no run "r1" of it; the suite."""
    suite = load_suite("commonsense-sample")
    st.add_suite(suite.suite_id, suite.name, suite.task, suite.spec, "", suite.items())
    st.create_run(
        {
            "run_id": "r1",
            "suite_id": suite.suite_id,
            "suite_name": suite.name,
            "task": "yesno",
            "n_total": n_total,
            "model": "m",
            "backend": "hf",
        }
    )
    return suite


def test_lm_eval_shape(tmp_path: Path) -> None:
    db = tmp_path / "l.duckdb"
    with Store(db) as st:
        suite = _sample_run(st, 6)
        items = suite.items()[:3]
        rows = []
        for i, it in enumerate(items):
            for v, gold in (("q1", it.gold), ("q3", None)):
                py = 0.2 + 0.3 * i
                pred = "yes" if py > 0.5 else "no"
                rows.append(
                    Result(
                        item_id=it.item_id,
                        variant=v,
                        prompt=f"P{i}{v}",
                        probs={"yes": py, "no": 0.4},
                        other=0.6 - py if py < 0.6 else 0.0,
                        prediction=pred,
                        gold=gold,
                        correct=None if gold is None else float(pred == gold),
                    )
                )
        st.write_results("r1", rows)
        run = st.find_run("r1")
        assert run is not None
        export_run(st, run, "lm-eval", str(tmp_path / "lm"))
        with pytest.raises(ExportError, match="exists; pass --force"):
            export_run(st, run, "lm-eval", str(tmp_path / "lm"))
        from llmscope.report import build_report

        report = build_report(st, run)
    files = sorted(p.name for p in (tmp_path / "lm").iterdir())
    assert files == [
        "results_r1.json",
        "samples_commonsense-sample_q1_r1.jsonl",
        "samples_commonsense-sample_q3_r1.jsonl",
    ]
    res = json.loads((tmp_path / "lm" / "results_r1.json").read_text())
    q1 = [r for r in rows if r.variant == "q1"]
    acc = [r.correct for r in q1]
    mean = sum(acc) / 3  # type: ignore[arg-type]
    se = (sum((a - mean) ** 2 for a in acc) / 2) ** 0.5 / 3**0.5  # type: ignore[operator]
    block = res["results"]["commonsense-sample_q1"]
    assert block["alias"] == "commonsense-sample_q1"
    assert block["acc,none"] == pytest.approx(mean) and block["acc_stderr,none"] == pytest.approx(
        se
    )
    assert res["results"]["commonsense-sample_q3"]["acc,none"] is None  # no gold: no accuracy
    # the same accuracy `llmscope report` prints for the variant
    acc_rows = {
        json.dumps(r["group"], sort_keys=True): r["value"]
        for r in report
        if r["metric"] == "accuracy"
    }
    assert block["acc,none"] == pytest.approx(
        acc_rows["{}"]
    )  # q3 has no gold: the run's accuracy is q1's
    assert res["groups"]["commonsense-sample"]["acc,none"] == pytest.approx(acc_rows["{}"])
    assert res["n-samples"]["commonsense-sample_q1"] == {"original": 243, "effective": 3}
    assert res["group_subtasks"] == {
        "commonsense-sample": ["commonsense-sample_q1", "commonsense-sample_q3"]
    }
    samples = [
        json.loads(x)
        for x in (tmp_path / "lm" / "samples_commonsense-sample_q1_r1.jsonl")
        .read_text()
        .splitlines()
    ]
    idx = {it.item_id: n for n, it in enumerate(suite.items())}
    for s, r, it in zip(samples, q1, items, strict=True):
        assert s["doc_id"] == idx[it.item_id] and s["doc"]["statement"] == it.fields["statement"]
        # lm-eval's tracker writes the target and every response value as text
        assert s["target"] == str(["yes", "no"].index(it.gold))  # type: ignore[arg-type]
        assert s["arguments"]["gen_args_0"] == {"arg_0": r.prompt, "arg_1": "yes"}
        assert float(s["filtered_resps"][0][0]) == pytest.approx(math.log(r.probs["yes"]))  # type: ignore[index]
        assert s["resps"][0] == [s["filtered_resps"][0]] and s["filtered_resps"][0][1] == "None"
        assert s["acc"] == r.correct and s["metrics"] == ["acc"]


def test_one_error_row_keeps_the_other_rows_choices(tmp_path: Path) -> None:
    """A run with one error row: every answered row still exports its chosen option and its
    probability (a missing error reads NaN in pandas' string dtype, not None), and the
    WorldSense shape writes "" for the error row and a row without an answer, never NaN."""
    db = tmp_path / "e.duckdb"
    with Store(db) as st:
        items = _sample_run(st, 4).items()[:4]
        rows = [
            Result(
                item_id=it.item_id,
                variant="q1",
                probs={"yes": 0.1 + 0.2 * i, "no": 0.5},
                other=0.0,
                prediction="yes" if 0.1 + 0.2 * i > 0.5 else "no",
                gold=it.gold,
            )
            for i, it in enumerate(items[:2])
        ]
        rows.append(Result(item_id=items[2].item_id, variant="q1", error="timeout"))
        rows.append(
            Result(item_id=items[3].item_id, variant="q1", probs={"yes": 0.3, "no": 0.3})
        )  # no answer
        st.write_results("r1", rows)
        run = st.find_run("r1")
        assert run is not None
        for fmt in ("jsonl", "csv", "worldsense"):
            export_run(st, run, fmt, str(tmp_path / f"out.{fmt}"))
    recs = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(r["chosen_option"], r["chosen_prob"], r["error"]) for r in recs] == [
        ("no", 0.5, None),
        ("no", 0.5, None),
        (None, None, "timeout"),
        (None, None, None),
    ]
    got = pd.read_csv(tmp_path / "out.csv", dtype=CSV_DTYPES)
    assert got["chosen_option"].tolist()[:2] == ["no", "no"] and got["chosen_prob"].tolist()[
        :2
    ] == [0.5, 0.5]
    ws = [json.loads(x) for x in (tmp_path / "out.worldsense").read_text().splitlines()]
    assert [w["resp"] for w in ws] == ["no", "no", "", ""]
