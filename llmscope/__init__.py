"""Imported as `llmscope`, the root package (pyproject.toml's package-dir maps the others in).

llmscope: a terminal microscope for the behaviour of large language models. This folder holds
the command line (cli/) and the app services (report, export, figures, importers, live channel).
"""

__version__ = "0.1.0"
