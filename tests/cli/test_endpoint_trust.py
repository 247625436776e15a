"""Only the user's own flags, environment and config decide where $OPENAI_API_KEY is sent.

Two scripted local servers (tests/helpers/oai_server.py): `good` is the user's endpoint,
`evil` the one a cloned project's `./llmscope.toml` or someone else's database names. Real
`llmscope` subprocesses run in the project folder; each server's request log says which
requests carried the key (the Authorization header)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.helpers.cli import assert_clean_error, cli, cli_env, write_yesno_suite
from tests.helpers.oai import CANARY_KEY, OAIServer, running_pair


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[OAIServer, OAIServer]]:
    with running_pair() as servers:  # (good, evil)
        yield servers


@pytest.fixture
def two(servers: tuple[OAIServer, OAIServer]) -> tuple[OAIServer, OAIServer]:
    for s in servers:
        s.reset()
    return servers


def _keyed(server: OAIServer) -> int:
    """Requests that reached `server` carrying the key."""
    return sum(1 for e in server.log() if CANARY_KEY in e.get("auth", ""))


def _setup(
    tmp_path: Path, project: str | None, user: str | None
) -> tuple[Path, Path, dict[str, str]]:
    proj = tmp_path / "proj"
    spec = write_yesno_suite(proj / "suite", 3)
    if project is not None:
        (proj / "llmscope.toml").write_text(f'base_url = "{project}"\n')
    xdg = tmp_path / "xdg"
    (xdg / "llmscope").mkdir(parents=True)
    if user is not None:
        (xdg / "llmscope" / "llmscope.toml").write_text(f'base_url = "{user}"\n')
    env = cli_env(
        OPENAI_API_KEY=CANARY_KEY,
        XDG_CONFIG_HOME=str(xdg),
        HOME=str(tmp_path),
        LLMSCOPE_RESPONSE_CACHE="off",
        COLUMNS="500",
    )  # no wrapped paths
    return proj, spec, env


def _run(proj: Path, spec: Path, env: dict[str, str], *extra: str) -> Any:
    return cli(
        "run",
        "--suite",
        str(spec),
        "--db",
        str(proj / "r.duckdb"),
        "--model",
        "openai:test-model",
        "--no-report",
        *extra,
        env=env,
        cwd=proj,
    )


def test_project_base_url_never_gets_the_key(
    two: tuple[OAIServer, OAIServer], tmp_path: Path
) -> None:
    good, evil = two
    proj, spec, env = _setup(tmp_path, evil.base_url, good.base_url)
    proc = _run(proj, spec, env)
    assert proc.returncode == 0, proc.stderr
    assert _keyed(evil) == 0 and _keyed(good) > 0
    user_file = tmp_path / "xdg" / "llmscope" / "llmscope.toml"
    assert f"endpoint {good.base_url} (from {user_file})" in proc.stderr
    assert "cannot choose where $OPENAI_API_KEY is sent; ignored" in proc.stderr
    # the endpoint line comes before any request: before the run's first progress output
    assert proc.stderr.index("endpoint ") < proc.stderr.index("loading model")


@pytest.mark.slow
def test_project_base_url_alone_is_refused(
    two: tuple[OAIServer, OAIServer], tmp_path: Path
) -> None:
    good, evil = two
    proj, spec, env = _setup(tmp_path, evil.base_url, None)
    err = assert_clean_error(_run(proj, spec, env), "llmscope.toml", "base_url", "--base-url")
    assert len(err.strip().splitlines()) == 1
    assert _keyed(evil) == 0 and _keyed(good) == 0
    # the flag and the environment are the user's own: they are used, and said
    proc = _run(proj, spec, env, "--base-url", good.base_url)
    assert proc.returncode == 0 and f"endpoint {good.base_url} (from --base-url)" in proc.stderr
    proc = _run(proj, spec, {**env, "OPENAI_BASE_URL": good.base_url}, "--resume", "last")
    assert proc.returncode == 0, proc.stderr
    # naming the project file explicitly is trusting it
    (proj / "r.duckdb").unlink()
    proc = _run(proj, spec, {**env, "LLMSCOPE_CONFIG": str(proj / "llmscope.toml")})
    assert proc.returncode == 0, proc.stderr
    assert f"endpoint {evil.base_url} (from {proj / 'llmscope.toml'})" in proc.stderr
    assert _keyed(evil) > 0


def _two_short(db: Path) -> None:
    """Drop two stored results, so a resume has something to ask (a complete run asks nothing)."""
    con = duckdb.connect(str(db))
    con.execute(
        "DELETE FROM results WHERE item_id IN (SELECT item_id FROM results ORDER BY item_id LIMIT 2)"
    )
    con.close()


@pytest.mark.slow
def test_resume_and_rerun_of_someone_elses_db(
    two: tuple[OAIServer, OAIServer], tmp_path: Path
) -> None:
    """A database made against `evil` is handed over: resuming or re-running it sends nothing
    there without --trust-db (no terminal to ask on), or the same URL named by the user."""
    good, evil = two
    proj, spec, env = _setup(tmp_path, None, None)
    # made by someone else (their own home and config), then handed over
    other = tmp_path / "other"
    other_env = {**env, "HOME": str(other), "XDG_CONFIG_HOME": str(other / "xdg")}
    made = _run(proj, spec, other_env, "--base-url", evil.base_url, "--quiet")
    assert made.returncode == 0, made.stderr
    db = proj / "r.duckdb"
    theirs = tmp_path / "theirs.duckdb"
    shutil.copy(db, theirs)
    evil.reset()
    con = duckdb.connect(str(theirs), read_only=True)
    (rid,) = con.execute("SELECT run_id FROM runs").fetchone()
    con.close()
    _two_short(theirs)
    base = ["--db", str(theirs), "--no-report"]
    resume = cli("run", "--resume", rid, *base, env=env, cwd=proj)
    assert_clean_error(resume, "sends requests", evil.base_url, "--trust-db")
    rerun = cli("rerun", rid, "--where", "correct = 0 OR correct = 1", *base, env=env, cwd=proj)
    assert_clean_error(rerun, "run ", evil.base_url, "--trust-db")
    assert _keyed(evil) == 0
    # the user's own flag decides instead (a rerun may go elsewhere; a resume keeps its endpoint)
    proc = cli(
        "rerun",
        rid,
        "--where",
        "correct = 0 OR correct = 1",
        *base,
        "--base-url",
        good.base_url,
        env=env,
        cwd=proj,
    )
    assert proc.returncode == 0, proc.stderr
    assert _keyed(evil) == 0 and _keyed(good) > 0
    # an explicit --trust-db, or the same URL in the user's environment, uses the stored one
    n = _keyed(evil)
    proc = cli("run", "--resume", rid, *base, "--trust-db", env=env, cwd=proj)
    assert proc.returncode == 0, proc.stderr
    assert "trusted with --trust-db" in proc.stderr and _keyed(evil) > n
    n = _keyed(evil)
    proc = cli(
        "rerun",
        rid,
        "--where",
        "correct = 0 OR correct = 1",
        *base,
        env={**env, "OPENAI_BASE_URL": evil.base_url},
        cwd=proj,
    )
    assert proc.returncode == 0, proc.stderr
    assert "also named by your environment" in proc.stderr and _keyed(evil) > n
    _two_short(theirs)
    proc = cli("run", "--resume", rid, *base, "--base-url", evil.base_url, env=env, cwd=proj)
    assert proc.returncode == 0 and "(from --base-url)" in proc.stderr, proc.stderr
    # having chosen it once, the user's own later resumes of that run need no flag
    _two_short(theirs)
    proc = cli("run", "--resume", rid, *base, env=env, cwd=proj)
    assert proc.returncode == 0 and "an earlier run of yours" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "where",
    ["model", "options", "suite", "grid"],
)
def test_study_file_base_url_anywhere_needs_trust(
    two: tuple[OAIServer, OAIServer], tmp_path: Path, where: str
) -> None:
    """A study file may set base_url on a model, in its top-level `options`, on a suite entry or
    as a grid level: wherever it is, it is the file's choice, so `study run` sends nothing there
    without --trust-study (before: only the model entry was checked; the others got the key)."""
    good, evil = two
    proj, spec, env = _setup(tmp_path, None, good.base_url)
    url = f'"{evil.base_url}"'
    parts = {
        "model": ("", f", base_url: {url}", "", ""),
        "options": (f"options: {{base_url: {url}}}\n", "", "", ""),
        "suite": ("", "", f", base_url: {url}", ""),
        "grid": ("", "", "", f"grid:\n  base_url: [{url}]\n"),
    }[where]
    study = proj / "study.yaml"
    study.write_text(
        f"name: s-{where}\n{parts[0]}"
        f"suites: [{{suite: {spec}, label: yn{parts[2]}}}]\n"
        f'models:\n  - {{model: "openai:test-model", label: api{parts[1]}}}\n{parts[3]}'
    )
    db = str(proj / "s.duckdb")
    proc = cli("study", "run", str(study), "--db", db, env=env, cwd=proj)
    err = assert_clean_error(proc, str(study), evil.base_url, "--trust-study")
    assert len(err.strip().splitlines()) == 1
    assert _keyed(evil) == 0 and _keyed(good) == 0
    proc = cli("study", "run", str(study), "--db", db, "--trust-study", env=env, cwd=proj)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"endpoint {evil.base_url} for api (from study {study}" in proc.stderr
    assert _keyed(evil) > 0 and _keyed(good) == 0


@pytest.mark.slow
def test_resume_of_a_stored_trust_remote_code_needs_the_users_word(tmp_path: Path) -> None:
    """A run stored with --trust-remote-code (a hub model's own Python code runs at load) is
    resumed or re-run only when the user passes --trust-remote-code (run) or --trust-db: someone
    else's database must not decide to run code. Refused before any model loads, nothing added."""
    pytest.importorskip("torch")
    from tests.helpers.cli import tiny_model_dir

    model = tiny_model_dir(tmp_path)
    spec = write_yesno_suite(tmp_path / "suite", 3)
    db = tmp_path / "code.duckdb"
    env = cli_env(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    base = ["--db", str(db), "--threads", "1", "--quiet", "--no-report"]
    made = cli(
        "run", "--suite", str(spec), "--model", f"hf:{model}", "--trust-remote-code", *base, env=env
    )
    assert made.returncode == 0, made.stderr[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    (rid,) = con.execute("SELECT run_id FROM runs").fetchone()  # type: ignore[misc]
    con.close()
    _two_short(db)
    for args in (["run", "--resume", rid], ["rerun", rid, "--where", "correct = 0 OR correct = 1"]):
        proc = cli(*args, *base, env=env)
        err = assert_clean_error(proc, f"run {rid}", "--trust-remote-code", "--trust-db")
        assert len(err.strip().splitlines()) == 1 and "loading model" not in proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    assert con.execute("SELECT count(*) FROM results").fetchone() == (4,)  # 6 less the two dropped
    con.close()
    proc = cli("run", "--resume", rid, "--trust-remote-code", *base, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM results").fetchone() == (6,)
    con.close()


def test_study_file_trust_remote_code_needs_trust_study(tmp_path: Path) -> None:
    """A study file that sets trust_remote_code (a hub model's code runs at load) is refused
    without --trust-study, before anything is created."""
    spec = write_yesno_suite(tmp_path / "suite", 3)
    study = tmp_path / "code.yaml"
    study.write_text(
        f"name: code\nsuites: [{{suite: {spec}, label: yn}}]\n"
        'models:\n  - {model: "hf:someone/model", label: m}\n'
        "grid:\n  trust_remote_code: [true]\n"
    )
    db = tmp_path / "code.duckdb"
    env = cli_env(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    proc = cli("study", "run", str(study), "--db", str(db), env=env)
    err = assert_clean_error(proc, f"{study}:", "trust_remote_code", "--trust-study")
    assert len(err.strip().splitlines()) == 1 and not db.exists()
