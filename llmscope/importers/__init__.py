"""Published results stored as runs (`llmscope import`), so the same report, comparison and
TUI apply to them: one module per source (published.py: WorldSense and the commonsense
results and answer sets; lm_eval.py: lm-eval samples files), runs.py the run record they share."""
