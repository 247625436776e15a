"""Imported as `llmscope.tui` (this folder is mapped by pyproject.toml's package-dir).

The Textual app: screens, widgets, panels.
"""
