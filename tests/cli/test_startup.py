"""Command start-up: building the CLI's parser imports no heavy library.

Every `llmscope` invocation builds the whole parser; pandas, DuckDB, torch and the like are
imported by the commands that use them. (The toolkit II parsers once pulled in pandas and the
store for every command: ~0.3-0.6 s of each `llmscope report`.)
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pandas", "duckdb", "pyarrow", "numpy", "scipy", "torch", "transformers", "textual",
         "matplotlib")


def test_building_the_parser_imports_no_heavy_library() -> None:
    code = (
        "import json, sys\n"
        "import llmscope.cli as cli\n"
        "from llmscope.settings import load_settings\n"
        "p = cli.build_parser(load_settings())\n"
        "subs = sorted(p._subparsers._group_actions[0].choices)\n"
        f"print(json.dumps([subs, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    subs, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    # the parser is whole: the toolkit II commands are registered too
    assert {"report", "run", "import", "surprisal", "rerun", "probeval"} <= set(subs)
    assert heavy == [], f"building the parser imported {heavy}"
