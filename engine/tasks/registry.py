"""The task registry: task name -> Task class, the single list of task types.

A leaf module (it imports no task code) so that option validation, the suite loader and
the backends can look a task up by name. `llmscope.engine.tasks` imports every module it
holds, so the registry is complete as soon as any part of the package is imported; a new
task type registers itself with `@register` in its own module (docs/ADDING_A_TASK.md).
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T", bound=type)

# name -> Task subclass (typed `Any` here so this module needs no Task import: base.py imports us)
TASKS: dict[str, Any] = {}


def register(cls: T) -> T:
    """Class decorator: make a Task subclass available under its `name`."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(
            f"{cls.__name__} needs a class attribute `name` (the suite's `task:` value)"
        )
    TASKS[name] = cls
    return cls


def task_names() -> list[str]:
    """Every registered task type, in name order."""
    return sorted(TASKS)


def lookup(name: str) -> Any:
    """The Task class registered as `name` (KeyError naming the known ones)."""
    try:
        return TASKS[name]
    except KeyError:
        raise KeyError(
            f"unknown task {name!r}; expected one of {', '.join(task_names())}"
        ) from None


# Traits a task may declare (Task.traits): what its stored results carry.
TRAITS = {
    "regions": "per-region surprisals and the suite's predictions in `extra` (SyntaxGym): word "
    "surprisal, region tables and the prediction views apply",
    "human_ratings": "the gold answer is a human rating on the answer labels (rating histograms)",
}


def task_producers(name: str | None) -> tuple[str, ...]:
    """The metrics pipeline's task-specific producers a task reports with (none for an
    unknown task or None: only the producers run for every task apply)."""
    cls = TASKS.get(name) if isinstance(name, str) else None
    return tuple(getattr(cls, "metric_producers", ())) if cls is not None else ()


def task_has(name: str | None, trait: str) -> bool:
    """True when the task ``name`` declares ``trait`` (:data:`TRAITS`); False for an unknown
    task or None. The public question views and analyses ask instead of a task's name."""
    if trait not in TRAITS:
        raise KeyError(f"unknown task trait {trait!r}; expected one of {', '.join(sorted(TRAITS))}")
    cls = TASKS.get(name) if isinstance(name, str) else None
    return cls is not None and trait in getattr(cls, "traits", frozenset())
