"""Imported as `llmscope.engine` (this folder is mapped by pyproject.toml's package-dir).

Tasks, backends and their config, the runner, shared types.
"""
