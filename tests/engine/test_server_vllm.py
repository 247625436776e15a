"""The real-vLLM tier: every built-in suite through a real vLLM (CPU) server, and one run over
two servers that loses one mid-run.

One vLLM server per module (`bench/vllm_server.py`: `python -m vllm.entrypoints.openai.api_server`
on the transformers folder llmscope caches for the embedded SmolLM2 GGUF, fp32, one thread,
`--enable-tokenizer-info-endpoint`) serves `smollm2`; each test runs `llmscope run --model
openai:smollm2 --base-url ...` on a built-in suite with a small --limit, then the same suite on
the local backend, and compares the stored rows: the same fp32 weights on both sides, so
sentence log-probabilities agree within 1e-3 and every ranking is the same. A second server is
launched when the module starts (it warms up while the suite tests run) for the two-server test.

Needs `.vllm-venv` (`bash scripts/setup.sh vllm`); skipped with that reason otherwise.
Run only this tier: `.venv/bin/python -m pytest -m vllm`.
`LLMSCOPE_VLLM_SERVER=http://127.0.0.1:PORT/v1` points the suite tests at a server already
running with the command line of `bench/vllm_server.py` (the two-server test then skips).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from bench import server_harness as sh
from bench import vllm_server as vs

_WHY = vs.missing()
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(_WHY is not None, reason=f"vLLM tier: {_WHY}"),
]

KEY = "sk-local-vllm"  # the server runs without --api-key; any value is accepted
LL_TOL = 1e-3  # nats, per sentence / option: the same fp32 weights on both sides


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The module's vLLM server (started once) and a second one launched beside it."""
    if os.environ.get("LLMSCOPE_VLLM_SERVER"):
        yield {"a": os.environ["LLMSCOPE_VLLM_SERVER"].rstrip("/"), "b": None}
        return
    model = vs.hf_folder()
    logs = tmp_path_factory.mktemp("vllm")
    a = vs.launch(model, logs / "a.log")
    b: vs.VLLMServer | None = None
    try:
        vs.wait(a)
        # the second one compiles while the suite tests run (the first has warmed the caches)
        b = vs.launch(model, logs / "b.log")
        print(f"vLLM server answered after {a.started_s:.0f} s")
        yield {"a": a.base_url, "b": b, "a_server": a, "start_s": a.started_s}
    finally:
        vs.stop(a)
        if b is not None:
            vs.stop(b)


@pytest.fixture(scope="module")
def vllm(servers: dict[str, Any]) -> str:
    return str(servers["a"])


