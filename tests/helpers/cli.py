"""Shared pieces of the reliability tests, and the figures they leave behind.

Used by the CLI-level tests (`from tests.helpers.cli import ...`). Each test records
its figures (kills survived, faults injected, inputs tried, items lost) in
`bench/_out/reliability.json` (git-ignored); `python -m tests.helpers.cli
--update-md` copies them into the figures table of RELIABILITY.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT_JSON = Path(
    os.environ.get("LLMSCOPE_RELIABILITY_OUT", ROOT / "bench" / "_out" / "reliability.json")
)
MD = ROOT / "RELIABILITY.md"
MD_BEGIN = "<!-- figures:begin -->"
MD_END = "<!-- figures:end -->"


# -- figures ------------------------------------------------------------------------------
def record(section: str, merge: bool = False, **figures: Any) -> None:
    """Merge one test's figures into bench/_out/reliability.json (with `merge`, into the
    section's figures already there rather than replacing them).

    xdist workers record concurrently: the read-merge-write holds an exclusive lock on a
    side file, so no worker's figures overwrite another's."""
    figures["recorded_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    try:
        OUT_JSON.parent.mkdir(parents=True, exist_ok=True)
        with open(OUT_JSON.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data = json.loads(OUT_JSON.read_text())
            except (OSError, json.JSONDecodeError):
                data = {}
            old = data.get(section) if merge else None
            data[section] = {**old, **figures} if isinstance(old, dict) else figures
            tmp = OUT_JSON.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
            os.replace(tmp, OUT_JSON)
    except OSError:
        pass  # figures are a report, never a reason for a test to fail


def module_figures(
    section: str,
    merge: bool = False,
    summary: Callable[[dict[str, str]], dict[str, Any]] | None = None,
) -> tuple[dict[str, str], Any]:
    """A test module's figures and an autouse module fixture that records them under `section`
    (as `summary` makes of them, if given) once the module's tests have run:
    `FIGURES, _figures = module_figures(...)` at module level."""
    import pytest

    figures: dict[str, str] = {}

    @pytest.fixture(scope="module", autouse=True)
    def _record() -> Iterator[None]:
        yield
        record(section, merge, **(summary(figures) if summary else figures))

    return figures, _record


# -- subprocesses -------------------------------------------------------------------------
def cli_env(**extra: str) -> dict[str, str]:
    """Environment for `python -m llmscope` subprocesses.

    One torch thread: on a 2-core CI box torch's intra-op pool fights the event loop and
    a tiny model runs ~30x slower (see RELIABILITY.md, "findings").
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LLMSCOPE_DB"))}
    env.update(
        {
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "NO_COLOR": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
        }
    )
    env.update(extra)
    return env


def default_signals() -> None:
    """In a child before exec (`preexec_fn`): Ctrl-C, hang-up and terminate back to their default
    handling. A test that signals a run must not depend on how pytest was started: in the
    background of a script (SIGINT ignored) or under nohup (SIGHUP ignored), the run would inherit
    the ignored signal and go on."""
    import signal

    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def cli_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmscope", *args]


def cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    cwd: str | Path | None = None,
    preexec_fn: Callable[[], object] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the CLI to completion, capturing text output (`preexec_fn` runs in the child)."""
    return subprocess.run(
        cli_cmd(*args),
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        preexec_fn=preexec_fn,
    )


def cli_here(*args: str, db: str | Path) -> SimpleNamespace:
    """`llmscope --db DB ARGS` in this process (no interpreter start-up per call): its returncode,
    stdout and stderr, as `cli` gives them."""
    import contextlib
    import io

    from llmscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["--db", str(db), *args])
    return SimpleNamespace(returncode=rc, stdout=out.getvalue(), stderr=err.getvalue())


def run_here(*args: str, db: str | Path) -> SimpleNamespace:
    """`llmscope run ARGS` in this process on one thread, quiet and without the report."""
    return cli_here("run", *args, "--threads", "1", "--quiet", "--no-report", db=db)


def api_run_args(spec: str | Path, db: str | Path, base_url: str, *extra: str) -> list[str]:
    """The arguments of `llmscope run` of a suite on `openai:test-model` at `base_url`."""
    return [
        "run",
        "--suite",
        str(spec),
        "--db",
        str(db),
        "--model",
        "openai:test-model",
        "--base-url",
        base_url,
        *extra,
    ]


def api_run(
    spec: str | Path,
    db: str | Path,
    base_url: str,
    *extra: str,
    timeout: float = 300,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`llmscope run` of a suite on `openai:test-model` at `base_url` (tests/helpers/oai_server.py)."""
    return cli(
        *api_run_args(spec, db, base_url, *extra),
        env=env if env is not None else cli_env(OPENAI_API_KEY="sk-test"),
        timeout=timeout,
    )


