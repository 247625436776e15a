"""A tiny lm-evaluation-harness task (two ARC-style questions) for the task-YAML and import tests."""

from __future__ import annotations

import json
from pathlib import Path

TINY_ARC_DOCS = [
    {
        "question": "What color is the sky on a clear day?",
        "choices": {"text": ["green", "blue", "red"], "label": ["A", "B", "C"]},
        "answerKey": "B",
    },
    {
        "question": "How many legs does a dog have?",
        "choices": {"text": ["four", "two", "six"], "label": ["A", "B", "C"]},
        "answerKey": "A",
    },
]


def mc_task_yaml(task: str, choice: str, target: str, tail: str = "") -> str:
    """An lm-eval multiple-choice task YAML on docs.jsonl beside it (a "Question: ...\\nAnswer:"
    prompt), as a task file would say it; `tail` adds more keys (metric_list, ...)."""
    return (
        f"task: {task}\n"
        "dataset_path: json\n"
        "dataset_kwargs:\n"
        "  data_files:\n"
        "    test: docs.jsonl\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "Question: {{question}}\\nAnswer:"\n'
        f'doc_to_choice: "{choice}"\n'
        f'doc_to_target: "{target}"\n'
    ) + tail


TINY_ARC_YAML = mc_task_yaml("tiny_arc", "{{choices.text}}", "{{choices.label.index(answerKey)}}")


def write_task(
    folder: Path,
    yaml_text: str = TINY_ARC_YAML,
    docs: list[dict] = TINY_ARC_DOCS,
    name: str = "task.yaml",
) -> Path:
    """docs.jsonl and the task YAML in `folder`; returns the YAML's path."""
    (folder / "docs.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    p = folder / name
    p.write_text(yaml_text)
    return p


def main_db(db: Path, *args: str) -> int:
    """`llmscope --db DB ARGS` in this process (its output to the test's capture): the exit status."""
    from llmscope.cli import main

    return main(["--db", str(db), *args])


def run_yaml(db: Path, yaml_path: str | Path) -> int:
    """The embedded model runs the task YAML as a suite, on one thread, quietly, without a report."""
    return main_db(db, "run", "--suite", str(yaml_path), "--threads", "1", "--quiet", "--no-report")