def run_cli(
    db: Path, suite: str, *extra: str, base_url: str | list[str] | None = None, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    """`llmscope run` in a subprocess: through the server(s) with base_url, else locally."""
    return sh.run_process(db, suite, base_url, *extra, key=KEY, timeout=timeout)


def rows(db: Path, backend: str) -> dict[tuple[str, str], dict[str, Any]]:
    return sh.rows_by_key(sh.stored_rows(db, backend))


def backend_meta(db: Path, backend: str = "openai") -> dict[str, Any]:
    return sh.run_meta(db, backend)


def both(db: Path, suite: str, vllm: str, limit: int, *extra: str) -> tuple[dict, dict]:
    """The suite through vLLM and locally; the rows of each, paired by (item, variant)."""
    p = run_cli(db, suite, "--limit", str(limit), *extra, base_url=vllm)
    assert p.returncode == 0, p.stderr[-2000:]
    p = run_cli(db, suite, "--limit", str(limit), *extra)
    assert p.returncode == 0, p.stderr[-2000:]
    remote, local = rows(db, "openai"), rows(db, "hf")
    assert remote and set(remote) == set(local)
    assert not any(r["error"] for r in remote.values()), [r["error"] for r in remote.values()]
    return remote, local


def test_server_serves_the_alias(vllm: str) -> None:
    assert vs.ALIAS in vs.models(vllm)


def test_minimal_pairs_agree_with_local_per_sentence(vllm: str, tmp_path: Path) -> None:
    db = tmp_path / "mp.duckdb"
    remote, local = both(db, "minimal-pairs", vllm, 5)
    for k, r in remote.items():
        # the same explicit context as locally, recorded with every item
        assert (
            r["extra"]["context"]["text"] == local[k]["extra"]["context"]["text"] == "<|endoftext|>"
        )
        assert set(r["option_scores"]) == set(local[k]["option_scores"])
        for s, sc in r["option_scores"].items():
            assert abs(sc["logprob"] - local[k]["option_scores"][s]["logprob"]) < LL_TOL, (k, s)
        assert r["prediction"] == local[k]["prediction"]
    be = backend_meta(db)["backend"]
    assert be["loglik"] == "vllm-prompt_logprobs"  # preferred over echo where vLLM offers it
    assert be["start_tokens"]["separator"] == "<|endoftext|>"


def _sentence_logprobs(r: dict[str, Any]) -> list[float]:
    return [sum(pt["logprobs"]) for pt in r["extra"]["per_token"]]


def test_syntaxgym_agrees_with_local(vllm: str, tmp_path: Path) -> None:
    db = tmp_path / "sg.duckdb"
    remote, local = both(db, "syntax-sample", vllm, 2)
    for k, r in remote.items():
        a, b = _sentence_logprobs(r), _sentence_logprobs(local[k])
        assert len(a) == len(b) and all(abs(x - y) < LL_TOL for x, y in zip(a, b, strict=True)), (
            k,
            a,
            b,
        )
        assert r["correct"] == local[k]["correct"]
    # an empty context is the start token, as locally (SmolLM2: BOS <|im_start|>, named by the server)
    st = backend_meta(db)["backend"]["start_tokens"]
    assert st["empty_context"] == "<|im_start|>" and st["adds_bos"] is False


def test_contamination_agrees_with_local(vllm: str, tmp_path: Path) -> None:
    db = tmp_path / "ct.duckdb"
    remote, local = both(db, "contamination-sample", vllm, 2)
    for k, r in remote.items():
        assert abs(r["extra"]["mean_logprob"] - local[k]["extra"]["mean_logprob"]) < LL_TOL
        assert abs(r["extra"]["min_k_prob"] - local[k]["extra"]["min_k_prob"]) < LL_TOL
        assert r["prediction"] == local[k]["prediction"]


def test_yesno_p_yes_within_a_hundredth(vllm: str, tmp_path: Path) -> None:
    db = tmp_path / "yn.duckdb"
    remote, local = both(db, "commonsense-sample", vllm, 3)
    for k, r in remote.items():
        assert r["extra"]["method"] == "logprobs"
        # The answer masses the server's top-20 saw are the local model's probabilities; the stored
        # P(yes) is rescaled by the top-k rule (all-present: mass / top-k total), a stated method
        # difference (docs/scale-out.md), so the seen mass is what must agree.
        # within 0.01, not 1e-3: variants of yes/no outside the top-20 ("YES", ...) are not seen
        assert abs(r["extra"]["raw_probs"]["yes"] - local[k]["probs"]["yes"]) < 0.01, (
            k,
            r["extra"],
            local[k],
        )
        assert abs(r["extra"]["raw_probs"]["no"] - local[k]["probs"]["no"]) < 0.01
        assert (
            r["extra"]["raw_probs"]["yes"] <= local[k]["probs"]["yes"] + 1e-4
        )  # seen mass: a lower bound
        assert r["prediction"] == local[k]["prediction"]


def _order(d: dict[str, float]) -> list[str]:
    return sorted(d, key=lambda o: -d[o])


def test_rating_ranking_identical(vllm: str, tmp_path: Path) -> None:
    db = tmp_path / "rt.duckdb"
    # top-100 (the server allows it: --max-logprobs 100): every label of the scale is seen; with
    # the default top-20 the labels outside it share the leftover mass equally (docs/scale-out.md)
    remote, local = both(
        db, "rating-sample", vllm, 3, "--top-logprobs", "100", "--opt", "top_k=100"
    )
    for k, r in remote.items():
        assert set(r["probs"]) == {"1", "2", "3", "4", "5"}
        assert _order(r["probs"]) == _order(local[k]["probs"])
        assert r["prediction"] == local[k]["prediction"]
        # the masses the server's top-k saw (before the rule) are the local probabilities
        for label, p in r["extra"]["meta"]["raw_probs"].items():
            assert abs(p - local[k]["extra"]["raw_probs"][label]) < 1e-3


@pytest.mark.parametrize("suite", ["mc-sample", "pragmatics-choice"])
def test_choice_rankings_and_option_logprobs_agree(vllm: str, tmp_path: Path, suite: str) -> None:
    db = tmp_path / "ch.duckdb"
    extra = ("--opt", 'schemes=["labels"]') if suite == "pragmatics-choice" else ()
    remote, local = both(db, suite, vllm, 3, *extra)
    for k, r in remote.items():
        assert r["extra"]["choice_method"] == "loglik"
        for o, sc in r["option_scores"].items():
            assert abs(sc["logprob"] - local[k]["option_scores"][o]["logprob"]) < LL_TOL, (k, o)
        assert _order(r["probs"]) == _order(local[k]["probs"])


def test_generation_greedy_text(vllm: str, tmp_path: Path) -> None:
    db = tmp_path / "gen.duckdb"
    remote, local = both(db, "generation-sample", vllm, 3)
    same = sum(r["prediction"] == local[k]["prediction"] for k, r in remote.items())
    # fp32 on both sides: greedy texts match unless two tokens tie within float noise
    assert same >= len(remote) - 1, [
        (r["prediction"], local[k]["prediction"]) for k, r in remote.items()
    ]


def test_probeval_oneshot_samples(vllm: str, tmp_path: Path) -> None:
    db = tmp_path / "pe.duckdb"
    p = run_cli(db, "probeval-oneshot", "--limit", "1", "--opt", "n=3", base_url=vllm)
    assert p.returncode == 0, p.stderr[-2000:]
    (r,) = rows(db, "openai").values()
    assert not r["error"] and len(r["extra"]["samples"]) == 3


# -- one run over two servers, one killed mid-run -------------------------------------------------


def _yesno_suite(tmp_path: Path, n: int) -> Path:
    (tmp_path / "items.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "id": f"q{k:03d}",
                    "text": f"Is {k} an even number?",
                    "gold": "yes" if k % 2 == 0 else "no",
                }
            )
            + "\n"
            for k in range(n)
        )
    )
    spec = tmp_path / "suite.yaml"
    spec.write_text(
        "name: parity\ntask: yesno\nitems: items.jsonl\ntext_field: text\n"
        "templates:\n  plain: '{text} Answer yes or no.'\n"
    )
    return spec


