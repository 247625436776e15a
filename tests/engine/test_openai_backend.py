"""OpenAIBackend against the scripted server in tests/helpers/oai_server.py (real openai client, HTTP).

Expected probabilities are computed here by hand from the logprobs written into
each scripted response.
"""

from __future__ import annotations

import logging
import math
from contextlib import asynccontextmanager

import pytest

from llmscope.engine.backend import BackendError, GenParams
from llmscope.engine.openai import OpenAIBackend
from llmscope.engine.openai.backend import REASONING_SUFFIX, is_reasoning_model
from llmscope.engine.openai.topk import apply_topk_rule
from tests.helpers import oai as oai_fixtures
from tests.helpers.oai import CANARY_KEY, OAIServer

E = math.exp

oai_server = oai_fixtures.oai_server
oai = oai_fixtures.oai


@asynccontextmanager
async def backend(server: OAIServer, **kw):
    kw.setdefault("timeout", 5.0)
    b = OpenAIBackend(model=kw.pop("model", "test-model"), base_url=server.base_url, **kw)
    try:
        yield b
    finally:
        await b.aclose()


# ---------------------------------------------------------------- the three top-k rules


async def test_both_present_renormalises(oai: OAIServer) -> None:
    m = oai.script(
        "[both]",
        top=[["Yes", -0.7], [" yes", -2.5], ["No", -1.6], ["Maybe", -3.2]],
        model="test-model-2024",
        system_fingerprint="fp_abc",
    )
    async with backend(oai, seed=7) as b:
        out = await b.next_token(f"{m} Is the sky blue?", ["yes", "no"])
    s = E(-0.7) + E(-2.5) + E(-1.6) + E(-3.2)  # top-k mass, about 0.8213
    assert out.probs["yes"] == pytest.approx((E(-0.7) + E(-2.5)) / s, abs=1e-12)
    assert out.probs["no"] == pytest.approx(E(-1.6) / s, abs=1e-12)
    assert out.other == pytest.approx(E(-3.2) / s, abs=1e-12)
    assert out.probs["yes"] == pytest.approx(0.70455, abs=1e-4)  # 0.57867 / 0.82133
    assert out.meta["rule"] == "all-present"
    assert out.meta["method"] == "logprobs"
    assert out.meta["top_logprobs"][0] == ("Yes", -0.7)
    assert out.meta["system_fingerprint"] == "fp_abc"
    assert out.meta["model"] == "test-model-2024"
    assert out.meta["seed"] == 7
    assert out.meta["usage"]["prompt_tokens"] > 0
    assert out.prompt == f"{m} Is the sky blue?"
    assert [t.token for t in out.top] == ["Yes", "No", " yes", "Maybe"]
    (req,) = oai.log(m)
    body = req["body"]
    assert body["logprobs"] is True and body["top_logprobs"] == 20
    assert body["temperature"] == 0 and body["seed"] == 7 and body["max_tokens"] == 2
    assert body["messages"] == [{"role": "user", "content": f"{m} Is the sky blue?"}]


async def test_only_yes_present_gives_no_the_outside_mass(oai: OAIServer) -> None:
    m = oai.script("[one]", top=[["Yes", -0.3], ["Sure", -2.0], ["The", -3.0]])
    async with backend(oai) as b:
        out = await b.next_token(f"{m} q", ["yes", "no"])
    s = E(-0.3) + E(-2.0) + E(-3.0)
    assert out.probs["yes"] == pytest.approx(E(-0.3), abs=1e-12)
    assert out.probs["no"] == pytest.approx(1 - s, abs=1e-12)
    assert out.other == pytest.approx(E(-2.0) + E(-3.0), abs=1e-12)
    assert out.meta["rule"] == "some-missing"


async def test_only_no_present(oai: OAIServer) -> None:
    m = oai.script("[onlyno]", top=[[" NO", -0.5], ["Never", -1.5]])
    async with backend(oai) as b:
        out = await b.next_token(f"{m} q", ["yes", "no"])
    assert out.probs["no"] == pytest.approx(E(-0.5), abs=1e-12)
    assert out.probs["yes"] == pytest.approx(1 - E(-0.5) - E(-1.5), abs=1e-12)
    assert out.other == pytest.approx(E(-1.5), abs=1e-12)


