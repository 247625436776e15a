"""Shared test helpers, imported one way: `from tests.helpers.<module> import ...`.

- paths: ROOT, SHARED (third-party data under ../shared), shared_path (skips when absent)
- tinymodel: the tiny random-weight Llama and its tokenizer (plumbing tests), tiny models of
  other families, a BPE trained on the fly
- lmwrap: LMWrapper, a causal LM around another for tests that change what its forward does
- oai: fixtures and control of the scripted OpenAI-wire server (oai_server.py, run as a process)
- cli: `python -m llmscope` subprocesses, tiny suites, queries on a file, RELIABILITY.md figures
- fakes: TableBackend, a Backend of hand-made numbers
- bulk: runs written straight into a Store and their rows read back; WorldSense trials and folders
- published: published per-item results (../shared) imported through the CLI
- tui: real DuckDB files with toy suites/runs/results, and Textual pilot helpers
- tui_pilot: the app started and settled, a run's dashboard opened, keys pressed and settled,
  a form run on the scripted server
- tui_runs: `llmscope run` in this process on the tiny model; a loaded suite with an empty run
- durations: `python -m tests.helpers.durations FILE` sums the times written with LLMSCOPE_TEST_TIMES=FILE
"""
