"""Task registry: importing this package registers every task type in it.

Each module of this package that defines a task registers it with `@register`; the
modules are found on disk, so a new task type is one new module and nothing else
(docs/ADDING_A_TASK.md). Task types are listed in name order.
"""

import importlib
import pkgutil

from llmscope.engine.tasks.base import ItemField, SuiteLike, Task
from llmscope.engine.tasks.registry import TASKS, lookup, register, task_names

__all__ = ["TASKS", "ItemField", "SuiteLike", "Task", "register", "get_task", "task_names"]

# Not task modules: the base class, the option declarations and the registry itself.
_INFRASTRUCTURE = {"base", "options", "registry"}
for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _mod not in _INFRASTRUCTURE:
        importlib.import_module(f"{__name__}.{_mod}")


def get_task(name: str) -> type[Task]:
    """The Task class a suite names (KeyError naming the known task types)."""
    cls: type[Task] = lookup(name)
    return cls
