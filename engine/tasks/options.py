"""Declared task options: every option a task reads is listed with its type, default and rule.

A suite's ``task_options``, ``--opt KEY=VALUE`` on the command line and the TUI's options
field all go through :func:`validate_task_options`, so an unknown key or a value of the
wrong type is a one-line error naming the option and the allowed ones, wherever it comes
from. Validation never fills in defaults: the options given are what the run records (and
hashes into its id), so adding a default later does not change old run ids.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from llmscope.engine.tasks.registry import lookup

__all__ = [
    "OptionSpec",
    "TaskOptionError",
    "COMMON_OPTIONS",
    "FEWSHOT_OPTION",
    "validate_task_options",
    "option_table",
]


class TaskOptionError(ValueError):
    """An unknown task option or a value of the wrong type (message names both)."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(float(v))


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "int": (_is_int, "an integer"),
    "float": (_is_num, "a finite number"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "str?": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "int?": (lambda v: v is None or _is_int(v), "an integer or null"),
    "list[str]": (_is_str_list, "a list of strings"),
    "str|list[str]": (
        lambda v: isinstance(v, str) or _is_str_list(v),
        "a string or a list of strings",
    ),
    "dict[str,str]": (
        lambda v: (
            isinstance(v, dict)
            and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())
        ),
        "a mapping of strings to strings",
    ),
    "dict[str,str]?": (
        lambda v: (
            v is None
            or (
                isinstance(v, dict)
                and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())
            )
        ),
        "a mapping of strings to strings, or null",
    ),
}


@dataclass(frozen=True)
class OptionSpec:
    """One task option: ``type`` is a key of the type table (``bool``, ``int``, ``float``,
    ``str``, ``list[str]``, ...); ``choices`` and ``min``/``max`` narrow it further."""

    name: str
    type: str
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    min: float | None = None
    max: float | None = None

    def check(self, value: Any) -> str | None:
        """None when ``value`` is allowed, else the reason (for the error message)."""
        ok, what = _TYPES[self.type]
        if not ok(value):
            return f"must be {what}, got {value!r}"
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(map(str, self.choices))}, got {value!r}"
        if self.min is not None and _is_num(value) and value < self.min:
            return f"must be >= {self.min:g}, got {value!r}"
        if self.max is not None and _is_num(value) and value > self.max:
            return f"must be <= {self.max:g}, got {value!r}"
        return None


# Passed by the runner from the suite (not usually typed by a user), accepted by every task.
# The few-shot option of the tasks that take demos (choice, rating, yesno): one declaration.
FEWSHOT_OPTION = OptionSpec(
    "fewshot", "any", None, "few-shot demos: k, source, labels, orders, seed (data/design.py)"
)

COMMON_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("templates", "any", None, "prompt templates per variant (from the suite)"),
    OptionSpec("text_field", "str?", None, "the suite's text field (from the suite)"),
    OptionSpec("answers", "list[str]", None, "the suite's answer labels (from the suite)"),
)
_TYPES["any"] = (lambda v: True, "anything")


def _specs_for(task: str | type) -> dict[str, OptionSpec]:
    if isinstance(task, str):
        try:
            cls: type = lookup(task)
        except KeyError as e:
            raise TaskOptionError(str(e.args[0])) from None
    else:
        cls = task
    specs = {s.name: s for s in COMMON_OPTIONS}
    for s in getattr(cls, "option_specs", ()):
        specs[s.name] = s
    return specs


def validate_task_options(task: str | type, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` unchanged when every key is declared by ``task`` (a name or a Task class)
    and every value fits; otherwise :class:`TaskOptionError` naming the option and the
    allowed ones."""
    specs = _specs_for(task)
    task = task if isinstance(task, str) else str(getattr(task, "name", task))
    for key, value in options.items():
        spec = specs.get(key)
        if spec is None:
            allowed = ", ".join(
                sorted(k for k in specs if k not in {s.name for s in COMMON_OPTIONS})
            )
            raise TaskOptionError(
                f"unknown option {key!r} for task {task!r}; allowed: {allowed or '(none)'}"
            )
        why = spec.check(value)
        if why is not None:
            raise TaskOptionError(f"option {key!r} of task {task!r} {why}")
    return dict(options)


def option_table(task: str) -> list[OptionSpec]:
    """The options a task declares (without the runner-supplied common ones), for help text."""
    common = {s.name for s in COMMON_OPTIONS}
    return [s for s in _specs_for(task).values() if s.name not in common]
