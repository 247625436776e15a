"""Published results stored as runs (`llmscope import`): one module per source.

The same report, comparison and TUI then apply to them. published.py: WorldSense and the
commonsense results and answer sets; lm_eval.py: lm-eval samples files; runs.py: the run
record they share.
"""
