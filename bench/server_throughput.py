"""Throughput on vLLM: one server vs two, beside the local path and lm-eval's `local-completions`.

    python -m bench.server_throughput [--n-items 60] [--concurrency 4] [--systems local,vllm-1,vllm-2,lm-eval]
        [--base-url URL_A --base-url URL_B] [--kill] [--restart] [--json FILE]
    python -m bench.server_throughput --mc [--n-items 60] [--rounds 2] [--concurrency 4]

`--mc`: multiple choice on one vLLM server this command starts, llmscope against lm-eval's
`local-completions`, interleaved (llmscope, lm-eval, llmscope, lm-eval, ...). The items are the
generated 4-option questions with a shared few-shot prefix (bench/mc_items.py); llmscope runs
them as a `task: choice` suite (`llmscope run`, calibration and PMI off: lm-eval makes no such
requests), lm-eval as `loglikelihood` requests (context, " option") with the same concurrency
and as many prompts per request as llmscope sends (`--lm-eval-batch`, default 4: one item's
options). Each system is a whole process (start, imports, run), timed from outside: wall
seconds, its CPU seconds, the server's CPU seconds (its processes in /proc) and the server's
request and prompt-token counters over the same span. Checks that every option's
log-likelihood agrees between the two within 1e-3 nats. Prints both systems' rows per round and
`ratio lm-eval/llmscope: wall X.XX, CPU X.XX` (sums over the rounds; CPU = client + server).

The same yes/no prompts for every system: the built-in `commonsense-sample` suite, `--n-items`
items x its 3 templates (60 -> 180 prompts), the embedded SmolLM2 in fp32:

* `local`: `llmscope run` on the local backend (one torch thread);
* `vllm-1`: `llmscope run --model openai:smollm2 --base-url A` (chat top-20 log-probs);
* `vllm-2`: the same run with `--base-url A --base-url B` (items sharded round-robin);
* `lm-eval`: lm-evaluation-harness's `local-completions` model against server A, scoring the
  log-likelihood of "Yes" and "No" after each chat-rendered prompt (two requests per prompt, as
  lm-eval asks a completions server; the tokens the HF tokenizer gives, sent as token ids).

llmscope's figure is the runner's own time (`runs.meta.last_session.seconds`: no process start,
no model load); lm-eval's the `loglikelihood` call. Without `--base-url` two vLLM servers are
started (bench/vllm_server.py: one thread each) and stopped at the end. The response cache is off.

`--kill`: one more two-server run, in which server B is killed (SIGKILL) once it has finished
a few requests; prints the items stored, duplicates and the run record's endpoint events.
`--restart` starts B again on its port right after the kill (it rejoins once it answers).

Prints items/s per system and `ratio two/one servers: X.XX`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import duckdb

from bench import server_harness as sh
from bench import vllm_server as vs

SUITE = "commonsense-sample"
MC_TOL = 1e-3  # nats: the same fp32 weights on the same server


def _env() -> dict[str, str]:
    return sh.client_env("sk-bench", LLMSCOPE_RESPONSE_CACHE="off")


def llmscope_run(
    db: Path, n_items: int, urls: list[str], concurrency: int, popen: bool = False
) -> Any:
    cmd = sh.run_command(db, SUITE, urls, "--limit", str(n_items), concurrency=concurrency)
    if popen:
        return subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
        )
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    if p.returncode:
        raise SystemExit(f"llmscope run failed: {p.stderr[-1500:]}")
    return p


def run_figures(db: Path) -> dict[str, Any]:
    """The last run's items, seconds, items/s and backend stats, from the store."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        run_id, meta = con.execute(
            "select run_id, meta from runs order by started_at desc limit 1"
        ).fetchone()
        ids = [
            r[0] + "/" + r[1]
            for r in con.execute(
                "select item_id, variant from results where run_id = ?", [run_id]
            ).fetchall()
        ]
        errors = con.execute(
            "select count(error) from results where run_id = ?", [run_id]
        ).fetchone()[0]
    finally:
        con.close()
    from llmscope.store.codec import decode_json

    m = decode_json(meta) or {}
    last = m.get("last_session") or {}
    return {
        "rows": len(ids),
        "distinct": len(set(ids)),
        "errors": errors,
        "seconds": last.get("seconds"),
        "items_per_s": last.get("items_per_s"),
        "backend_stats": m.get("backend_stats") or {},
    }


