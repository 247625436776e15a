"""`python -m llmscope`: the same command line as the `llmscope` script (llmscope/cli/)."""

from llmscope.cli import main

raise SystemExit(main())
