"""The figure gallery in docs/gallery/: every figure of every built-in suite on the embedded model.

    python -m bench.gallery [--db FILE] [--out docs/gallery]

Runs each built-in suite with the embedded model (SmolLM2-135M-Instruct) into ``--db`` (a
temporary file by default; a suite that already has a completed run there is not run again),
then draws every figure kind that applies to each run with `llmscope figure`'s code
(:func:`llmscope.figures.make.write_figure`) and writes ``GALLERY.md`` beside the SVGs. The numbers
are those of a 135M-parameter model on small sample suites: they show what the figures look
like, not how good any model is.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def builtin_suites() -> list[str]:
    """The suites shipped with llmscope (not the loaders of third-party corpora)."""
    from llmscope.data.registry import external_suite, suite_names

    return [n for n in suite_names() if external_suite(n) is None]


def ensure_runs(db: Path, suites: list[str]) -> dict[str, str]:
    """suite -> the newest completed run of it in ``db``, running the suites that have none."""
    from llmscope.cli import main
    from llmscope.store.db import Store

    def completed() -> dict[str, str]:
        if not db.exists():
            return {}
        with Store(db, read_only=True) as st:
            df = st.runs()
        df = df[df["status"] == "completed"].sort_values("started_at")
        return {str(r.suite_name): str(r.run_id) for r in df.itertuples()}

    have = completed()
    for s in suites:
        if s not in have:
            print(f"gallery: running {s} on the embedded model ...", file=sys.stderr)
            rc = main(["run", "--suite", s, "--db", str(db), "--quiet", "--no-report"])
            if rc != 0:
                raise SystemExit(f"gallery: llmscope run --suite {s} failed ({rc})")
    have = completed()
    return {s: have[s] for s in suites if s in have}


def draw(db: Path, runs: dict[str, str], out: Path) -> list[tuple[str, str, str, str]]:
    """Every applicable figure of each run as ``<suite>-<kind>.svg``; (suite, task, kind, file)."""
    from llmscope.figures.make import KINDS, kinds_for, load_runs, write_figure
    from llmscope.store.db import Store

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.svg"):
        old.unlink()
    made = []
    with Store(db, read_only=True) as st:
        for suite, rid in runs.items():
            (data,) = load_runs(st, [st.get_run(rid)])
            for kind in kinds_for(data):
                name = f"{suite}-{kind}.svg"
                write_figure(kind, [data], out / name)
                made.append((suite, str(data.run.get("task")), kind, name))
    assert set(KINDS) >= {k for _, _, k, _ in made}
    return made


def gallery_md(made: list[tuple[str, str, str, str]], model: str) -> str:
    """GALLERY.md: one section per suite, each figure with its kind and the command that draws it."""
    from llmscope.figures.make import KINDS

    lines = [
        "# Figure gallery",
        "",
        f"Every figure `llmscope figure` draws for each built-in suite, on the embedded model ({model}).",
        "Regenerate with `python -m bench.gallery` (it runs the suites, then draws the figures); the",
        "numbers are those of a 135M-parameter model on small sample suites and show what the figures",
        "look like, not how good a model is. Each figure is drawn at one column width (3.3 in), in the",
        "Okabe-Ito palette, from the metric rows `llmscope report --json` prints.",
        "",
        "| kind | what it shows |",
        "|---|---|",
        *[f"| `{k}` | {v.title} |" for k, v in KINDS.items()],
        "",
    ]
    suite = None
    for s, task, kind, name in made:
        if s != suite:
            lines += [f"## {s} ({task})", ""]
            suite = s
        lines += [
            f"`llmscope figure {kind} --run RUN -o {kind}.pdf`",
            "",
            f"![{s}: {kind}]({name})",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.gallery", description=__doc__.splitlines()[0]
    )
    ap.add_argument(
        "--db", help="database to run the suites into and draw from (default: a temporary file)"
    )
    ap.add_argument(
        "--out", default=str(ROOT / "docs" / "gallery"), help="folder for the SVGs and GALLERY.md"
    )
    args = ap.parse_args(argv)
    suites = builtin_suites()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "gallery.duckdb"
        runs = ensure_runs(db, suites)
        out = Path(args.out)
        made = draw(db, runs, out)
        from llmscope.store.db import Store

        with Store(db, read_only=True) as st:
            model = str(st.get_run(next(iter(runs.values())))["model"])
    (out / "GALLERY.md").write_text(gallery_md(made, model))
    size = sum(p.stat().st_size for p in out.iterdir())
    print(
        f"gallery: {len(made)} figures of {len(runs)} suites in {out} ({size / 1e6:.2f} MB)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