async def test_neither_present_splits_outside_mass(oai: OAIServer) -> None:
    m = oai.script("[neither]", top=[["Maybe", -1.0], ["I", -1.5]])
    async with backend(oai) as b:
        out = await b.next_token(f"{m} q", ["yes", "no"])
    s = E(-1.0) + E(-1.5)
    assert out.probs["yes"] == pytest.approx((1 - s) / 2, abs=1e-12)
    assert out.probs["no"] == pytest.approx((1 - s) / 2, abs=1e-12)
    assert out.other == pytest.approx(s, abs=1e-12)
    assert out.meta["rule"] == "none-present"


def test_rule_generalises_to_three_answers() -> None:
    top = [("A", -1.0), ("b", -2.0), ("Hmm", -2.5)]
    probs, other, rule, _ = apply_topk_rule(top, ["A", "B", "C"])
    s = E(-1.0) + E(-2.0) + E(-2.5)
    assert rule == "some-missing"
    assert probs["A"] == pytest.approx(E(-1.0)) and probs["B"] == pytest.approx(E(-2.0))
    assert probs["C"] == pytest.approx(1 - s)  # the only missing answer takes all outside mass
    assert other == pytest.approx(E(-2.5))
    probs, other, rule, _ = apply_topk_rule([("A", -1.0), ("x", -1.2)], ["A", "B", "C"])
    assert probs["B"] == pytest.approx((1 - E(-1.0) - E(-1.2)) / 2) == probs["C"]


async def test_completions_endpoint_next_token(oai: OAIServer) -> None:
    m = oai.script("[cmpl]", top=[[" yes", -0.4], [" no", -1.4], [" maybe", -2.9]])
    async with backend(oai) as b:
        out = await b.next_token(f"{m} Q: Is fire hot? A:", ["yes", "no"], chat=False)
    s = E(-0.4) + E(-1.4) + E(-2.9)
    assert out.probs["yes"] == pytest.approx(E(-0.4) / s)
    assert out.meta["endpoint"] == "completions"
    (req,) = oai.log(m)
    assert req["path"].endswith("/v1/completions") and req["body"]["logprobs"] == 20


async def test_top_logprobs_lowered_to_stated_maximum(oai: OAIServer) -> None:
    msg = "Invalid 'top_logprobs': integer above maximum value. Expected a value <= 10, but got 20 instead."
    m = oai.script(
        "[kcap]",
        top=[["Yes", -0.1], ["No", -2.4]],
        reject=[{"param": "top_logprobs", "gt": 10, "message": msg}],
    )
    async with backend(oai) as b:
        out = await b.next_token(f"{m} q", ["yes", "no"])
        await b.next_token(f"{m} again", ["yes", "no"])
        assert b.describe()["top_logprobs_used"] == 10
        assert b.stats()["failed"] == 0
    assert [r["body"]["top_logprobs"] for r in oai.log(m)] == [20, 10, 10]
    assert out.meta["top_k"] == 10


async def test_top_logprobs_below_five_is_an_error(oai: OAIServer) -> None:
    m = oai.script(
        "[kcap3]",
        reject=[{"param": "top_logprobs", "gt": 3, "message": "top_logprobs must be <= 3"}],
    )
    async with backend(oai) as b:
        with pytest.raises(BackendError, match="<= 3"):
            await b.next_token(f"{m} q", ["yes", "no"])
        assert b.stats()["failed"] == 1


# ---------------------------------------------------------------- no logprobs: sampled estimate


SAMPLES = [
    "Yes",
    "No.",
    "yes, because",
    "Maybe",
    "**Yes**",
    "No",
    "Yes",
    "I think so",
    "YES!",
    "no",
]
# first words: yes, no, yes, other, yes, no, yes, other, yes, no -> yes 5, no 3, other 2


