"""Task registry: importing this package registers every built-in task.

The order below is the order task types are listed in (help, errors, the TUI form).
A new task type is one module that subclasses `Task` and decorates it with `@register`;
built-in ones are added to the import list below (docs/ADDING_A_TASK.md).
"""

from llmscope.engine.tasks import (  # noqa: F401, I001 - imported, in this order, to register the built-ins
    yesno,
    choice,
    minpairs,
    rating,
    constrained,
    generation,
    syntaxgym,
    contamination,
)
from llmscope.engine.tasks.base import ItemField, SuiteLike, Task
from llmscope.engine.tasks.registry import TASKS, lookup, register, task_names

__all__ = ["TASKS", "ItemField", "SuiteLike", "Task", "register", "get_task", "task_names"]


def get_task(name: str) -> type[Task]:
    """The Task class a suite names (KeyError naming the known task types)."""
    cls: type[Task] = lookup(name)
    return cls
