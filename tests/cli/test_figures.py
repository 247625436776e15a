"""`llmscope figure`: the plotted values read back from the drawn figure (not pixels) against
numbers computed by hand from the rows that generated the database, and `report --json`."""

from __future__ import annotations

import json
import math
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmscope.figures.make import load_runs, write_figure
from llmscope.store.db import Store
from tests.helpers.cli import cli
from tests.helpers.tui import expected_accuracy, make_db, p_yes_for

N = 12


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_db(
        tmp_path_factory.mktemp("fig") / "t.duckdb",
        n_items=N,
        runs=(("run-a", "model-A", 0), ("run-b", "model-B", 13)),
    )


def _report(db: Path, run: str) -> list[dict[str, Any]]:
    out = cli("report", "--db", str(db), "--run", run, "--json")
    assert out.returncode == 0, out.stderr
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def _hand_rows(shift: int = 0) -> list[tuple[float, float]]:
    """(confidence, correct) of every row, from the rule tests/helpers/tui.py writes them by
    (both variants score alike)."""
    out = []
    for i in range(N):
        py = p_yes_for(i, shift)
        pn = round(0.9 - py, 6)
        pred = "yes" if py > pn else "no"
        out += [(max(py, pn) / (py + pn), float(pred == ("yes" if i % 2 == 0 else "no")))] * 2
    return out


def _hand_bins(rows: list[tuple[float, float]]) -> dict[int, tuple[int, float, float]]:
    """bin -> (count, mean confidence, accuracy) over ten bins [k/10, (k+1)/10)."""
    bins: dict[int, list[tuple[float, float]]] = {}
    for c, y in rows:
        k = min(9, int(math.floor(round(c * 10, 9))))
        bins.setdefault(k, []).append((c, y))
    return {
        k: (len(v), sum(c for c, _ in v) / len(v), sum(y for _, y in v) / len(v))
        for k, v in bins.items()
    }


def _draw(db: Path, kind: str, runs: list[str], path: Path, **kw: Any) -> Any:
    with Store(db, read_only=True) as st:
        data = load_runs(st, [st.find_run(r) for r in runs])
        return write_figure(kind, data, path, **kw)


def _figure_cli(
    kind: str, db: Path, out: Path, *extra: str, runs: tuple[str, ...] = ("run-a",)
) -> subprocess.CompletedProcess[str]:
    """`llmscope figure KIND --db DB --run RUN ... -o OUT EXTRA` as a subprocess."""
    run_args = [a for r in runs for a in ("--run", r)]
    return cli("figure", kind, "--db", str(db), *run_args, "-o", str(out), *extra)


def test_reliability_diagram_plots_the_bins_computed_by_hand(db: Path, tmp_path: Path) -> None:
    bins = _hand_bins(_hand_rows())
    n = sum(c for c, _, _ in bins.values())
    ece = sum(c * abs(a - m) for c, m, a in bins.values()) / n
    # the pipeline's rows (report --json) hold the same bins
    rows = _report(db, "run-a")
    got = {(r["metric"], r["group"]["bin"]): r for r in rows if r["metric"].startswith("bin_")}
    assert {k for _, k in got} == {f"{k / 10:.1f}-{(k + 1) / 10:.1f}" for k in bins}
    for k, (count, conf, acc) in bins.items():
        label = f"{k / 10:.1f}-{(k + 1) / 10:.1f}"
        assert got[("bin_accuracy", label)]["value"] == pytest.approx(acc, abs=1e-12)
        assert got[("bin_confidence", label)]["value"] == pytest.approx(conf, abs=1e-12)
        assert got[("bin_accuracy", label)]["n"] == count
    # the figure: the line is (mean confidence, accuracy) per bin, the bars the bin counts
    fig = _draw(db, "reliability", ["run-a"], tmp_path / "rel.svg")
    ax, axn = fig.axes
    line = next(ln for ln in ax.get_lines() if ln.get_gid() == "reliability:0")
    order = sorted(bins)
    np.testing.assert_allclose(line.get_xdata(), [bins[k][1] for k in order], atol=1e-12)
    np.testing.assert_allclose(line.get_ydata(), [bins[k][2] for k in order], atol=1e-12)
    assert [p.get_height() for p in axn.patches] == [bins[k][0] for k in order]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(f"ECE {ece:.3f}" in t for t in legend), legend
    # the SVG file names its data: one id per bin count bar
    svg = ET.parse(tmp_path / "rel.svg").getroot()
    ids = {e.get("id") for e in svg.iter() if e.get("id")}
    assert {f"reliability-counts:0:{j}" for j in range(len(bins))} <= ids
    assert "reliability:0" in ids


