"""IRT's exports: `llmscope irt --format csv|json -o FILE`, the notebook's `db.irt()` and the
`llmscope figure irt` item map all carry the numbers `llmscope irt --json` prints, on a real
DuckDB file with one label flipped on purpose (tests/helpers/irt.py). Expected values are the
CLI's JSON, read independently (the csv module, pandas, the SVG's named points)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

import llmscope
from llmscope.analysis.irt import ABILITY_COLUMNS, ITEM_COLUMNS
from llmscope.cli import main
from llmscope.notebook import NotebookError
from tests.helpers.cli import cli
from tests.helpers.irt import FLIPPED, N_RUNS, write_flipped_db


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("irt-out") / "flip.duckdb"
    write_flipped_db(path)
    return path


@pytest.fixture(scope="module")
def fits(db: Path) -> list[dict[str, Any]]:
    """`llmscope irt --json` in a subprocess: the numbers every other surface must carry (2PL
    only: mirt's Rasch fit, a constrained model, takes about 20 s on this file)."""
    proc = cli("irt", "--db", str(db), "--suite", "flipped", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [f["model"] for f in out] == ["2pl"]
    return out


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The CLI in this process (each subprocess pays the imports again)."""
    capsys.readouterr()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _clean_error(res: tuple[int, str, str], *needles: str) -> None:
    rc, _, err = res
    assert rc == 2 and err.startswith("llmscope: error:") and "Traceback" not in err, err
    assert err.count("\n") == 1, err
    for n in needles:
        assert n.lower() in err.lower(), (n, err)


def _num(s: str) -> float | None:
    return None if s == "" else float(s)


def test_csv_and_json_files_hold_the_fit(
    db: Path, fits: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items_csv, ab_csv, js = tmp_path / "items.csv", tmp_path / "ab.csv", tmp_path / "fit.json"
    base = ["irt", "--db", str(db), "--suite", "flipped"]
    for args in (
        ["--format", "csv", "-o", str(items_csv)],
        ["--format", "csv", "--table", "abilities", "-o", str(ab_csv)],
        ["--format", "json", "-o", str(js)],
    ):
        rc, out, err = _run(capsys, *base, *args)
        assert rc == 0, err
        assert "wrote the IRT" in err and out == ""
    assert json.loads(js.read_text(encoding="utf-8")) == fits
    rows = list(csv.DictReader(io.StringIO(items_csv.read_text(encoding="utf-8"))))
    assert list(rows[0]) == ITEM_COLUMNS
    want = [(f["model"], i) for f in fits for i in f["items"]]
    assert len(rows) == len(want)
    for r, (model, i) in zip(rows, want, strict=True):
        assert (r["irt_model"], r["item"]) == (model, i["item"])
        assert float(r["difficulty"]) == i["difficulty"]  # shortest exact float: equal, not close
        assert float(r["discrimination"]) == i["discrimination"]
        assert [_num(r["discrimination_lo"]), _num(r["discrimination_hi"])] == i[
            "discrimination_ci"
        ]
        assert [_num(r["difficulty_lo"]), _num(r["difficulty_hi"])] == i["difficulty_ci"]
        assert int(r["n"]) == i["n"] and float(r["p_correct"]) == i["p_correct"]
        assert r["flagged"] == ("true" if i["flagged"] else "false")
        p0 = 1 / (1 + math.exp(i["discrimination"] * i["difficulty"]))
        assert float(r["p_average"]) == pytest.approx(p0, abs=1e-12)
    flagged = [(r["irt_model"], r["item"]) for r in rows if r["flagged"] == "true"]
    assert flagged == [("2pl", FLIPPED)]
    assert "likely label error" in next(r["reading"] for r in rows if r["flagged"] == "true")
    rows = list(csv.DictReader(io.StringIO(ab_csv.read_text(encoding="utf-8"))))
    assert list(rows[0]) == ABILITY_COLUMNS and len(rows) == N_RUNS
    want_ab = [(f["model"], a) for f in fits for a in f["abilities"]]
    for r, (model, a) in zip(rows, want_ab, strict=True):
        assert (r["irt_model"], r["run_id"], r["model"]) == (model, a["run_id"], a["model"])
        assert [float(r["theta"]), float(r["theta_lo"]), float(r["theta_hi"])] == [
            a["theta"],
            *a["ci"],
        ]
    # stdout when no -o; the export's rules: never replace without --force; one-line errors
    rc, out, _ = _run(capsys, *base, "--format", "csv")
    # (on stdout CSV's CRLF line ends are written as the terminal's LF: the export's rule)
    assert rc == 0 and out == items_csv.read_bytes().decode("utf-8").replace("\r\n", "\n")
    _clean_error(_run(capsys, *base, "--format", "csv", "-o", str(items_csv)), "exists", "--force")
    assert _run(capsys, *base, "--format", "csv", "-o", str(items_csv), "--force")[0] == 0
    _clean_error(_run(capsys, *base, "--json", "--format", "csv"), "--json", "--format csv")
    _clean_error(_run(capsys, *base, "--table", "abilities"), "--table", "--format csv")
    _clean_error(_run(capsys, *base, "-o", str(tmp_path / "t.txt")), "-o", "json or csv")


def test_notebook_irt_frames_equal_the_cli(db: Path, fits: list[dict[str, Any]]) -> None:
    nb = llmscope.open(db)
    items, abilities = nb.irt(suite="flipped")
    (two,) = fits
    assert list(items.columns) == ITEM_COLUMNS and list(abilities.columns) == ABILITY_COLUMNS
    assert list(items["item"]) == [i["item"] for i in two["items"]]
    assert list(items["difficulty"]) == [i["difficulty"] for i in two["items"]]
    assert list(items["discrimination_lo"]) == [i["discrimination_ci"][0] for i in two["items"]]
    assert list(items.loc[items["flagged"], "item"]) == [FLIPPED]
    assert list(abilities["theta"]) == [a["theta"] for a in two["abilities"]]
    assert list(abilities["theta_hi"]) == [a["ci"][1] for a in two["abilities"]]
    assert items.attrs["method"]["2pl"] == two["method"]
    # the same runs named one by one give the same numbers; both models stack
    ids = [a["run_id"] for a in two["abilities"]]
    again = nb.irt(runs=ids)
    assert again.items.equals(items) and again.abilities.equals(abilities)
    with pytest.raises(NotebookError, match="one of them"):
        nb.irt()
    with pytest.raises(NotebookError, match="no run of suite"):
        nb.irt(suite="nope")
    with pytest.raises(NotebookError, match="at least 2 runs"):
        nb.irt(runs=ids[:1])
    with pytest.raises(NotebookError, match="model must be"):
        nb.irt(suite="flipped", model="3pl")


def test_item_map_figure_draws_the_fit(
    db: Path, fits: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmscope.figures.make import KINDS, FigureError, kinds_for, load_runs, make_figure
    from llmscope.store.db import Store

    (two,) = fits
    with Store(db, read_only=True) as st:
        runs = [st.get_run(a["run_id"]) for a in two["abilities"]]
        data = load_runs(st, [r for r in runs if r is not None])
        fig = make_figure("irt", data)
        with pytest.raises(FigureError, match="2 or more runs"):
            make_figure("irt", data[:1])
    assert "irt" not in kinds_for(data[0]) and KINDS["irt"].min_runs == 2  # never for one run
    (ax,) = fig.axes
    points = {}
    for coll in ax.collections:
        if coll.get_gid() in ("irt-items", "irt-flagged"):
            points[coll.get_gid()] = [tuple(map(float, p)) for p in coll.get_offsets()]
    want = {(i["difficulty"], i["discrimination"]) for i in two["items"] if not i["flagged"]}
    assert set(points["irt-items"]) == want
    (flag,) = [i for i in two["items"] if i["flagged"]]
    assert points["irt-flagged"] == [(flag["difficulty"], flag["discrimination"])]
    assert FLIPPED in [t.get_text() for t in ax.texts]
    out = tmp_path / "map.svg"
    rc, _, err = _run(
        capsys, "figure", "irt", "--db", str(db), "--suite", "flipped", "-o", str(out)
    )
    assert rc == 0, err
    svg = out.read_text(encoding="utf-8")
    assert 'id="irt-flagged"' in svg and 'id="irt-items"' in svg
    _clean_error(
        _run(capsys, "figure", "irt", "--db", str(db), "--run", "run00", "-o", str(out)),
        "2 or more runs",
    )
    _clean_error(_run(capsys, "figure", "irt", "--db", str(db), "-o", str(out)), "--run", "--suite")
