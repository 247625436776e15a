"""Imported as `llmscope.store` (this folder is mapped by pyproject.toml's package-dir).

The DuckDB store.
"""