def _bars(ax: Any) -> list[Any]:
    from matplotlib.container import BarContainer

    return [c for c in ax.containers if isinstance(c, BarContainer)]


def test_accuracy_bars_and_intervals_are_the_report_rows(db: Path, tmp_path: Path) -> None:
    rows = [r for r in _report(db, "run-a") if r["metric"] == "accuracy"]
    assert rows[0]["group"] == {} and rows[0]["value"] == pytest.approx(expected_accuracy(N))
    fig = _draw(db, "accuracy", ["run-a"], tmp_path / "acc.pdf")
    ax = fig.axes[0]
    (bars,) = _bars(ax)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    want = {(", ".join(f"{k}: {v}" for k, v in r["group"].items()) or "overall"): r for r in rows}
    assert labels == list(want)
    np.testing.assert_allclose(bars.datavalues, [r["value"] for r in want.values()], atol=1e-12)
    segs = bars.errorbar.lines[2][0].get_segments()
    for seg, r in zip(segs, want.values(), strict=True):
        assert seg[0][0] == pytest.approx(r["ci95"][0], abs=1e-12)
        assert seg[1][0] == pytest.approx(r["ci95"][1], abs=1e-12)
    # fonts embedded as TrueType (Type 42), none as Type 3 bitmaps
    pdf = (tmp_path / "acc.pdf").read_bytes()
    assert b"/FontFile2" in pdf and b"/Type3" not in pdf


