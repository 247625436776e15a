"""lm-evaluation-harness task YAML run as llmscope suites (data/lm_eval_tasks.py).

Expected contexts, continuations and golds are written out by hand from lm-eval's rules
(context = description + doc_to_text; continuation = target_delimiter + choice)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscope.data.suites import SuiteError, load_suite
from tests.helpers.lm_eval import TINY_ARC_DOCS, TINY_ARC_YAML, write_task

DOCS = TINY_ARC_DOCS
MC_YAML = TINY_ARC_YAML + "metric_list:\n  - metric: acc\n  - metric: acc_norm\n"


def _write(
    tmp_path: Path, yaml_text: str, docs: list[dict] = DOCS, name: str = "task.yaml"
) -> Path:
    return write_task(tmp_path, yaml_text, docs, name)


def test_multiple_choice_yaml_as_a_choice_suite(tmp_path: Path) -> None:
    suite = load_suite(_write(tmp_path, MC_YAML))
    assert (suite.name, suite.task) == ("tiny_arc", "choice")
    work = suite.work()
    assert [w.item.item_id for w in work] == ["0", "1"]  # lm-eval's doc_id
    assert work[0].prompt == "Question: What color is the sky on a clear day?\nAnswer:"
    assert work[0].options == ["green", "blue", "red"]
    assert [w.gold for w in work] == ["blue", "four"]
    # lm-eval scores " " + choice after the context, with no calibration requests
    assert suite.task_options["continuation"] == " {option}"
    assert suite.task_options["content_free"] == [] and suite.task_options["domain_prompt"] == ""
    assert suite.task_options["chat"] is False


def test_column_names_description_delimiter_and_include(tmp_path: Path) -> None:
    docs = [{"q": "2+2=", "opts": ["3", "4"], "ans": 1, "subject": "math"}]
    (tmp_path / "base.yaml").write_text(
        "dataset_path: json\ndataset_kwargs: {data_files: docs.jsonl}\nvalidation_split: train\n"
        "output_type: multiple_choice\ndoc_to_text: q\ndoc_to_choice: opts\ndoc_to_target: ans\n"
    )
    suite = load_suite(
        _write(
            tmp_path,
            "include: base.yaml\ntask: sums\ntarget_delimiter: ''\n"
            'description: "Subject: {{subject}}.\\n"\n',
            docs,
        )
    )
    (w,) = suite.work()
    assert w.prompt == "Subject: math.\n2+2="
    assert w.options == ["3", "4"] and w.gold == "4"
    assert suite.task_options["continuation"] == "{option}"


def test_target_as_choice_text_and_choice_list(tmp_path: Path) -> None:
    docs = [{"s": "The cat sat.", "label": "no"}]
    y = (
        "task: yn\ndataset_path: json\ndataset_kwargs: {data_files: {test: docs.jsonl}}\ntest_split: test\n"
        "output_type: multiple_choice\ndoc_to_text: \"{{s}} Question: true?\"\ndoc_to_choice: ['yes', 'no']\n"
        'doc_to_target: "{{label}}"\n'
    )
    (w,) = load_suite(_write(tmp_path, y, docs)).work()
    assert (w.options, w.gold) == (["yes", "no"], "no")


def test_loglikelihood_yaml_gives_one_option_without_gold(tmp_path: Path) -> None:
    docs = [{"context": "The capital of France is", "word": "Paris"}]
    y = (
        "task: lamb\ndataset_path: json\ndataset_kwargs: {data_files: {test: docs.jsonl}}\ntest_split: test\n"
        'output_type: loglikelihood\ndoc_to_text: "{{context}}"\ndoc_to_target: "{{word}}"\n'
    )
    (w,) = load_suite(_write(tmp_path, y, docs)).work()
    assert (w.prompt, w.options, w.gold) == ("The capital of France is", ["Paris"], None)


@pytest.mark.parametrize(
    "yaml_text, message",
    [
        (MC_YAML + "process_docs: !function utils.process_docs\n", "!function utils.process_docs"),
        (
            MC_YAML.replace("multiple_choice", "generate_until"),
            "output_type 'generate_until' is not supported",
        ),
        (
            MC_YAML.replace("{{choices.label.index(answerKey)}}", "{{answer}}"),
            "'answer' is undefined",
        ),
        (MC_YAML.replace("docs.jsonl", "nothere.jsonl"), "data file not found: nothere.jsonl"),
        (MC_YAML + "num_fewshot: 5\n", "few-shot"),
    ],
)
def test_unsupported_or_broken_yaml_is_a_clear_error(
    tmp_path: Path, yaml_text: str, message: str
) -> None:
    with pytest.raises(SuiteError) as e:
        load_suite(_write(tmp_path, yaml_text)).items()
    assert message in str(e.value)
    assert "\n" not in str(e.value).strip()


DESC_YAML = (
    "task: sums\ndataset_path: json\ndataset_kwargs: {data_files: {test: docs.jsonl}}\ntest_split: test\n"
    "output_type: multiple_choice\ndescription: \"Answer the question.\\n\\n\"\ntarget_delimiter: ''\n"
    'doc_to_text: question\ndoc_to_choice: "{{choices.text}}"\ndoc_to_target: "{{answerKey}}"\n'
)


@pytest.mark.parametrize(
    "yaml_text", [MC_YAML, DESC_YAML], ids=["jinja", "columns-description-delimiter"]
)
def test_matches_lm_evals_own_task_loader(tmp_path: Path, yaml_text: str) -> None:
    """Where lm-eval is installed (the `bench` extra), its ConfigurableTask builds the same requests."""
    pytest.importorskip(
        "lm_eval", reason="lm-eval is not installed (pip install 'llmscope[bench]')"
    )
    import yaml
    from lm_eval.api.task import ConfigurableTask

    docs = (
        DOCS
        if yaml_text is MC_YAML
        else [
            {"question": "Q: 2+2?", "choices": {"text": ["four", "five"]}, "answerKey": "four"},
            {"question": "Q: 3+3?", "choices": {"text": ["five", "six"]}, "answerKey": "six"},
        ]
    )
    path = _write(tmp_path, yaml_text.replace("docs.jsonl", str(tmp_path / "docs.jsonl")), docs)
    task = ConfigurableTask(config=yaml.safe_load(path.read_text()))
    suite = load_suite(path)
    delim = suite.task_options["continuation"].replace("{option}", "")
    for doc_id, doc in enumerate(task.test_docs()):
        ctx = task.fewshot_context(doc, 0)
        reqs = task.construct_requests(doc, ctx, metadata=("t", doc_id, 1))
        w = suite.work()[doc_id]
        assert [r.args for r in reqs] == [(w.prompt, delim + o) for o in w.options]
        target = task.doc_to_target(doc)
        assert (w.options[target] if isinstance(target, int) else target) == w.gold