def start_cli(
    *args: str, env: dict[str, str] | None = None, stdout: int = subprocess.DEVNULL
) -> subprocess.Popen[str]:
    """`llmscope ARGS` started in the background with the default signal handling (a test may
    signal it); stderr piped as text, stdout discarded unless given."""
    return subprocess.Popen(
        cli_cmd(*args),
        env=env or cli_env(),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )


def start_api_run(
    spec: str | Path, db: str | Path, base_url: str, *extra: str, **env: str
) -> subprocess.Popen[str]:
    """A quiet `llmscope run` (`api_run_args`, no report, no response cache) started in the
    background with OPENAI_API_KEY=sk-test and `env`; stdout discarded, stderr piped as text."""
    return start_cli(
        *api_run_args(spec, db, base_url, "--no-report", "--quiet", "--no-cache", *extra),
        env=cli_env(OPENAI_API_KEY="sk-test", **env),
    )


def start_study_run(
    study: Path, db: Path, jobs: int, stdout: int = subprocess.DEVNULL
) -> subprocess.Popen[str]:
    """`llmscope study run STUDY --trust-study --jobs N` started in the background with
    OPENAI_API_KEY=sk-test; stderr piped as text (stdout discarded unless given)."""
    return start_cli(
        *("study", "run", str(study), "--db", str(db), "--trust-study", "--jobs", str(jobs)),
        env=cli_env(OPENAI_API_KEY="sk-test"),
        stdout=stdout,
    )


def write_api_suite(
    folder: Path,
    texts: list[str],
    name: str = "api",
    golds: list[str] | None = None,
    ids: str = "i{k}",
    template: str = "{text} Answer yes or no.",
) -> Path:
    """A yes/no suite `name` of `texts` (ids `ids.format(k=k)`; gold `golds`, else all yes), each
    asked with the one template `template`: the scripted server (tests/helpers/oai_server.py)
    answers by markers in the text or the template."""
    rows = zip(texts, golds or ["yes"] * len(texts), strict=True)
    (folder / "items.jsonl").write_text(
        "".join(
            json.dumps({"id": ids.format(k=k), "text": t, "gold": g}) + "\n"
            for k, (t, g) in enumerate(rows)
        )
    )
    spec = folder / "suite.yaml"
    spec.write_text(
        f"name: {name}\ntask: yesno\nitems: items.jsonl\ntext_field: text\n"
        f"templates:\n  plain: '{template}'\n"
    )
    return spec


def assert_clean_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """A user-facing failure: exit 2, one `llmscope: error:` line, no traceback."""
    err = proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}\nstdout:{proc.stdout}\nstderr:{err}"
    assert "Traceback" not in err, err
    assert "llmscope: error:" in err, err
    for n in needles:
        assert n.lower() in err.lower(), f"{n!r} not in {err!r}"
    return err


# -- models and suites --------------------------------------------------------------------
def tiny_model_dir(base: Path) -> Path:
    """A saved 2-layer random-weight Llama with a trained BPE tokenizer (tests/helpers/tinymodel.py)."""
    folder = base / "tiny-llama"
    if not (folder / "config.json").is_file():
        from tests.helpers.tinymodel import make_tiny_model

        make_tiny_model(base, vocab="trained", save=True)
    return folder


def syntax_sample_db(base: Path, limit: int = 6) -> Path:
    """`base/sg.duckdb` holding one in-process `llmscope run` of the syntax-sample suite (its
    first `limit` items) on the tiny model."""
    from llmscope.cli import main

    model = tiny_model_dir(base)
    db = base / "sg.duckdb"
    args = ["run", "--suite", "syntax-sample", "--limit", str(limit), "--db", str(db)]
    args += ["--model", f"hf:{model}", "--threads", "1", "--quiet", "--no-report"]
    assert main(args) == 0
    return db