async def test_no_logprobs_response_falls_back_to_samples(oai: OAIServer, caplog) -> None:
    m = oai.script("[nolp]", no_logprobs=True, samples=SAMPLES)
    caplog.set_level(logging.WARNING, logger="llmscope.engine.openai")
    async with backend(oai, samples=10) as b:
        assert b.describe()["logprobs"] is None
        out = await b.next_token(f"{m} q", ["yes", "no"])
        out2 = await b.next_token(f"{m} q2", ["yes", "no"])
        d, st = b.describe(), b.stats()
    assert out.probs == {"yes": 0.5, "no": 0.3}
    assert out.other == pytest.approx(0.2)
    assert out.meta["method"] == "sampled-estimate" and out.meta["n"] == 10
    assert out.meta["counts"] == {"yes": 5, "no": 3}
    assert out2.meta["method"] == "sampled-estimate"
    assert d["logprobs"] is False and d["method"] == "sampled-estimate"
    assert st["logprobs"] is False and len(st["notices"]) == 1
    assert sum("log-probabilities" in r.getMessage() for r in caplog.records) == 1
    reqs = oai.log(m)
    # one probe with logprobs, then one sampled request (n=10) per call
    # three probes with logprobs (one absent answer is not enough to decide), then one
    # sampled request (n=10) per call
    assert [("logprobs" in r["body"]) for r in reqs] == [True, True, True, False, False]
    assert reqs[3]["body"]["n"] == 10 and reqs[3]["body"]["temperature"] == 1.0


async def test_logprobs_rejected_with_400_falls_back(oai: OAIServer) -> None:
    msg = "Unsupported parameter: 'logprobs' is not supported with this model."
    m = oai.script(
        "[lp400]", samples=SAMPLES, reject=[{"param": "logprobs", "present": True, "message": msg}]
    )
    async with backend(oai) as b:
        out = await b.next_token(f"{m} q", ["yes", "no"])
        assert b.describe()["logprobs"] is False
        assert "not supported" in b.describe()["logprobs_reason"]
    assert out.probs == {"yes": 0.5, "no": 0.3}


async def test_server_rejecting_n_is_topped_up_with_distinct_seeds(oai: OAIServer) -> None:
    m = oai.script(
        "[non]",
        no_logprobs=True,
        samples=SAMPLES,
        reject=[{"param": "n", "gt": 1, "message": "Unsupported value: 'n' must be 1"}],
    )
    async with backend(oai, seed=100, logprobs=False) as b:
        out = await b.next_token(f"{m} q", ["yes", "no"])
    assert out.meta["n"] == 10 and sum(out.meta["counts"].values()) == 8
    ok = [r["body"] for r in oai.log(m) if r["outcome"] == "ok"]
    assert len(ok) == 10 and sorted(b["seed"] for b in ok) == list(range(100, 110))


async def test_reasoning_model_effort_ladder_and_suffix(oai: OAIServer) -> None:
    msg = "Unsupported value: 'reasoning_effort' does not support 'minimal' with this model."
    m = oai.script(
        "[reason]",
        samples=["Yes"] * 3 + ["No"],
        reject=[{"param": "reasoning_effort", "equals": "minimal", "message": msg}],
    )
    async with backend(oai, model="o3-mini", samples=4) as b:
        d0 = b.describe()
        assert d0["reasoning"] is True and d0["logprobs"] is False
        assert d0["reasoning_suffix"] == REASONING_SUFFIX
        out = await b.next_token(f"{m} Is ice cold?", ["yes", "no"])
        d = b.describe()
    assert d["reasoning_effort"] == "low" and d["reasoning_efforts_rejected"] == ["minimal"]
    assert out.prompt == f"{m} Is ice cold?\n{REASONING_SUFFIX}"
    assert out.probs == {"yes": 0.75, "no": 0.25}
    assert out.meta["reasoning_effort"] == "low"
    reqs = oai.log(m)
    assert [r["body"]["reasoning_effort"] for r in reqs] == ["minimal", "low"]
    assert "max_completion_tokens" in reqs[1]["body"] and "max_tokens" not in reqs[1]["body"]
    assert reqs[1]["body"]["messages"][0]["content"].endswith(REASONING_SUFFIX)


