"""Imported as `llmscope.data` (this folder is mapped by pyproject.toml's package-dir).

Suites: specs, items, loaders. Importing the package registers every suite loader and
spec reader in data/registry.py (in this order: the order suites are listed in)."""

from llmscope.data import (  # noqa: F401, I001 - imported, in this order, to register suites and readers
    commonsense,
    worldsense,
    cfc,
    syntaxgym,
    cfc_choice,
    hf_datasets,
    lm_eval_tasks,
)