def contamination_db(base: Path, limit: int, *opts: str) -> Path:
    """`base/c.duckdb` holding a `llmscope run` subprocess of contamination-sample (its first
    `limit` items, 4 new tokens, `--opt` each of `opts`) on the tiny model saved in
    `base/tiny-llama` (tests/helpers/tinymodel.py `make_tiny_model(base, save=True)`)."""
    db = base / "c.duckdb"
    args = ["run", "--suite", "contamination-sample", "--limit", str(limit), "--db", str(db)]
    args += ["--model", str(base / "tiny-llama"), "--opt", "max_new_tokens=4"]
    r = cli(*args, *(a for o in opts for a in ("--opt", o)), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return db


WORDS = "cat dog bird fish tree water fire stone sky sun moon river mountain city house car".split()


def write_file(path: Path, text: str) -> Path:
    """`text` written to `path` as UTF-8; the path (a study file, a suite spec)."""
    path.write_text(text, encoding="utf-8")
    return path


def write_yesno_suite(folder: Path, n_items: int, name: str = "rel-yesno") -> Path:
    """A yes/no suite with two prompt variants; returns the spec path."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "items.jsonl", "w", encoding="utf-8") as f:
        for i in range(n_items):
            a, b = WORDS[i % len(WORDS)], WORDS[(i * 7 + 3) % len(WORDS)]
            text = f"The {a} number {i} can {'fly' if i % 3 else 'swim'} like a {b}"
            f.write(
                json.dumps({"id": f"q{i}", "text": text, "gold": "yes" if i % 2 else "no"}) + "\n"
            )
    (folder / "suite.yaml").write_text(
        f"name: {name}\ntask: yesno\nitems: items.jsonl\n"
        "templates:\n  a: 'Question: {text}? Answer:'\n  b: 'Is it true that {text}?'\n"
        "task_options:\n  chat: false\n",
        encoding="utf-8",
    )
    return folder / "suite.yaml"


def write_choice_suite(folder: Path, n_items: int, name: str = "rel-choice") -> Path:
    """A four-option choice suite (option log-likelihoods); returns the spec path."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "items.jsonl", "w", encoding="utf-8") as f:
        for i in range(n_items):
            opts = [WORDS[(i + k * 5) % len(WORDS)] for k in range(4)]
            text = f"Which one is number {i} near the {WORDS[(i * 3) % len(WORDS)]}"
            f.write(
                json.dumps({"id": f"c{i}", "text": text, "options": opts, "gold": opts[i % 4]})
                + "\n"
            )
    (folder / "suite.yaml").write_text(
        f"name: {name}\ntask: choice\nitems: items.jsonl\n"
        "templates:\n  q: 'Question: {text}? Answer:'\n"
        "task_options:\n  chat: false\n  content_free: []\n",
        encoding="utf-8",
    )
    return folder / "suite.yaml"


# -- reading a database -------------------------------------------------------------------
def hold_db(db: Path, sql: str = "") -> subprocess.Popen[str]:
    """Another process holding `db` open for writing (after running `sql` on it), once it has
    it; it lets go when its stdin is closed."""
    code = (
        "import sys, duckdb; c = duckdb.connect(sys.argv[1]); c.execute(sys.argv[2] or 'SELECT 1');"
        "print('ready', flush=True); sys.stdin.read(); c.close()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(db), sql],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    return holder


def snapshot(db: Path, dest: Path) -> Path:
    """Copy a database (and its WAL) so it can be inspected without touching the original."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / db.name
    for suffix in ("", ".wal"):
        src = Path(str(db) + suffix)
        tgt = Path(str(out) + suffix)
        tgt.unlink(missing_ok=True)
        if src.exists():
            shutil.copy2(src, tgt)
    return out


def query(db: Path, sql: str, params: list[Any] | None = None) -> list[tuple]:
    """The rows of one query on `db`, opened read-only and closed again."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def query_dicts(db: Path, sql: str, read_only: bool = True) -> list[dict[str, Any]]:
    """The rows of one query on `db` as column -> value (read-write replays a WAL)."""
    import duckdb

    con = duckdb.connect(str(db), read_only=read_only)
    try:
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def result_rows(db: Path) -> list[dict[str, Any]]:
    """Every stored result row with its identity and numbers (opened read-write: replays a WAL)."""
    return query_dicts(
        db,
        "SELECT run_id, item_id, variant, p_yes, p_no, other, option_scores, error FROM results",
        read_only=False,
    )


def count_rows(db: Path, table: str) -> int:
    return int(query(db, f"SELECT count(*) FROM {table}")[0][0])


# -- RELIABILITY.md -----------------------------------------------------------------------
def figures_table(data: dict[str, Any]) -> str:
    """A Markdown table of the recorded figures."""
    lines = ["| test | figures | recorded |", "|---|---|---|"]
    for section in sorted(data):
        figs = dict(data[section])
        when = figs.pop("recorded_at", "")
        text = ", ".join(f"{k} = {v}" for k, v in sorted(figs.items()))
        lines.append(f"| {section} | {text} | {when} |")
    return "\n".join(lines)


def update_md(md: Path = MD, src: Path = OUT_JSON) -> None:
    """Replace the figures block of RELIABILITY.md with the last recorded figures."""
    data = json.loads(src.read_text())
    text = md.read_text(encoding="utf-8")
    start, end = text.index(MD_BEGIN) + len(MD_BEGIN), text.index(MD_END)
    md.write_text(text[:start] + "\n" + figures_table(data) + "\n" + text[end:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update-md", action="store_true", help="copy the figures into RELIABILITY.md")
    args = ap.parse_args(argv)
    if args.update_md:
        update_md()
        print(f"updated {MD} from {OUT_JSON}")
    else:
        print(figures_table(json.loads(OUT_JSON.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
