"""The TUI's data layer: runs and rows read from the store or the live channel, and what the dashboard draws.

Nothing in this package imports Textual, so it is tested and reused without a terminal.
"""
