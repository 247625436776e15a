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

# lm-eval's multiple-choice task on docs.jsonl beside the YAML, as a task file would say it.
TINY_ARC_YAML = """task: tiny_arc
dataset_path: json
dataset_kwargs:
  data_files:
    test: docs.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_choice: "{{choices.text}}"
doc_to_target: "{{choices.label.index(answerKey)}}"
"""


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
