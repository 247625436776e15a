"""Capabilities probed once and recorded, the method chosen per task, the echo sanity check,
adaptation to deterministic errors, key redaction and the raw top-k mass.

Real HTTP against tests/oai_server.py; expected numbers are worked out here from the
scripted log-probs.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
from pathlib import Path
from typing import Any

import duckdb
import pytest

from llmscope import cli
from llmscope.analysis.api_method import api_method_rows, method_banner
from llmscope.engine.backend import BackendConfigError, BackendError
from llmscope.engine.openai import OpenAIBackend
from llmscope.engine.openai.endpoints import redactor
from llmscope.engine.openai.topk import apply_topk_rule
from tests.helpers import oai as oai_fixtures
from tests.helpers.cli import api_run_args, query
from tests.helpers.oai import CANARY_KEY, OAIServer, note_fault_outcome

oai_server = oai_fixtures.oai_server
oai = oai_fixtures.oai
E = math.exp
CHECK = "The capital of France is"


def _backend(server: OAIServer, **kw: Any) -> OpenAIBackend:
    kw.setdefault("timeout", 5.0)
    return OpenAIBackend(model="test-model", base_url=server.base_url, **kw)


# ------------------------------------------------------------ echo sanity check


async def test_echo_agreeing_with_next_token_is_accepted(oai: OAIServer) -> None:
    oai.script(CHECK, token_logprobs={" yes": -0.4})
    oai.script("The cat", token_logprobs={" sat": -2.0})
    b = _backend(oai)
    try:
        (out,) = await b.loglik([("The cat", " sat")])
        caps = b.describe()["capabilities"]
    finally:
        await b.aclose()
    assert out.logprob == pytest.approx(-2.0)
    assert caps["echo_loglik"] is True
    assert "' yes': next-token -0.400 vs echo -0.400" in caps["echo_check"]


async def test_shifted_echo_is_refused_with_the_numbers(oai: OAIServer) -> None:
    """llama-cpp-python's server shifts echo log-probs by one token."""
    oai.script(CHECK, token_logprobs={" yes": -0.4}, echo_shift=True)
    m = oai.script("The cat", token_logprobs={" sat": -2.0}, echo_shift=True)
    b = _backend(oai)
    try:
        with pytest.raises(BackendError, match="disagree") as ei:
            await b.loglik([("The cat", " sat")])
        with pytest.raises(BackendError, match="disagree"):
            await b.loglik([("The cat", " mat")])  # remembered: no new requests
        d = b.describe()
    finally:
        await b.aclose()
    # the greedy token ' yes' has -0.4; shifted echo gives it the log-prob of what follows
    # (nothing: max_tokens=0, the server's -7.5)
    assert "' yes': next-token -0.400 vs echo -7.500" in str(ei.value)
    assert d["capabilities"]["echo_loglik"] is False and d["loglik"] == "unsupported"
    assert any("echo refused" in a for a in d["adaptations"])
    assert oai.log(m) == []  # the item's text was never scored with the broken echo