def lmeval_yesno(base_url: str, model_dir: Path, n_items: int, concurrency: int) -> dict[str, Any]:
    """lm-eval's local-completions on the same prompts: loglik of "Yes" and "No" per prompt."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    from transformers import AutoTokenizer

    from llmscope.data.suites import load_suite

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    work = load_suite(SUITE).work(n_items)
    rendered = [
        tok.apply_chat_template(
            [{"role": "user", "content": w.prompt}], add_generation_prompt=True, tokenize=False
        )
        for w in work
    ]
    lm = LocalCompletionsAPI(
        model=vs.ALIAS,
        base_url=f"{base_url}/completions",
        tokenizer=str(model_dir),  # noqa: E501
        tokenizer_backend="huggingface",
        num_concurrent=concurrency,
        batch_size=1,
        max_retries=3,
        max_length=2048,
    )
    reqs = [
        Instance(request_type="loglikelihood", doc={}, arguments=(r, a), idx=i)
        for i, (r, a) in enumerate((r, a) for r in rendered for a in ("Yes", "No"))
    ]
    t0 = time.perf_counter()
    out = lm.loglikelihood(reqs, disable_tqdm=True)
    dt = time.perf_counter() - t0
    assert len(out) == 2 * len(rendered)
    return {
        "rows": len(rendered),
        "seconds": round(dt, 3),
        "items_per_s": len(rendered) / dt,
        "requests": len(reqs),
    }


def kill_run(
    db: Path,
    n_items: int,
    a: str,
    b: vs.VLLMServer,
    concurrency: int,
    restart: bool,
    model_dir: Path,
) -> dict[str, Any]:
    """A two-server run in which B is killed mid-run (and with `restart`, started again)."""
    proc = llmscope_run(db, n_items, [a, b.base_url], concurrency, popen=True)
    before = vs.finished_requests(b.base_url)
    while vs.finished_requests(b.base_url) < before + 10:
        if proc.poll() is not None:
            raise SystemExit(f"the run ended before B was killed: {proc.communicate()[1][-1500:]}")
        time.sleep(0.2)
    t_kill = time.time()
    vs.stop(b, hard=True)
    restarted: dict[str, Any] = {}
    if restart:

        def again() -> None:
            nb = vs.launch(model_dir, b.log, b.port)
            try:
                vs.wait(nb)
                restarted.update(server=nb, up_after_s=round(time.time() - t_kill, 1))
            except RuntimeError as e:
                restarted["error"] = str(e)

        th = threading.Thread(target=again, daemon=True)
        th.start()
    _, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"the two-server run failed after the kill: {err[-1500:]}")
    fig = run_figures(db)
    st = fig.pop("backend_stats")
    fig.update(
        killed_at=round(t_kill, 3),
        endpoint_events=st.get("endpoint_events"),
        endpoints_up=st.get("endpoints_up"),
        requests_per_endpoint=st.get("requests_per_endpoint"),
        breaker=st.get("breaker"),
    )
    if restart:
        th.join(timeout=vs.START_TIMEOUT_S)
        fig["restart"] = {k: v for k, v in restarted.items() if k != "server"}
        if "server" in restarted:
            vs.stop(restarted["server"])
    return fig


# -- multiple choice ---------------------------------------------------------------------------


def write_mc_suite(folder: Path, n_items: int) -> tuple[Path, list[tuple[str, list[str], int]]]:
    """The generated 4-option items (bench/mc_items.py) as a `task: choice` suite: the prompt is
    the item's context, each option scored as " {option}" after it; no calibration or PMI
    requests (lm-eval's multiple choice makes none), so both systems ask for the same
    log-likelihoods."""
    from bench.mc_items import mc_items

    items = mc_items(n_items)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "items.jsonl", "w", encoding="utf-8") as fh:
        for i, (ctx, opts, gold) in enumerate(items):
            bare = [o[1:] for o in opts]  # the continuation " {option}" adds the space back
            rec = {"id": f"mc{i:04d}", "context": ctx, "options": bare, "gold": bare[gold]}
            fh.write(json.dumps(rec) + "\n")
    (folder / "suite.yaml").write_text(
        "name: server-mc-bench\ntask: choice\nitems: items.jsonl\ntext_field: context\n"
        "options_field: options\ngold_field: gold\ntemplates:\n  plain: '{context}'\n"
        "task_options:\n  chat: false\n  continuation: ' {option}'\n  content_free: []\n"
        "  domain_prompt: ''\n",
        encoding="utf-8",
    )
    return folder / "suite.yaml", items


def _timed(cmd: list[str], server: vs.VLLMServer, env: dict[str, str]) -> dict[str, Any]:
    """Run `cmd` to its end: wall seconds, its CPU seconds (user + system of it and its
    children), the server's CPU seconds and its finished sequences and prompt tokens over the
    same span, and what it printed."""
    import resource

    def children_cpu() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    c0, s0, k0 = vs.counters(server.base_url), vs.cpu_seconds(server), children_cpu()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    k1, s1, c1 = children_cpu(), vs.cpu_seconds(server), vs.counters(server.base_url)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd[1:4])} failed: {p.stderr[-1500:]}")

    def delta(name: str) -> int:
        return int(c1.get(name, 0) - c0.get(name, 0))

    return {
        "wall_s": round(wall, 2),
        "client_cpu_s": round(k1 - k0, 2),
        "server_cpu_s": round(s1 - s0, 2),
        "cpu_s": round(k1 - k0 + s1 - s0, 2),
        "sequences": delta("vllm:request_success_total"),
        "prompt_tokens": delta("vllm:prompt_tokens_total"),
        "stdout": p.stdout,
    }


def llmscope_mc(
    db: Path,
    suite: Path,
    server: vs.VLLMServer,
    concurrency: int,
    items: list[tuple[str, list[str], int]],
) -> tuple[dict[str, Any], list[list[float]]]:
    """One `llmscope run` of the suite: figures, and each item's option log-likelihoods (item
    order, option order) from the store."""
    db.unlink(missing_ok=True)
    cmd = sh.run_command(db, suite, [server.base_url], concurrency=concurrency)
    fig = _timed(cmd, server, _env())
    fig.pop("stdout")
    run = run_figures(db)
    st = run["backend_stats"]
    if run["errors"]:
        raise SystemExit(f"llmscope: {run['errors']} items failed")
    fig.update(
        items=run["rows"],
        run_s=run["seconds"],
        http_requests=st.get("requests"),
        client_prompt_tokens=st.get("prompt_tokens"),
    )
    rows = {r["item_id"]: r["option_scores"] for r in sh.stored_rows(db, latest=True)}
    ll = [
        [float(rows[f"mc{i:04d}"][o[1:]]["logprob"]) for o in opts]
        for i, (_, opts, _) in enumerate(items)
    ]
    return fig, ll


def lmeval_mc(
    spec: Path, server: vs.VLLMServer, items: list[tuple[str, list[str], int]]
) -> tuple[dict[str, Any], list[list[float]]]:
    """lm-eval's local-completions on the same (context, option) pairs, in a child process
    (`--lm-eval-child`): figures, and the log-likelihoods per item."""
    cmd = [sys.executable, "-m", "bench.server_throughput", "--lm-eval-child", str(spec)]
    fig = _timed(cmd, server, _env())
    child = json.loads(fig.pop("stdout").strip().splitlines()[-1])
    flat = child.pop("loglik")
    fig.update(items=len(items), run_s=child["seconds"], http_requests=child["http_requests"])
    out, i = [], 0
    for _, opts, _ in items:
        out.append(flat[i : i + len(opts)])
        i += len(opts)
    return fig, out


def lmeval_child(spec_path: str) -> int:
    """The lm-eval side of `--mc`, run as its own process: loglikelihood of every (context,
    option) pair; prints one JSON line (log-likelihoods, seconds of the call, HTTP requests)."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    spec = json.loads(Path(spec_path).read_text())
    lm = LocalCompletionsAPI(
        model=vs.ALIAS,
        base_url=f"{spec['base_url']}/completions",
        tokenizer=spec["model_dir"],
        tokenizer_backend="huggingface",
        num_concurrent=spec["concurrency"],
        batch_size=spec["batch"],
        max_retries=3,
        max_length=2048,
    )
    reqs = [
        Instance(request_type="loglikelihood", doc={}, arguments=(c, o), idx=i)
        for i, (c, o) in enumerate(spec["pairs"])
    ]
    t0 = time.perf_counter()
    out = lm.loglikelihood(reqs, disable_tqdm=True)
    dt = time.perf_counter() - t0
    n_req = -(-len(reqs) // spec["batch"])
    print(json.dumps({"loglik": [ll for ll, _ in out], "seconds": dt, "http_requests": n_req}))
    return 0


def run_mc(a: argparse.Namespace, model_dir: Path, tmp: Path) -> dict[str, Any]:
    """The `--mc` comparison on one server started here; returns the figures."""
    if vs.missing():
        raise SystemExit(f"vLLM: {vs.missing()}")
    suite, items = write_mc_suite(tmp / "mc-suite", a.n_items)
    spec = tmp / "lm-eval-spec.json"
    figs: dict[str, Any] = {
        "mode": "mc",
        "n_items": len(items),
        "options": sum(len(o) for _, o, _ in items),
        "concurrency": a.concurrency,
        "lm_eval_batch": a.lm_eval_batch,
        "load_before": os.getloadavg(),
        "rounds": [],
    }
    server = vs.launch(model_dir, tmp / "mc.log")
    try:
        vs.wait(server)
        spec.write_text(
            json.dumps(
                {
                    "base_url": server.base_url,
                    "model_dir": str(model_dir),
                    "concurrency": a.concurrency,
                    "batch": a.lm_eval_batch,
                    "pairs": [(c, o) for c, opts, _ in items for o in opts],
                }
            )
        )
        figs["start_s"] = round(server.started_s, 1)
        print(json.dumps({k: v for k, v in figs.items() if k != "rounds"}), flush=True)
        worst = 0.0
        for rnd in range(a.rounds):
            ours, ll_ours = llmscope_mc(tmp / "mc.duckdb", suite, server, a.concurrency, items)
            print(json.dumps({"round": rnd + 1, "llmscope": ours}), flush=True)
            theirs, ll_theirs = lmeval_mc(spec, server, items)
            print(json.dumps({"round": rnd + 1, "lm-eval": theirs}), flush=True)
            for x, y in zip(ll_ours, ll_theirs, strict=True):
                worst = max([worst, *(abs(u - v) for u, v in zip(x, y, strict=True))])
            figs["rounds"].append({"llmscope": ours, "lm-eval": theirs})
    finally:
        vs.stop(server)
    figs["max_abs_loglik_diff"] = worst
    figs["load_after"] = os.getloadavg()
    return figs


def print_mc(figs: dict[str, Any]) -> None:
    print()
    print(
        f"{'round':>5} {'system':<9} {'wall s':>8} {'client CPU':>10} {'server CPU':>10} "
        f"{'CPU s':>8} {'HTTP req':>8} {'sequences':>9} {'prompt tok':>10}"
    )
    total = {"llmscope": [0.0, 0.0], "lm-eval": [0.0, 0.0]}
    for i, rnd in enumerate(figs["rounds"]):
        for system, f in rnd.items():
            total[system][0] += f["wall_s"]
            total[system][1] += f["cpu_s"]
            print(
                f"{i + 1:>5} {system:<9} {f['wall_s']:>8.1f} {f['client_cpu_s']:>10.1f} "
                f"{f['server_cpu_s']:>10.1f} {f['cpu_s']:>8.1f} {f['http_requests'] or 0:>8} "
                f"{f['sequences']:>9} {f['prompt_tokens']:>10}"
            )
    (w_us, c_us), (w_them, c_them) = total["llmscope"], total["lm-eval"]
    print(
        f"{figs['n_items']} items, {figs['options']} options, concurrency {figs['concurrency']}; "
        f"option log-likelihoods agree within {figs['max_abs_loglik_diff']:.2e} nats; "
        f"load {figs['load_before'][0]:.1f} -> {figs['load_after'][0]:.1f}"
    )
    print(f"ratio lm-eval/llmscope: wall {w_them / w_us:.2f}, CPU {c_them / c_us:.2f}")
    if figs["max_abs_loglik_diff"] > MC_TOL:
        raise SystemExit(f"option log-likelihoods differ by more than {MC_TOL} nats")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--n-items",
        type=int,
        default=60,
        help="commonsense-sample items (x3 templates); with --mc, 4-option items",
    )
    ap.add_argument("--concurrency", type=int, default=4, help="requests in flight per server")
    ap.add_argument("--systems", default="local,vllm-1,vllm-2,lm-eval")
    ap.add_argument(
        "--base-url",
        action="append",
        default=[],
        help="two vLLM servers already running with bench/vllm_server.py's command line",
    )
    ap.add_argument(
        "--kill", action="store_true", help="also: a two-server run that loses server B"
    )
    ap.add_argument(
        "--restart", action="store_true", help="with --kill: start B again after the kill"
    )
    ap.add_argument(
        "--kill-items",
        type=int,
        default=None,
        help="items of the --kill run (default --n-items; with --restart, enough to outlast a server start)",
    )
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--mc", action="store_true", help="multiple choice against lm-eval (above)")
    ap.add_argument("--rounds", type=int, default=2, help="with --mc: interleaved rounds")
    ap.add_argument(
        "--lm-eval-batch", type=int, default=4, help="with --mc: prompts per lm-eval request"
    )
    ap.add_argument("--lm-eval-child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.lm_eval_child:
        return lmeval_child(a.lm_eval_child)
    if a.mc:
        figs = run_mc(a, vs.hf_folder(), Path(tempfile.mkdtemp(prefix="llmscope-srv-mc-")))
        if a.json:
            Path(a.json).write_text(json.dumps(figs, indent=1, default=str))
        print_mc(figs)
        return 0
    systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    model_dir = vs.hf_folder()
    tmp = Path(tempfile.mkdtemp(prefix="llmscope-srv-bench-"))
    started: list[vs.VLLMServer] = []
    figs: dict[str, Any] = {
        "n_prompts": 3 * a.n_items,
        "concurrency_per_server": a.concurrency,
        "load_before": os.getloadavg(),
    }
    try:
        if len(a.base_url) >= 2:
            urls = a.base_url[:2]
            b_server = None
        else:
            if vs.missing():
                raise SystemExit(f"vLLM: {vs.missing()}")
            sa = vs.launch(model_dir, tmp / "a.log")
            started.append(sa)
            vs.wait(sa)
            sb = vs.launch(model_dir, tmp / "b.log")
            started.append(sb)
            vs.wait(sb)
            figs["start_s"] = [round(sa.started_s, 1), round(sb.started_s, 1)]
            urls, b_server = [sa.base_url, sb.base_url], sb
        print(json.dumps({"servers": urls, **{k: v for k, v in figs.items()}}), flush=True)
        for system in systems:
            db = tmp / f"{system}.duckdb"
            if system == "local":
                llmscope_run(db, a.n_items, [], a.concurrency)
            elif system == "vllm-1":
                llmscope_run(db, a.n_items, urls[:1], a.concurrency)
            elif system == "vllm-2":
                llmscope_run(db, a.n_items, urls, a.concurrency)
            elif system == "lm-eval":
                figs[system] = lmeval_yesno(urls[0], model_dir, a.n_items, a.concurrency)
                print(json.dumps({system: figs[system]}), flush=True)
                continue
            else:
                raise SystemExit(f"unknown system {system!r} (local, vllm-1, vllm-2, lm-eval)")
            fig = run_figures(db)
            st = fig.pop("backend_stats")
            fig["requests_per_endpoint"] = st.get("requests_per_endpoint")
            figs[system] = fig
            print(json.dumps({system: fig}), flush=True)
        if a.kill:
            if b_server is None:
                raise SystemExit("--kill needs the servers this benchmark starts (no --base-url)")
            figs["kill"] = kill_run(
                tmp / "kill.duckdb",
                a.kill_items or a.n_items,
                urls[0],
                b_server,
                a.concurrency,
                a.restart,
                model_dir,
            )
            print(json.dumps({"kill": figs["kill"]}), flush=True)
    finally:
        for s in started:
            vs.stop(s, hard=False)
    figs["load_after"] = os.getloadavg()
    print()
    print(f"{'system':<10} {'prompts':>8} {'seconds':>9} {'prompts/s':>10}")
    for system in systems:
        f = figs.get(system) or {}
        print(
            f"{system:<10} {f.get('rows', 0):>8} {f.get('seconds') or float('nan'):>9.2f} "
            f"{f.get('items_per_s') or float('nan'):>10.2f}"
        )
    if "vllm-1" in figs and "vllm-2" in figs:
        print(
            f"ratio two/one servers: {figs['vllm-2']['items_per_s'] / figs['vllm-1']['items_per_s']:.2f}"
        )
    if "local" in figs and "vllm-1" in figs:
        print(
            f"ratio local/vllm-1: {figs['local']['items_per_s'] / figs['vllm-1']['items_per_s']:.2f}"
        )
    if "lm-eval" in figs and "vllm-1" in figs:
        print(
            f"ratio llmscope-vllm-1/lm-eval: {figs['vllm-1']['items_per_s'] / figs['lm-eval']['items_per_s']:.2f}"
        )
    if a.json:
        Path(a.json).write_text(json.dumps(figs, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
