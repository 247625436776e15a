"""Task base class: a task owns its rules, from suite validation to what the TUI shows.

A task type is one class (one module) that declares, next to its scoring:

- ``option_specs``: the options it reads (types, defaults, rules; engine/tasks/options.py);
- suite rules: ``needs_options``, ``default_answers``, ``needs_answers``, ``check_item``,
  ``gold_problem``, ``item_text``, ``design_options`` and ``fewshot_format`` (the suite
  loader in data/suites.py calls these; it holds no per-task rule itself);
- expansion into work units: ``expand_work`` (e.g. option-order permutations);
- what it stores and shows: ``result_fields`` (keys of `Result.extra`), ``item_fields``
  (the item list's columns and the drill-down's fields), ``default_method`` (export's
  method label when a row records none) and ``metric_names`` (what the metrics pipeline
  in analysis/ reports for it);
- ``needs``: the backend capabilities it cannot run without (engine/backend.py).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from llmscope.engine.backend import Backend, BackendConfigError, Capabilities
from llmscope.engine.tasks.options import OptionSpec, validate_task_options
from llmscope.engine.tasks.registry import TASKS as TASKS
from llmscope.engine.tasks.registry import register as register
from llmscope.engine.types import Item, Result, Work


# Shared by the tasks that can use a chat template (each states its own default).
def chat_option(default: bool) -> OptionSpec:
    """The ``chat`` option with a task's default."""
    return OptionSpec("chat", "bool", default, "pass the prompt through the model's chat template")


@dataclass(frozen=True)
class ItemField:
    """One field the item list (``column=True``) or the item drill-down shows for a task.

    ``key`` names a results column (``prediction``, ``gold``, ``correct``, ``confidence``,
    ``probs``...) or a key inside it after a dot (``extra.method``, ``probs.yes``).
    ``kind`` says how to format it: text, prob, number, bool, json or flags (a list of
    reasons, shown by their first words).
    """

    key: str
    label: str
    kind: str = "text"
    column: bool = True


# Every task's rows carry these (engine/types.py `Result`).
COMMON_ITEM_FIELDS: tuple[ItemField, ...] = (
    ItemField("prediction", "prediction"),
    ItemField("gold", "gold"),
    ItemField("correct", "correct", "bool"),
    ItemField("confidence", "confidence", "prob"),
    ItemField("error", "error", column=False),
)


class SuiteLike(Protocol):
    """What a task's suite rules read from a suite (data/suites.py `Suite` satisfies it)."""

    name: str
    task: str
    templates: dict[str, str]
    answers: list[str] | None
    options_field: str | None
    text_field: str
    task_options: dict[str, Any]
    spec_path: Path | None

    def variant_names(self) -> list[str]: ...


class Task(abc.ABC):
    """A scoring method a suite can name (`task:` in its spec)."""

    name: ClassVar[str]
    # Every option the task reads; anything else is rejected (engine/tasks/options.py).
    option_specs: ClassVar[tuple[OptionSpec, ...]] = ()
    # One line saying what the task measures (listings, docs).
    summary: ClassVar[str] = ""

    # -- suite rules (called by data/suites.py) -----------------------------------------
    needs_options: ClassVar[bool] = False  # every item must have a non-empty options list
    default_answers: ClassVar[tuple[str, ...] | None] = (
        None  # answer labels when the suite names none
    )
    needs_answers: ClassVar[str | None] = None  # the error when a suite names no answer labels
    design_options: ClassVar[frozenset[str]] = frozenset()  # data/design.py factors that apply
    fewshot_format: ClassVar[str] = "{prompt}\n{answer}"  # one few-shot demo (data/design.py)

    # -- what is stored and shown ---------------------------------------------------------
    default_method: ClassVar[str | None] = None  # method label when a row records none (export)
    predicts_option: ClassVar[bool] = (
        False  # the prediction is one of a fixed set of answers/options
    )
    lm_eval_metric: ClassVar[str] = "acc"  # the per-item score's name in an lm-eval export
    result_fields: ClassVar[tuple[str, ...]] = ()  # keys the task writes into Result.extra
    item_fields: ClassVar[tuple[ItemField, ...]] = COMMON_ITEM_FIELDS
    # The metrics pipeline's task-specific producers (analysis/ `register_producer(name)`)
    # that report on this task's runs, besides those registered `every_task=True`. The
    # single source: the pipeline asks the task (engine/tasks/registry.py `task_producers`).
    metric_producers: ClassVar[tuple[str, ...]] = ()
    # What this task's stored results carry that analyses and views ask about, instead of
    # testing the task's name (`task_has(task, trait)`); see TRAITS.
    traits: ClassVar[frozenset[str]] = frozenset()

    # -- backend capabilities the task cannot run without (engine/backend.py) -------------
    needs: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = validate_task_options(type(self), dict(options or {}))

    def describe(self) -> dict[str, Any]:
        """Options recorded with the run (they make part of the run's identity)."""
        return {"task": self.name, **self.options}

    # -- suite rules ----------------------------------------------------------------------
    @classmethod
    def item_text(cls, record: Mapping[str, Any]) -> str | None:
        """The item's display text when the suite's text field is absent (None: none)."""
        return None

    @classmethod  # noqa: B027 - a hook: most tasks add no item rule
    def check_item(cls, item: Item, suite: SuiteLike, src: Path | None) -> None:
        """Reject an item the task cannot score: raise `engine.errors.SuiteError` naming
        ``src``, ``item.line`` and the field. Called after the generic checks."""

    @classmethod
    def gold_problem(cls, gold: str, options: list[str] | None, suite: SuiteLike) -> str | None:
        """Why ``gold`` can never be matched by this task's scoring (None: it can)."""
        return None

    @classmethod
    def expand_work(cls, work: Work, suite: SuiteLike, options: Mapping[str, Any]) -> list[Work]:
        """The work units one item × template stands for under the run's ``options``
        (default: just itself)."""
        return [work]

    # -- capabilities -----------------------------------------------------------------------
    def required_capabilities(self) -> frozenset[str]:
        """The capabilities this configured task needs (``needs`` unless options change it)."""
        return self.needs

    def probe_need(self) -> str:
        """What an API backend must prove before the run: next_token, loglik, options or
        generate (engine/openai/probe.py `probe`)."""
        caps = self.required_capabilities()
        if "generate" in caps:
            return "generate"
        if "loglik" in caps:
            return "loglik"
        return "next_token"

    def check_backend(self, backend: Backend) -> None:
        """BackendConfigError naming what is missing when ``backend`` cannot run this task
        (checked before anything is stored)."""
        missing = backend.capabilities.missing(self.required_capabilities())
        if missing:
            raise BackendConfigError(
                f"task {self.name!r} needs {', '.join(missing)}, which {backend.kind} backend "
                f"{backend.describe().get('model', '')!r} does not offer".replace(" ''", "")
            )

    # -- per run and per item -------------------------------------------------------------
    async def prepare(self, backend: Backend) -> None:  # noqa: B027
        """Once per run before any item (e.g. content-free calibration passes)."""

    @abc.abstractmethod
    async def score(self, work: Work, backend: Backend) -> Result:
        """Score one item under one prompt variant."""


__all__ = [
    "COMMON_ITEM_FIELDS",
    "Capabilities",
    "ItemField",
    "SuiteLike",
    "TASKS",
    "Task",
    "chat_option",
    "register",
]