def _write_suite(tmp: Path, name: str, rows: list[dict], yaml_text: str) -> Path:
    """`name`.jsonl holding `rows` and the suite file `name`.yaml that reads it."""
    (tmp / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp / f"{name}.yaml"
    spec.write_text(yaml_text)
    return spec


def _choice_suite(tmp: Path) -> Path:
    rows = [
        {"id": f"q{k}", "question": f"Question {k}?", "options": ["red", "blue"], "gold": "red"}
        for k in range(2)
    ]
    return _write_suite(
        tmp,
        "mc",
        rows,
        "name: mc\ntask: choice\nitems: mc.jsonl\ntext_field: question\ngold_field: gold\n"
        "options_field: options\ntemplates:\n  qa: 'Question: {question}\\nAnswer:'\n"
        "task_options:\n  chat: false\n  continuation: ' {option}'\n",
    )


def _minpairs_suite(tmp: Path) -> Path:
    rows = [
        {"id": f"m{k}", "sentences": ["The cats sleep.", "The cats sleeps."], "good": 0}
        for k in range(3)
    ]
    return _write_suite(
        tmp,
        "mp",
        rows,
        "name: mp\ntask: minpairs\nitems: mp.jsonl\ntext_field: id\n"
        "task_options:\n  context: text\n  context_text: 'Sentence: '\n",
    )


def _run(
    capsys: pytest.CaptureFixture[str], spec: Path, db: Path, url: str, *extra: str
) -> tuple[int, str]:
    rc = cli.main(api_run_args(spec, db, url, "--max-retries", "3", "--timeout", "2", *extra))
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return rc, out.out + out.err


def _run_row(db: Path) -> dict[str, Any]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        df = con.execute("SELECT * FROM runs").fetch_df()
    finally:
        con.close()
    assert len(df) == 1
    row = df.iloc[0].to_dict()
    row["meta"] = json.loads(row["meta"])
    return row


def test_choice_run_with_shifted_echo_uses_labels_and_says_so(
    oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oai.script("", echo_shift=True, top=[["A", -0.2], ["B", -2.0]])
    db = tmp_path / "c.duckdb"
    rc, out = _run(capsys, _choice_suite(tmp_path), db, oai.base_url)
    assert rc == 0, out
    run = _run_row(db)
    choice = run["meta"]["backend"]["method_choice"]
    assert choice["method"] == "option labels A/B/C... (chat top-k log-probs)"
    assert "disagree" in choice["reason"]
    assert "method: option labels" in out
    extras = [json.loads(r[0]) for r in query(db, "SELECT extra FROM results")]
    preds = [r[0] for r in query(db, "SELECT prediction FROM results")]
    assert [e["choice_method"] for e in extras] == ["labels", "labels"]
    assert preds == ["red", "red"]  # label A (red): e^-0.2 against e^-2.0
    banner = method_banner(run)
    assert banner is not None and banner.startswith("API method: option labels")
    # the report shows the method share (traceable to the stored rows)
    assert "method_share" in out and "labels" in out


def test_minpairs_without_loglik_stops_before_anything_is_stored(
    oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oai.script("", echo_shift=True)
    db = tmp_path / "m.duckdb"
    rc, out = _run(capsys, _minpairs_suite(tmp_path), db, oai.base_url)
    assert rc == 2
    line = [ln for ln in out.splitlines() if ln.startswith("llmscope: error:")]
    assert len(line) == 1 and "cannot score task 'minpairs'" in line[0] and "disagree" in line[0]
    assert not db.exists()  # refused before a run: the file it created is removed


# ------------------------------------------------------------ deterministic errors: adapt once


def test_list_of_prompts_rejected_adapts_to_one_prompt_per_request(
    oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """llama.cpp answers a list of prompts with HTTP 500 `assert len(body.prompt) <= 1`."""
    oai.script(
        "",
        reject=[
            {
                "param": "prompt",
                "is_list": True,
                "status": 500,
                "message": "assert len(body.prompt) <= 1",
            }
        ],
        token_logprobs={" sleep.": -0.5, " sleeps.": -3.0},
    )
    db = tmp_path / "m.duckdb"
    rc, out = _run(capsys, _minpairs_suite(tmp_path), db, oai.base_url)
    assert rc == 0, out
    listed = [e for e in oai.log() if isinstance(e["body"].get("prompt"), list)]
    assert len(listed) == 3  # the probe's batched request: 3 identical 500s, then adapted
    run = _run_row(db)
    be = run["meta"]["backend"]
    assert be["loglik_batch"] == 1 and be["capabilities"]["batched_prompts"] is False
    assert any(
        "one prompt per request" in a and "assert len(body.prompt)" in a for a in be["adaptations"]
    )
    assert run["meta"]["backend_stats"]["deterministic"] == 1
    note_fault_outcome(
        "batched prompts rejected (HTTP 500)",
        "adapted once to one prompt per request after 3 identical "
        "500s (probe); 3/3 items scored, 0 list requests during the run",
    )
    rows = query(db, "SELECT option_scores, correct, error FROM results ORDER BY item_id")
    assert len(rows) == 3
    for scores, correct, error in rows:
        s = json.loads(scores)
        # " The" and " cats" score -1.0 each (unknown tokens), then the verb
        assert s["The cats sleep."]["logprob"] == pytest.approx(-1.0 - 1.0 - 0.5)
        assert s["The cats sleeps."]["logprob"] == pytest.approx(-1.0 - 1.0 - 3.0)
        assert correct == 1.0 and error is None


# ------------------------------------------------------------ capabilities probed, recorded


async def test_probe_records_capabilities_and_top_k_limit(oai: OAIServer) -> None:
    msg = "Requested sample logprobs of 20, which is greater than max allowed: 8"
    oai.script("", reject=[{"param": "top_logprobs", "gt": 8, "message": msg, "hide_param": True}])
    b = _backend(oai)
    try:
        d = await b.probe("choice")
    finally:
        await b.aclose()
    caps = d["capabilities"]
    assert caps["chat_logprobs"] is True and caps["top_logprobs_limit"] == 8
    assert caps["echo_loglik"] is True and caps["batched_prompts"] is True
    assert d["method_choice"]["method"] == "completions echo log-likelihoods"


async def test_one_null_logprobs_probe_answer_does_not_downgrade(oai: OAIServer) -> None:
    """A single transient `logprobs: null` on the first request."""
    oai.script(
        "is water wet", faults=[{"spec": {"no_logprobs": True}}], top=[["Yes", -0.1], ["No", -2.5]]
    )
    b = _backend(oai)
    try:
        d = await b.probe("yesno")
    finally:
        await b.aclose()
    assert d["logprobs"] is True and d["method"] == "logprobs"
    assert len(oai.log("is water wet")) == 2


async def test_probe_config_errors(oai: OAIServer) -> None:
    oai.script("", error={"status": 403, "message": "forbidden"})
    b = _backend(oai)
    try:
        with pytest.raises(
            BackendConfigError, match=r"API key was rejected \(HTTP 403: forbidden\)"
        ):
            await b.probe("yesno")
    finally:
        await b.aclose()


def test_base_url_userinfo_and_bad_scheme_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    with pytest.raises(BackendConfigError, match="user:password@") as ei:
        OpenAIBackend("m", base_url=f"http://me:{CANARY_KEY}@127.0.0.1:1/v1")
    assert CANARY_KEY not in str(ei.value)
    with pytest.raises(BackendConfigError, match="http"):
        OpenAIBackend("m", base_url="ftp://127.0.0.1/v1")


# ------------------------------------------------------------ redaction


def test_redactor_removes_key_base64_forms_and_authorization_values() -> None:
    r = redactor(CANARY_KEY)
    for user in ("", "u", "us", "user"):
        basic = base64.b64encode(f"{user}:{CANARY_KEY}".encode()).decode()
        for text in (
            f"Authorization: Basic {basic}",
            f"echo {basic} end",
            f"{{'authorization': 'Basic {basic}'}}",
        ):
            red = r(text)
            assert basic not in red and CANARY_KEY not in red
            # no 12-character run of the key's base64 survives at any alignment
            for pad in ("", "x", "xy"):
                enc = base64.b64encode((pad + CANARY_KEY).encode()).decode()
                assert not any(enc[i : i + 12] in red for i in range(8, len(enc) - 16))
    assert r(f"Bearer {CANARY_KEY}") == "Bearer ***"
    assert r("authorization: Bearer some-other-token-1234") == "authorization: ***"
    assert r("see http://alice:pw@host/v1") == "see http://***@host/v1"
    assert r("nothing secret here") == "nothing secret here"


# ------------------------------------------------------------ raw top-k mass


def test_raw_topk_mass_and_bounds() -> None:
    top = [("Yes", -0.7), (" yes", -2.5), ("No", -1.6), ("Maybe", -3.2)]
    probs, other, rule, d = apply_topk_rule(top, ["yes", "no"])
    seen = E(-0.7) + E(-2.5) + E(-1.6) + E(-3.2)
    assert rule == "all-present"
    assert d["topk_mass"] == pytest.approx(seen)
    assert d["raw_probs"] == pytest.approx({"yes": E(-0.7) + E(-2.5), "no": E(-1.6)})
    unseen = 1 - seen
    assert d["prob_bounds"]["yes"] == pytest.approx([E(-0.7) + E(-2.5), E(-0.7) + E(-2.5) + unseen])
    assert d["prob_bounds"]["no"] == pytest.approx([E(-1.6), E(-1.6) + unseen])
    # the rule rescales: P(yes) = raw / seen, inside the bounds only when seen mass is near 1
    assert probs["yes"] == pytest.approx((E(-0.7) + E(-2.5)) / seen)


def test_api_method_rows_mean_seen_mass() -> None:
    import pandas as pd

    extras = [
        {"method": "logprobs", "topk_mass": 0.9},
        {"method": "logprobs", "topk_mass": 0.7},
        {"method": "sampled-estimate"},
    ]
    df = pd.DataFrame(
        {
            "error": [None, None, None, "boom"],
            "extra": [json.dumps(e) for e in extras] + [json.dumps({"topk_mass": 0.1})],
        }
    )
    run = {"run_id": "r1", "model": "m", "backend": "openai", "suite_name": "s"}
    rows = {(r["metric"], r["group"].get("method")): r for r in api_method_rows(df, run, {})}
    assert rows[("topk_seen_mass", None)]["value"] == pytest.approx(0.8)  # errored row excluded
    assert rows[("topk_seen_mass", None)]["n"] == 2
    assert rows[("method_share", "logprobs")]["value"] == pytest.approx(2 / 3)
    assert rows[("method_share", "sampled-estimate")]["n"] == 1
    assert api_method_rows(df, {**run, "backend": "hf"}, {}) == []


# ------------------------------------------------------------ vLLM prompt_logprobs


async def test_vllm_prompt_logprobs_scoring(oai: OAIServer) -> None:
    """vLLM's completions extension: per-prompt-token {id: {logprob, rank, decoded_token}}."""
    table = {" yes": -0.4, " cat": -1.2, " sat": -2.0, " down": -0.5, " mat": -3.0}
    oai.script("", vllm=True, token_logprobs=table)
    b = _backend(oai, loglik_batch=2)
    try:
        outs = await b.loglik([("The cat", " sat down"), ("The cat ", "sat"), ("The cat", " mat")])
        d = b.describe()
    finally:
        await b.aclose()
    assert [o.logprob for o in outs] == pytest.approx([-2.0 - 0.5, -2.0, -3.0])
    assert outs[0].tokens == [" sat", " down"] and outs[0].n_context_tokens == 2
    assert d["loglik"] == "vllm-prompt_logprobs" and d["capabilities"]["prompt_logprobs"] is True
    scored = [e["body"] for e in oai.log() if isinstance(e["body"].get("prompt"), list)]
    assert scored and all(x.get("prompt_logprobs") == 0 and "echo" not in x for x in scored)
    assert sum(1 for e in oai.log() if e["body"].get("echo")) == 0  # echo never needed


def test_vllm_prompt_logprobs_choice_run(
    oai: OAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oai.script("", vllm=True, echo_shift=True, token_logprobs={" red": -0.3, " blue": -2.3})
    db = tmp_path / "v.duckdb"
    rc, out = _run(capsys, _choice_suite(tmp_path), db, oai.base_url)
    assert rc == 0, out
    run = _run_row(db)
    assert (
        run["meta"]["backend"]["method_choice"]["method"] == "vLLM prompt_logprobs log-likelihoods"
    )
    got = query(db, "SELECT prediction, option_scores FROM results ORDER BY item_id")
    for pred, scores in got:
        s = json.loads(scores)
        assert pred == "red"
        assert s["red"]["logprob"] == pytest.approx(-0.3) and s["blue"]["logprob"] == pytest.approx(
            -2.3
        )


# ------------------------------------------------------------ TUI banner


async def test_tui_dashboard_shows_the_api_method(oai: OAIServer, tmp_path: Path) -> None:
    from llmscope.tui.app import LlmscopeApp
    from llmscope.tui.screens import DashboardScreen
    from tests.helpers.tui import screen_text, settle

    oai.script("", echo_shift=True, top=[["A", -0.2], ["B", -2.0]])
    db = tmp_path / "t.duckdb"
    argv = [
        "run",
        "--suite",
        str(_choice_suite(tmp_path)),
        "--db",
        str(db),
        "--model",
        "openai:test-model",
        "--base-url",
        oai.base_url,
        "--no-report",
        "--quiet",
    ]
    assert await asyncio.to_thread(cli.main, argv) == 0  # the CLI runs its own event loop
    app = LlmscopeApp(db)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DashboardScreen)
        text = screen_text(app)
    assert "API method: option labels A/B/C... (chat top-k log-probs)" in text


def test_method_banner_lists_adaptations_made_mid_run() -> None:
    meta = {
        "backend": {
            "method_choice": {"method": "completions echo log-likelihoods", "reason": "agree"},
            "adaptations": ["a1"],
        },
        "backend_stats": {"adaptations": ["a1", "one prompt per request: HTTP 500"]},
    }
    banner = method_banner({"meta": json.dumps(meta)})
    assert banner == (
        "API method: completions echo log-likelihoods (agree); adapted: a1; "
        "one prompt per request: HTTP 500"
    )
    assert method_banner({"meta": json.dumps({"backend": {"backend": "hf"}})}) is None


def test_prompt_logprobs_that_do_not_spell_the_prompt_fail_at_once() -> None:
    from llmscope.engine.openai.loglik import prompt_logprobs_as_echo

    choice = {
        "prompt_logprobs": [
            None,
            {"7": {"logprob": -1.0, "rank": 1, "decoded_token": " caf\ufffd"}},
        ],
        "prompt_token_ids": [5, 7],
    }
    with pytest.raises(BackendError, match="do not spell the prompt"):
        prompt_logprobs_as_echo(choice, "The café")
    ok = prompt_logprobs_as_echo(
        {**choice, "prompt_logprobs": [None, {"7": {"logprob": -1.0, "decoded_token": " café"}}]},
        "The café",
    )
    # the first token's text is rebuilt from the prompt; offsets follow the decoded texts
    assert ok == {"tokens": ["The", " café"], "token_logprobs": [None, -1.0], "text_offset": [0, 3]}