def test_two_runs_overlay_as_two_series(db: Path, tmp_path: Path) -> None:
    out = _figure_cli("accuracy", db, tmp_path / "a.png", runs=("run-a", "run-b"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = _draw(db, "accuracy", ["run-a", "run-b"], tmp_path / "b.svg")
    a, b = _bars(fig.axes[0])
    assert a.datavalues[0] == pytest.approx(expected_accuracy(N))
    assert b.datavalues[0] == pytest.approx(expected_accuracy(N, shift=13))
    assert [a.get_label(), b.get_label()] == ["model-A (run-a)", "model-B (run-b)"]


def test_human_scatter_is_p_yes_against_human_agreement(db: Path, tmp_path: Path) -> None:
    fig = _draw(db, "human", ["run-a"], tmp_path / "h.svg")
    ax = fig.axes[0]
    pts = sorted(map(tuple, ax.collections[0].get_offsets().tolist()))
    want = sorted((1.0 if i % 2 == 0 else 0.0, p_yes_for(i)) for i in range(N))
    np.testing.assert_allclose(pts, want, atol=1e-9)
    r = [x for x in _report(db, "run-a") if x["metric"] == "human_pearson"][0]
    assert f"r {r['value']:.3f}" in ax.get_legend().get_texts()[0].get_text()


def test_position_shows_predicted_and_gold_yes_rates(db: Path, tmp_path: Path) -> None:
    rows = _report(db, "run-a")
    fig = _draw(db, "position", ["run-a"], tmp_path / "p.svg")
    model, gold = _bars(fig.axes[0])
    want_pred = {
        (r["group"].get("variant") or "overall"): r["value"]
        for r in rows
        if r["metric"] == "pred_yes_rate"
    }
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    np.testing.assert_allclose(model.datavalues, [want_pred[x] for x in labels])
    hand = sum(p_yes_for(i) > 0.9 - p_yes_for(i) for i in range(N)) / N
    assert model.datavalues[0] == pytest.approx(hand)
    assert gold.datavalues[0] == pytest.approx(0.5)  # every other item's gold is yes


def test_a_kind_that_does_not_apply_names_those_that_do(db: Path, tmp_path: Path) -> None:
    out = _figure_cli("sg", db, tmp_path / "x.svg")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert "kinds that do: accuracy, reliability, position, human, commonsense" in out.stderr
    assert not (tmp_path / "x.svg").exists()
    bad = _figure_cli("accuracy", db, tmp_path / "x.jpg")
    assert bad.returncode == 2 and "must end in .pdf, .svg or .png" in bad.stderr
    style = _figure_cli("accuracy", db, tmp_path / "x.svg", "--style", "no-such-style")
    assert style.returncode == 2 and "--style no-such-style" in style.stderr
    gone = _figure_cli("accuracy", db, tmp_path / "no" / "x.pdf")
    assert gone.returncode == 2 and "cannot write: No such file or directory" in gone.stderr
    assert "Traceback" not in gone.stderr


def test_style_file_overrides_the_defaults(db: Path, tmp_path: Path) -> None:
    sty = tmp_path / "journal.mplstyle"
    sty.write_text("axes.labelsize: 13\nfont.family: serif\n")
    fig = _draw(db, "accuracy", ["run-a"], tmp_path / "s.svg", style=str(sty))
    assert fig.axes[0].xaxis.label.get_fontsize() == 13
    plain = _draw(db, "accuracy", ["run-a"], tmp_path / "p.svg")
    assert plain.axes[0].xaxis.label.get_fontsize() == 8
    # the same data gives the same file (no timestamp)
    again = tmp_path / "p2.svg"
    _draw(db, "accuracy", ["run-a"], again)
    assert again.read_bytes() == (tmp_path / "p.svg").read_bytes()
    assert not re.search(rb"<dc:date>", again.read_bytes())


@pytest.mark.slow
def test_syntaxgym_figures_plot_the_stored_surprisals(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import duckdb

    from tests.helpers.cli import syntax_sample_db

    db = syntax_sample_db(tmp_path)
    con = duckdb.connect(str(db), read_only=True)
    (rid,) = con.execute("SELECT run_id FROM runs").fetchone()
    extra = json.loads(
        con.execute("SELECT extra FROM results WHERE item_id = 'agr01'").fetchone()[0]
    )
    con.close()
    fig = _draw(db, "surprisal", [rid], tmp_path / "s.svg", item="agr01")
    conds = extra["conditions"]
    assert [ax.get_title(loc="left").split(": ")[-1] for ax in fig.axes] == list(conds)
    for ax, (_, c) in zip(fig.axes, conds.items(), strict=True):
        (bars,) = _bars(ax)
        np.testing.assert_allclose(bars.datavalues, [w["surprisal_bits"] for w in c["words"]])
        assert [t.get_text() for t in ax.get_xticklabels()] == [w["word"] for w in c["words"]]
    sg = [r for r in _report(db, rid) if r["metric"] == "sg_score"]
    fig = _draw(db, "sg", [rid], tmp_path / "sg.pdf")
    (bars,) = _bars(fig.axes[0])
    np.testing.assert_allclose(bars.datavalues, [r["value"] for r in sg])


@pytest.mark.slow
def test_probeval_bars_are_the_smoothed_cluster_shares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built-in probeval-oneshot items, model samples that are human answers or match none;
    exact matching (no embedding model): each bar is (count + 1) / (N + K) by hand."""
    import llmscope.analysis.probeval_run as pr
    from llmscope.analysis.metrics import run_metrics
    from llmscope.data.suites import load_suite
    from llmscope.engine.types import Result

    monkeypatch.setattr(pr, "default_embedder", lambda: None)
    suite = load_suite("probeval-oneshot")
    items = suite.items()[:3]
    samples = {}
    db = tmp_path / "pe.duckdb"
    with Store(db) as st:
        st.add_suite(suite.suite_id, "probeval-oneshot", "generation", suite.spec, "tests", items)
        st.create_run(
            {
                "run_id": "g1",
                "suite_id": suite.suite_id,
                "suite_name": "probeval-oneshot",
                "task": "generation",
                "n_total": len(items),
                "model": "m",
                "status": "completed",
            }
        )
        res = []
        for k, it in enumerate(items):
            samples[it.item_id] = list(it.fields["raw"])[: 1 + k] + ["zzz unmatched"] * 2
            res.append(
                Result(
                    item_id=it.item_id,
                    variant="default",
                    prompt="p",
                    prediction=samples[it.item_id][0],
                    extra={"samples": [{"text": s} for s in samples[it.item_id]]},
                )
            )
        st.write_results("g1", res)
    with Store(db, read_only=True) as st:
        run = st.get_run("g1")
        kl = run_metrics(st, run, cache=False).get("probeval_kl")
        fig = _draw(db, "probeval", ["g1"], tmp_path / "pe.svg")
    ax = fig.axes[0]
    assert fig.get_suptitle() == f"probeval_kl {kl.value:.3f} [{kl.lo:.3f}, {kl.hi:.3f}]"
    widths = {p.get_gid().rsplit(":", 1)[0]: p.get_width() for p in ax.patches}
    for it in items:
        clusters = {c: v["answers"] for c, v in it.fields["clusters"].items()}
        human = {c: sum(it.fields["raw"].get(a, 0) for a in ans) for c, ans in clusters.items()}
        model = {c: sum(s in ans for s in samples[it.item_id]) for c, ans in clusters.items()}
        model["wrong"] = sum(
            not any(s in ans for ans in clusters.values()) for s in samples[it.item_id]
        )
        human["wrong"] = 0
        k = len(clusters) + 1
        for who, counts in (("human", human), ("model", model)):
            n = sum(counts.values())
            for c, v in counts.items():
                assert widths[f"probeval:{it.item_id}:{who}:{c}"] == pytest.approx(
                    (v + 1) / (n + k)
                ), (who, c)


def test_commonsense_bars_are_the_report_rows(db: Path, tmp_path: Path) -> None:
    rows = _report(db, "run-a")
    fig = _draw(db, "commonsense", ["run-a"], tmp_path / "c.svg")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["overall", "category: animals", "category: food", "category: weather"]
    for bars, name in zip(_bars(ax), ("consensus", "awareness", "commonsensicality"), strict=True):
        assert bars.get_label() == name
        want = {
            (", ".join(f"{k}: {v}" for k, v in r["group"].items()) or "overall"): r
            for r in rows
            if r["metric"] == name
        }
        np.testing.assert_allclose(bars.datavalues, [want[x]["value"] for x in labels])
    # consensus by hand: statements whose q1 answer (P(yes) > P(no)) is the human majority
    hand = sum((p_yes_for(i) > 0.9 - p_yes_for(i)) == (i % 2 == 0) for i in range(N)) / N
    assert _bars(ax)[0].datavalues[0] == pytest.approx(hand)


@pytest.mark.slow
def test_worldsense_bias_per_problem_is_the_report_rows(tmp_path: Path) -> None:
    from tests.helpers.paths import shared_path

    folder = shared_path("data", "worldsense", "test_set")
    db = tmp_path / "ws.duckdb"
    out = cli("import", "worldsense", str(folder), "--db", str(db))
    assert out.returncode == 0, out.stderr
    with Store(db, read_only=True) as st:
        rid = str(st.runs()["run_id"].iloc[0])
    rows = [r for r in _report(db, rid) if r["metric"] == "worldsense_bias"]
    fig = _draw(db, "position", [rid], tmp_path / "ws.svg")
    ax = fig.axes[-1]
    (bars,) = _bars(ax)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    want = {r["group"]["problemname"]: r for r in rows}
    assert sorted(labels) == sorted(want) and len(labels) == 6
    np.testing.assert_allclose(bars.datavalues, [want[x]["value"] for x in labels])
    segs = bars.errorbar.lines[2][0].get_segments()
    np.testing.assert_allclose([s[0][0] for s in segs], [want[x]["ci95"][0] for x in labels])
    _assert_inside("position", fig)  # the bias axis's label once ran past the right edge


def _assert_inside(kind: str, fig: Any) -> None:
    """Everything drawn (drawn ticks and labels, titles, legends) lies inside the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # laid out again as when saved
    canvas.draw()
    drawn, page = fig.get_tightbbox(canvas.get_renderer()), fig.bbox_inches  # inches
    tol = 0.02
    assert drawn.x0 >= page.x0 - tol and drawn.x1 <= page.x1 + tol, (kind, drawn, page)
    assert drawn.y0 >= page.y0 - tol and drawn.y1 <= page.y1 + tol, (kind, drawn, page)


def test_every_label_lies_inside_the_figure(db: Path, tmp_path: Path) -> None:
    """A figure is one column wide with no tight box: a label longer than the column is cut at
    the edge (the reliability diagram's x label once ended in "renormalised over the an").
    Everything drawn in every kind for a yes/no run lies inside the saved figure."""
    from llmscope.figures.make import kinds_for

    with Store(db, read_only=True) as st:
        data = load_runs(st, [st.find_run("run-a")])
        kinds = kinds_for(data[0])
        figs = {k: write_figure(k, data, tmp_path / f"{k}.svg") for k in kinds}
    assert "reliability" in kinds
    for kind, fig in figs.items():
        _assert_inside(kind, fig)
