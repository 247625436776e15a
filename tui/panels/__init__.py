"""Panels of the llmscope TUI: one module per panel or panel screen that renders values from the core."""
