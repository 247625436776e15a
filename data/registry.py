"""The suite registry: every suite name llmscope knows, with its task and loader.

Built-in suites are the folders under data/builtin (a `suite.yaml` each, found on disk).
External suites read full third-party corpora from `--suite-path` or `../shared`; each
loader module registers its suite here (`register_suite`), and `llmscope.data` imports
those modules, so the registry is complete whenever the package is. Spec readers for
other formats (lm-evaluation-harness task YAML, Hugging Face dataset specs) register here
too, so the generic loader (data/suites.py) never imports a format module.

This module imports nothing from the loaders: they import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"


@dataclass(frozen=True)
class SuiteEntry:
    """An external suite: its name, the task it runs, and the loader of its data files.

    ``loader(suite_path)`` returns a `data.suites.Suite`; ``suite_path`` is `--suite-path`
    (None: look under ../shared).
    """

    name: str
    task: str
    loader: Callable[[str | Path | None], Any]
    description: str = ""
    # A full corpus too big to read for a listing (the TUI's suite table shows it unread).
    large: bool = False
    # Metrics pipeline producers of this suite's own published metrics (e.g. the WorldSense
    # authors' accuracy and bias): they run for runs of this suite only.
    producers: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileReader:
    """A spec format recognised from the file (``matches(path)``), read by ``load(path)``."""

    name: str
    matches: Callable[[Path], bool]
    load: Callable[[Path], Any]


@dataclass(frozen=True)
class SpecReader:
    """A spec variant recognised from its keys (``matches(spec)``), read by ``load(spec, path)``."""

    name: str
    matches: Callable[[dict[str, Any]], bool]
    load: Callable[[dict[str, Any], Path], Any]


SUITES: dict[str, SuiteEntry] = {}
FILE_READERS: list[FileReader] = []
SPEC_READERS: list[SpecReader] = []


def register_suite(entry: SuiteEntry) -> SuiteEntry:
    """Add an external suite (its module calls this at import)."""
    SUITES[entry.name] = entry
    return entry


def register_file_reader(reader: FileReader) -> FileReader:
    """Add a spec file format (checked before the file is read as a suite spec)."""
    FILE_READERS.append(reader)
    return reader


def register_spec_reader(reader: SpecReader) -> SpecReader:
    """Add a spec variant (checked after the spec is read, before the generic rules)."""
    SPEC_READERS.append(reader)
    return reader


def external_suite(name: str) -> SuiteEntry | None:
    """The external suite called ``name`` (None: not one)."""
    return SUITES.get(name)


def suite_producers(name: str | None) -> tuple[str, ...]:
    """The pipeline producers a suite declares for its own published metrics (none if unknown)."""
    entry = SUITES.get(name) if name else None
    return entry.producers if entry else ()


def builtin_suite_names() -> list[str]:
    """The suites shipped in data/builtin."""
    return sorted(p.parent.name for p in BUILTIN_DIR.glob("*/suite.yaml"))


def suite_names() -> list[str]:
    """Every suite a user can name: the built-in ones, then the external ones."""
    return builtin_suite_names() + list(SUITES)


class ExternalTasks(Mapping[str, str]):
    """A live, read-only view: external suite name -> its task (the old `EXTERNAL_SUITES`)."""

    def __getitem__(self, name: str) -> str:
        return SUITES[name].task

    def __iter__(self) -> Iterator[str]:
        return iter(SUITES)

    def __len__(self) -> int:
        return len(SUITES)
