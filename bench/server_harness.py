"""What the real-server tiers share: `llmscope run` against OpenAI-compatible servers or locally,
a run's stored rows read back, and a llama.cpp server on the embedded GGUF.

Used by the server tests (tests/engine/test_server_llamacpp.py, test_server_vllm.py), the
agreement scripts (scripts/server_agreement.py, vllm_agreement.py) and the throughput bench
(bench/server_throughput.py); bench/vllm_server.py starts the vLLM servers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from bench.vllm_server import free_port, poll_models
from llmscope.store.codec import decode_json

ALIAS = "smollm2"  # the name both servers serve the embedded model under
ROW_COLUMNS = (
    "item_id",
    "variant",
    "probs",
    "prediction",
    "gold",
    "correct",
    "error",
    "extra",
    "option_scores",
)
JSON_COLUMNS = ("probs", "extra", "option_scores")


def client_env(key: str, **extra: str) -> dict[str, str]:
    """The environment of an `llmscope run` child: an API key (the servers run without one, so
    any value is accepted), one torch thread, no OPENAI_BASE_URL from the caller's shell."""
    env = {**os.environ, "OPENAI_API_KEY": key, "OMP_NUM_THREADS": "1", **extra}
    env.pop("OPENAI_BASE_URL", None)
    return env


def run_command(
    db: Path, suite: str | Path, urls: str | Sequence[str] | None, *extra: str, concurrency: int = 2
) -> list[str]:
    """`llmscope run` of a suite: through the server(s) at `urls` (items sharded over them), else
    on the local backend with one thread."""
    urls = [urls] if isinstance(urls, str) else list(urls or [])
    model = (
        [
            "--model",
            f"openai:{ALIAS}",
            *[x for u in urls for x in ("--base-url", u)],
            "--concurrency",
            str(concurrency),
        ]
        if urls
        else ["--threads", "1"]
    )
    return [
        sys.executable,
        "-m",
        "llmscope",
        "--db",
        str(db),
        "run",
        "--suite",
        str(suite),
        *model,
        "--quiet",
        "--no-report",
        *extra,
    ]


def stored_rows(
    db: Path, backend: str | None = None, suite: str | None = None, latest: bool = False
) -> list[dict[str, Any]]:
    """The stored result rows (JSON columns decoded, with the run's backend and status), ordered
    by item and variant: of every run of `backend` (of every run: None) of `suite`, or only of
    the latest such run."""
    where, args = [], []
    if backend:
        where.append("runs.backend = ?")
        args.append(backend)
    if suite:
        where.append("runs.suite_name = ?")
        args.append(suite)
    cond = " where " + " and ".join(where) if where else ""
    if latest:
        cond = (
            f" where runs.run_id = (select run_id from runs{cond} order by started_at desc limit 1)"
        )
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute(
            f"select {', '.join('r.' + c for c in ROW_COLUMNS)}, runs.backend, runs.status "
            f"from results r join runs using (run_id){cond} order by r.item_id, r.variant",
            args,
        )
        cols = [d[0] for d in cur.description]
        out = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()
    for r in out:
        for k in JSON_COLUMNS:
            r[k] = decode_json(r[k]) if isinstance(r[k], str) else r[k]
    return out


def rows_by_key(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Rows keyed by (item, variant), empty JSON columns as {} (for pairing two runs)."""
    return {
        (r["item_id"], r["variant"]): {**r, **{k: r[k] or {} for k in JSON_COLUMNS}} for r in rows
    }


def run_meta(db: Path, backend: str, suite: str | None = None) -> dict[str, Any]:
    """The `meta` record of the latest run of `backend` (of `suite`)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        (meta,) = con.execute(
            "select meta from runs where backend = ?"
            + (" and suite_name = ?" if suite else "")
            + " order by started_at desc limit 1",
            [backend, *([suite] if suite else [])],
        ).fetchone()
    finally:
        con.close()
    return dict(decode_json(meta) if isinstance(meta, str) else meta)


def llama_command(gguf: Path, port: int) -> list[str]:
    """The llama.cpp server's command line: the GGUF served as `smollm2`, every position's
    logits kept (prompt log-probabilities), 2048 tokens of context."""
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--logits_all",
        "true",
        "--model_alias",
        ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--seed",
        "0",
        "--verbose",
        "false",
    ]


def start_llama(gguf: Path, log: Path, timeout: float = 180) -> tuple[subprocess.Popen[bytes], str]:
    """Start a llama.cpp server and wait until /v1/models answers: (process, base URL). Raises
    RuntimeError with the log's tail (and ends the process) when it exits or does not answer."""
    port = free_port()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(llama_command(gguf, port), stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        poll_models(base, proc, log, "llama.cpp server", time.monotonic() + timeout, every=0.5)
    except RuntimeError:
        stop_llama(proc)
        raise
    return proc, base


def stop_llama(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_process(
    db: Path,
    suite: str | Path,
    urls: str | Sequence[str] | None,
    *extra: str,
    key: str,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """`run_command` run to its end with the API key `key` (`client_env`), output captured."""
    return subprocess.run(
        run_command(db, suite, urls, *extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=client_env(key),
    )


def run_suite(
    db: Path, suite: str, base: str | None, *extra: str, env: dict[str, str]
) -> tuple[int, str, float]:
    """`llmscope run` of a suite (through the server at `base`, else locally): its exit code,
    the last line it wrote to stderr (the reason of a stop) and its seconds."""
    t0 = time.monotonic()
    p = subprocess.run(
        run_command(db, suite, base, *extra), capture_output=True, text=True, env=env
    )
    return p.returncode, (p.stderr.strip().splitlines() or [""])[-1], time.monotonic() - t0


def run_both(db: Path, suite: str, base: str, *extra: str, env: dict[str, str]) -> dict[str, Any]:
    """A suite run locally, then through the server at `base`: the agreement scripts' row of exit
    codes, seconds and stop reasons (the stored rows are read with `stored_rows`)."""
    rc_l, err_l, t_l = run_suite(db, suite, None, *extra, env=env)
    rc_r, err_r, t_r = run_suite(db, suite, base, *extra, env=env)
    res: dict[str, Any] = {
        "suite": suite,
        "local_rc": rc_l,
        "server_rc": rc_r,
        "local_s": round(t_l),
        "server_s": round(t_r),
    }
    if rc_r:
        res["server_stop"] = err_r
    if rc_l:
        res["local_stop"] = err_l
    return res


def latest_rows(db: Path, suite: str, backend: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows of the latest run of `suite` on `backend`, keyed by (item, variant)."""
    return rows_by_key(stored_rows(db, backend, suite, latest=True))
