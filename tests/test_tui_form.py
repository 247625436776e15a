"""The new-run form (tui/panels_form.py): every `llmscope run` option, the same BackendConfig
the CLI fills, numbers and task options checked with the CLI's rules and named by field."""

from __future__ import annotations

import pytest

from llmscope.cli import build_parser, config_from_args
from llmscope.tui.panels_form import FIELDS, FormError, check_task_options, form_run


def _cli_config(argv: list[str]) -> object:
    args = build_parser().parse_args(["run", *argv])
    args.config_defaults = {}  # no llmscope.toml beneath the flags: the form has none either
    return config_from_args(args)


def test_every_field_fills_the_config_the_cli_fills() -> None:
    values = {
        "suite": "commonsense-sample", "suite_path": "", "model": "openai:m", "base_url": "http://x/v1",
        "device": "cpu", "dtype": "float32", "chat": "off", "threads": "3", "batch_size": "5",
        "concurrency": "7", "limit": "9", "seed": "11", "top_logprobs": "13", "reasoning": "on",
        "options": "top_k=4 content_free='[\"N/A\"]'",
    }
    run = form_run(values)
    cli = _cli_config(["--suite", "commonsense-sample", "--model", "openai:m", "--base-url", "http://x/v1",
                       "--device", "cpu", "--dtype", "float32", "--no-chat", "--threads", "3",
                       "--batch-size", "5", "--concurrency", "7", "--seed", "11", "--top-logprobs", "13",
                       "--reasoning"])
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
    err, _ = check_task_options(form_run({"suite": "commonsense-sample", "options": "top_k=3", "chat": "on"}))
    assert err is None
    err, _ = check_task_options(form_run({"suite": "no-such-suite"}))
    assert err is not None and err.startswith("suite: ")
