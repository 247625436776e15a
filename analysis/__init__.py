"""Imported as `llmscope.analysis` (this folder is mapped by pyproject.toml's package-dir).

The metrics pipeline and the statistics under it.
"""