def test_reasoning_names() -> None:
    for name in ("o1", "o1-mini", "o3", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5.1", "org/o3"):
        assert is_reasoning_model(name), name
    for name in ("gpt-4o", "gpt-4.1-mini", "llama-3-o1x", "meta-llama/Llama-3.1-8B"):
        assert not is_reasoning_model(name), name


# ---------------------------------------------------------------- loglik (completions + echo)

TABLE = {" cat": -1.2, " sat": -2.0, " down": -0.5, " mat": -3.0, " on": -0.25}


async def test_echo_loglik_sums_continuation_tokens(oai: OAIServer) -> None:
    m = oai.script("The", token_logprobs=TABLE)
    reqs = [
        ("The cat", " sat down"),
        ("The cat ", "sat"),
        ("The cat", " mat"),
        ("The cat", " sat on"),
    ]
    async with backend(oai, loglik_batch=3) as b:
        outs = await b.loglik(reqs)
        assert b.describe()["loglik"].startswith("completions-echo")
    assert [o.logprob for o in outs] == pytest.approx([-2.0 + -0.5, -2.0, -3.0, -2.0 + -0.25])
    assert outs[0].tokens == [" sat", " down"] and outs[0].n_tokens == 2
    assert outs[0].token_logprobs == [-2.0, -0.5]
    assert outs[0].n_context_tokens == 2
    # trailing space of the context moved to the continuation: " sat" scored whole
    assert outs[1].tokens == [" sat"]
    # the sanity check comes first: a greedy request, a try of vLLM's prompt_logprobs
    # (this server ignores it), then the same text echoed
    check, try_vllm, check_echo, *sent = oai.log(m)
    assert check["body"]["prompt"] == "The capital of France is" and "echo" not in check["body"]
    assert try_vllm["body"]["prompt_logprobs"] == 0
    assert check_echo["body"]["prompt"] == "The capital of France is yes"
    assert len(sent) == 2  # batches of 3 + 1
    assert sent[0]["body"]["echo"] is True and sent[0]["body"]["max_tokens"] == 0
    assert sent[0]["body"]["logprobs"] == 1
    assert sent[0]["body"]["prompt"][1] == "The cat sat"


async def test_echo_loglik_with_max_tokens_one_fallback(oai: OAIServer) -> None:
    m = oai.script(
        "The dog",
        token_logprobs={" dog": -0.7, " ran": -1.1},
        reject=[{"param": "max_tokens", "equals": 0, "message": "max_tokens must be at least 1"}],
    )
    async with backend(oai) as b:
        (out,) = await b.loglik([("The dog", " ran")])
        assert "max_tokens=1" in b.describe()["loglik"]
    assert out.logprob == pytest.approx(-1.1) and out.tokens == [" ran"]  # generated token ignored
    assert [r["body"]["max_tokens"] for r in oai.log(m)] == [0, 1]


async def test_loglik_unsupported_is_a_clear_error(oai: OAIServer) -> None:
    m = oai.script(
        "",  # every prompt: the server has no completions endpoint at all
        error={
            "status": 404,
            "message": "This is a chat model and not supported in the v1/completions endpoint.",
        },
    )
    async with backend(oai) as b:
        with pytest.raises(BackendError, match="choice_by_labels"):
            await b.loglik([("Chatty context", " a")])
        with pytest.raises(BackendError, match="choice_by_labels"):
            await b.loglik([("Chatty context", " b")])  # remembered: no second request
        with pytest.raises(BackendError, match="chat"):
            await b.loglik([("x", " y")], chat=True)
        assert b.describe()["loglik"] == "unsupported"
        assert b.stats()["failed"] == 3
    assert len(oai.log(m)) == 1


# ---------------------------------------------------------------- choice by labels, generate


async def test_choice_by_labels_applies_rule_to_labels(oai: OAIServer) -> None:
    m = oai.script("[mc]", top=[["B", -0.5], [" A", -1.5], ["C", -2.0], ["The", -3.5]])
    async with backend(oai) as b:
        out = await b.choice_by_labels(f"{m} Which is a fruit?", ["carrot", "apple", "stone"])
    s = E(-0.5) + E(-1.5) + E(-2.0) + E(-3.5)
    assert out.probs["apple"] == pytest.approx(E(-0.5) / s)
    assert out.probs["carrot"] == pytest.approx(E(-1.5) / s)
    assert out.probs["stone"] == pytest.approx(E(-2.0) / s)
    assert out.other == pytest.approx(E(-3.5) / s)
    assert out.meta["choice_method"] == "labels" and out.meta["method"] == "logprobs"
    assert out.meta["labels"] == {"A": "carrot", "B": "apple", "C": "stone"}
    assert "A. carrot\nB. apple\nC. stone" in out.prompt


async def test_generate_sends_params_and_returns_texts(oai: OAIServer) -> None:
    m = oai.script("[gen]", samples=["Paris", "Lyon", "Paris is the capital"])
    params = GenParams(max_new_tokens=16, temperature=0.7, top_p=0.9, n=3, seed=5, stop=["\n"])
    async with backend(oai) as b:
        out = await b.generate(f"{m} Capital of France?", params)
    assert out.texts == ["Paris", "Lyon", "Paris is the capital"]
    assert out.prompt == f"{m} Capital of France?"
    assert out.meta["method"] == "chat" and out.meta["system_fingerprint"] == "fp_test_0001"
    body = oai.log(m)[0]["body"]
    assert (body["n"], body["temperature"], body["top_p"], body["seed"]) == (3, 0.7, 0.9, 5)
    assert body["stop"] == ["\n"] and body["max_tokens"] == 16


# ---------------------------------------------------------------- the key never leaks


async def test_api_key_never_in_describe_stats_meta_or_errors(oai: OAIServer) -> None:
    m = oai.script("[key]", top=[["Yes", -0.1]])
    leak = oai.script(
        "[leak]", error={"status": 401, "message": f"Incorrect API key provided: {CANARY_KEY}."}
    )
    nolp = oai.script("[keynolp]", no_logprobs=True, samples=["Yes"])
    async with backend(oai) as b:  # key read from OPENAI_API_KEY (the canary)
        seen = [b.describe(), b.stats()]
        seen.append((await b.next_token(f"{m} q", ["yes", "no"])).meta)
        seen.append((await b.generate(f"{m} q", GenParams())).meta)
        seen.append((await b.loglik([("The cat", " sat")]))[0])
        with pytest.raises(BackendError) as ei:
            await b.next_token(f"{leak} q", ["yes", "no"])
        seen.append(str(ei.value))
        seen += [b.describe(), b.stats(), vars(b)]
    async with backend(oai) as b2:  # a model without logprobs: the sampled path
        seen.append((await b2.next_token(f"{nolp} q", ["yes", "no"])).meta)
        seen += [b2.describe(), b2.stats()]
    assert "HTTP 401" in seen[5]
    for s in seen:
        assert CANARY_KEY not in repr(s)
        assert "canary" not in repr(s)
    # it was really used: the server saw it
    assert oai.log(m)[0]["auth"] == f"Bearer {CANARY_KEY}"
    assert b.describe()["api_key"] == "env"


def test_missing_key_for_openai_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(BackendError, match="OPENAI_API_KEY"):
        OpenAIBackend(model="gpt-4o-mini")


def test_base_url_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.0.0.1:8000/v1/?token=abc")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    b = OpenAIBackend(model="openai:llama")
    d = b.describe()
    assert d["model"] == "llama" and d["base_url"] == "http://10.0.0.1:8000/v1/"
    assert "abc" not in repr(d)


# ---------------------------------------------------------------- more server dialects


async def test_vllm_style_logprobs_cap_without_param_name(oai: OAIServer) -> None:
    msg = "Requested sample logprobs of 20, which is greater than max allowed: 8"
    m = oai.script(
        "[vllmk]",
        top=[["Yes", -0.1]],
        reject=[{"param": "top_logprobs", "gt": 8, "message": msg, "hide_param": True}],
    )
    async with backend(oai) as b:
        out = await b.next_token(f"{m} q", ["yes", "no"])
    assert out.meta["top_k"] == 8
    assert [r["body"]["top_logprobs"] for r in oai.log(m)] == [20, 8]


async def test_probe_reports_capabilities_up_front(oai: OAIServer) -> None:
    oai.script("is water wet", no_logprobs=True, samples=["Yes"])
    async with backend(oai, samples=3) as b:
        d = await b.probe()
    assert d["logprobs"] is False and d["method"] == "sampled-estimate"


async def test_reasoning_effort_dropped_when_low_also_rejected(oai: OAIServer) -> None:
    m = oai.script(
        "[noeffort]",
        samples=["No"],
        reject=[
            {
                "param": "reasoning_effort",
                "equals": "minimal",
                "message": "unsupported 'reasoning_effort'",
            },
            {
                "param": "reasoning_effort",
                "equals": "low",
                "message": "unsupported 'reasoning_effort'",
            },
        ],
    )
    async with backend(oai, reasoning=True, samples=2) as b:
        out = await b.next_token(f"{m} q", ["yes", "no"])
        assert b.describe()["reasoning_effort"] is None
    assert out.probs == {"yes": 0.0, "no": 1.0}
    assert [r["body"].get("reasoning_effort") for r in oai.log(m)] == ["minimal", "low", None]