def test_two_servers_lose_one_mid_run_and_store_every_item_once(
    servers: dict[str, Any], tmp_path: Path
) -> None:
    b: vs.VLLMServer | None = servers["b"]
    if b is None:
        pytest.skip("LLMSCOPE_VLLM_SERVER given: no second server started")
    vs.wait(b)
    n = 40
    spec, db = _yesno_suite(tmp_path, n), tmp_path / "two.duckdb"
    proc = subprocess.Popen(
        sh.run_command(db, spec, [servers["a"], b.base_url]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sh.client_env(KEY),
    )
    # kill b once it has answered a few of the run's requests (its own request counter)
    deadline = time.monotonic() + 300
    before = vs.finished_requests(b.base_url)
    while vs.finished_requests(b.base_url) < before + 6:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    vs.stop(b, hard=True)  # SIGKILL: requests in flight on b are cut
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    ids = [r[0] for r in con.execute("select item_id from results").fetchall()]
    errors, scored = con.execute("select count(error), count(p_yes) from results").fetchone()
    status, meta = con.execute("select status, meta from runs").fetchone()
    con.close()
    assert sorted(ids) == [f"q{k:03d}" for k in range(n)]  # 0 lost, 0 duplicated
    assert errors == 0 and scored == n and status == "completed"
    stats = json.loads(meta)["backend_stats"]
    assert [(e["event"], e["url"]) for e in stats["endpoint_events"]] == [("down", b.base_url)]
    assert stats["endpoints_up"] == [True, False] and stats["breaker"] is None
    assert all(x > 0 for x in stats["requests_per_endpoint"])  # both carried items before the kill


# every built-in suite has a test above (tests/engine/test_vllm_coverage.py checks it without vLLM)
VLLM_TESTED = {
    "minimal-pairs",
    "syntax-sample",
    "contamination-sample",
    "commonsense-sample",
    "rating-sample",
    "mc-sample",
    "pragmatics-choice",
    "generation-sample",
    "probeval-oneshot",
}
