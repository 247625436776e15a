"""Open-ended questions with clustered human answers (CFC / ProtoQA format), for ProbEval.

Each line of a `*_targets.jsonl` file holds `metadata.id`, `question.{original,normalized}`
and `answers.raw` (answer -> count) with `answers.clusters` (name -> {count, answers}).
Items become `generation` items sampled N times; `llmscope report` scores the samples
against the human clusters (ProbEval, Cheng et al. 2024).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmscope.data.registry import SuiteEntry, register_suite
from llmscope.data.suites import Suite, SuiteError, read_jsonl, suite_from_spec, suite_source
from llmscope.engine.types import Item

SPEC: dict[str, Any] = {
    "name": "cfc",
    "task": "generation",
    "description": "open-ended commonsense questions with ~100 clustered human answers each (CFC / ProtoQA)",
    "source": "qxc101/PROBEVAL_CFC",
    "id_field": "id",
    "text_field": "question",
    "templates": {"default": "{question} Answer with a short phrase."},
    "task_options": {
        "n": 20,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 12,
        "stop": ["\n"],
        "seed": 0,
        "chat": True,
    },
}


def load_cfc_items(path: Path) -> list[Item]:
    """Read a targets file; errors name the file, line and field."""
    items = []
    for n, rec in read_jsonl(path):
        try:
            qid = str(rec["metadata"]["id"])
        except (KeyError, TypeError):
            raise SuiteError("missing metadata.id", path, n, "metadata.id") from None
        q = rec.get("question")
        text = (q.get("normalized") or q.get("original")) if isinstance(q, dict) else q
        if not isinstance(text, str) or not text:
            raise SuiteError("missing question text", path, n, "question")
        ans = rec.get("answers") or {}
        raw = ans.get("raw") or {}
        if not isinstance(raw, dict):
            raise SuiteError("answers.raw must map answers to counts", path, n, "answers.raw")
        clusters = {
            k: {"count": v.get("count"), "answers": list(v.get("answers", []))}
            for k, v in (ans.get("clusters") or {}).items()
        }
        fields = {"id": qid, "question": text, "raw": raw, "clusters": clusters}
        items.append(Item(item_id=qid, fields=fields, text=text, line=n))
    return items


def load_cfc_suite(suite_path: str | Path | None = None) -> Suite:
    """The `cfc` suite from a targets file (default: the shared CFC dev set when present)."""
    path = suite_source(
        suite_path, "cfc/cfc_dev_targets.jsonl", "cfc", "a CFC/ProtoQA *_targets.jsonl file"
    )
    if not path.is_file():
        raise SuiteError("file not found", path)
    suite = suite_from_spec(dict(SPEC, source=str(path)), None)
    suite.items_path = path.resolve()
    suite._loader = lambda: load_cfc_items(path)
    return suite


CHOICE_SPEC: dict[str, Any] = {
    "name": "cfc-choice",
    "task": "choice",
    "description": "CFC / ProtoQA questions as choice items: one option per human answer cluster "
    "(its most frequent answer), with the cluster counts as human choice counts",
    "source": "qxc101/PROBEVAL_CFC",
    "id_field": "id",
    "text_field": "question",
    "options_field": "options",
    "human_counts_field": "human_counts",
    "templates": {"qa": "Question: {question}\nAnswer:"},
    "task_options": {"chat": False, "continuation": " {option}", "domain_prompt": "Answer:"},
}


def cfc_choice_items(path: Path) -> list[Item]:
    """Each question with one option per answer cluster (the cluster's most frequent raw answer;
    ties: the first listed) and the cluster counts as human choice counts, for the softmax fit."""
    out = []
    for it in load_cfc_items(path):
        raw = {str(k): int(v) for k, v in (it.fields.get("raw") or {}).items()}
        options: list[str] = []
        counts: list[int] = []
        for name, cl in (it.fields.get("clusters") or {}).items():
            answers = [str(a) for a in cl.get("answers") or []]
            if not answers or not cl.get("count"):
                continue
            rep = max(answers, key=lambda a: (raw.get(a, 0), -answers.index(a))).strip()
            if rep in options:  # two clusters led by the same string: keep them apart
                rep = f"{rep} ({name})"
            options.append(rep)
            counts.append(int(cl["count"]))
        if len(options) < 2:
            continue
        fields = {"id": it.item_id, "question": it.text, "options": options, "human_counts": counts}
        out.append(
            Item(item_id=it.item_id, fields=fields, options=options, text=it.text, line=it.line)
        )
    return out


def load_cfc_choice_suite(suite_path: str | Path | None = None) -> Suite:
    """The `cfc-choice` suite (default: the shared CFC dev set when present)."""
    base = load_cfc_suite(suite_path)
    assert base.items_path is not None
    path = base.items_path
    suite = suite_from_spec(dict(CHOICE_SPEC, source=str(path)), None)
    suite.items_path = path
    suite._loader = lambda: cfc_choice_items(path)
    return suite


register_suite(SuiteEntry("cfc", str(SPEC["task"]), load_cfc_suite, str(SPEC["description"])))
