"""Command start-up: building the CLI's parser imports no heavy library.

Every `llmscope` invocation builds the whole parser; pandas, DuckDB, torch and the like are
imported by the commands that use them. (The toolkit II parsers once pulled in pandas and the
store for every command: ~0.3-0.6 s of each `llmscope report`.)
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "pandas",
    "duckdb",
    "pyarrow",
    "numpy",
    "scipy",
    "torch",
    "transformers",
    "textual",
    "matplotlib",
)


def test_building_the_parser_imports_no_heavy_library() -> None:
    code = (
        "import json, sys\n"
        "import llmscope.cli as cli\n"
        "from llmscope.runs.settings import load_settings\n"
        "p = cli.build_parser(load_settings())\n"
        "subs = sorted(p._subparsers._group_actions[0].choices)\n"
        f"print(json.dumps([subs, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    subs, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    # the parser is whole: the toolkit II commands are registered too
    assert {"report", "run", "import", "surprisal", "rerun", "probeval"} <= set(subs)
    assert heavy == [], f"building the parser imported {heavy}"


def test_every_command_prints_its_help() -> None:
    """`llmscope CMD --help` is the first thing a user types: each renders, exits 0 and names
    what it offers (a bare % in a help text once made `figure --help` a traceback)."""
    code = (
        "import contextlib, io, json\n"
        "import llmscope.cli as cli\n"
        "from llmscope.runs.settings import load_settings\n"
        "p = cli.build_parser(load_settings())\n"
        "out = {}\n"
        "def walk(prefix, parser):\n"
        "    acts = [a for a in parser._actions if getattr(a, 'choices', None) and "
        "hasattr(a, '_name_parser_map')]\n"
        "    for a in acts:\n"
        "        for name, sp in a.choices.items():\n"
        "            walk(prefix + [name], sp)\n"
        "    buf = io.StringIO()\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(buf):\n"
        "            p.parse_args(prefix + ['--help'])\n"
        "    except SystemExit as e:\n"
        "        out[' '.join(prefix)] = [e.code, buf.getvalue()]\n"
        "    except Exception as e:\n"
        "        out[' '.join(prefix)] = [repr(e), '']\n"
        "walk([], p)\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    helps = json.loads(res.stdout.strip().splitlines()[-1])
    assert {"report", "figure", "run", "view", "compare"} <= set(helps)
    broken = {cmd: code for cmd, (code, _) in helps.items() if code != 0}
    assert broken == {}, broken
    # the figure kinds are listed with their titles, the percent sign printed as such
    assert "95% intervals" in " ".join(helps["figure"][1].split())
