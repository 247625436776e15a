"""The module map in docs/ARCHITECTURE.md, built from each module's first docstring line.

    python scripts/module_map.py          # print the map
    python scripts/module_map.py --write  # replace the map between its markers in the doc

tests/test_architecture.py checks that the map in the doc is the one this prints, and that no
module grows past the size limit, so the map stays the place to look things up.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
START, END = "<!-- module-map:start -->", "<!-- module-map:end -->"
MAX_LINES = 800  # one concept per module: past this a module holds several


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Package name -> folder, from pyproject.toml's package-dir (the folders' import names)."""
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {pkg: root / folder for pkg, folder in cfg["package-dir"].items()}


def source_files(root: Path = ROOT) -> list[Path]:
    """Every Python module of the package, in folder order."""
    out: list[Path] = []
    for folder in package_dirs(root).values():
        out.extend(p for p in sorted(folder.rglob("*.py")) if "__pycache__" not in p.parts)
    return out


def concept(path: Path) -> str:
    """The first sentence of the module's docstring ('' when it has none)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    para = " ".join(doc.strip().split("\n\n", 1)[0].split())
    end = para.find(". ")
    return para if end < 0 else para[: end + 1]


def module_map(root: Path = ROOT) -> str:
    """The markdown table: one row per module and its one-line concept."""
    lines = ["| module | what it holds |", "|---|---|"]
    for p in source_files(root):
        rel = p.relative_to(root).as_posix()
        text = concept(p).replace("|", "\\|")
        lines.append(f"| `{rel}` | {text} |")
    return "\n".join(lines) + "\n"


def doc_map(doc: Path = DOC) -> str:
    """The map as it stands in the doc, between the markers."""
    text = doc.read_text(encoding="utf-8")
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--write", action="store_true", help="replace the map in docs/ARCHITECTURE.md")
    args = ap.parse_args(argv)
    table = module_map()
    if not args.write:
        sys.stdout.write(table)
        return 0
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{START}\n{table}{END}{tail}", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
