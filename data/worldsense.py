"""WorldSense (Benchekroun et al. 2023) trials as constrained-answer items.

`trials.jsonl.bz2` holds one JSON object per line with `Key`, `problemname`,
`tuple_ID`, `text`, `expectedresp` (the allowed responses), `problemsize`,
`skin`, `qskin`, `complexity`, `goldresp_obfusc` and more. The gold is stored
obfuscated by name; `DEOBFUSCATE` maps it back.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmscope.data.registry import SuiteEntry, register_suite
from llmscope.data.suites import Suite, SuiteError, _find_shared, suite_from_spec
from llmscope.engine.types import Item

_loads: Callable[[str | bytes], Any]
try:  # a faster parser when the environment has one; stdlib json is fast enough
    import orjson

    _loads = orjson.loads
    _DecodeError: tuple[type[Exception], ...] = (orjson.JSONDecodeError,)
    _REFUSES_NON_FINITE = True  # orjson reads no NaN, Infinity or 1e999 (an error with its line)
except ImportError:  # pragma: no cover - depends on the environment
    _REFUSES_NON_FINITE = False
    _loads = json.loads
    _DecodeError = (json.JSONDecodeError,)

try:  # parallel bzip2 decoder (a dependency); the stdlib's bz2 reads the same bytes, slower
    import indexed_bzip2 as _ibz2
except ImportError:  # pragma: no cover - a partial install
    _ibz2 = None

DEOBFUSCATE = {
    "Emmanuel": "TRUE",
    "Megi": "FALSE",
    "Dieuwke": "POSSIBLE",
    "Pascal": "IMPOSSIBLE",
    "Mark": "1",
    "Youssef": "2",
    "Yoda": "3",
}
FIELDS = ("problemname", "problemsize", "tuple_ID", "skin", "qskin", "complexity", "text")
TRIALS_NAMES = ("trials.jsonl.bz2", "test_set/trials.jsonl.bz2", "trials.jsonl")


# The authors' per-trial accuracy compares answer classes: responses 1 and 2 are both KNOW,
# 3 is UNKNOWN (TRUE, FALSE, POSSIBLE, IMPOSSIBLE are their own class).
ANSWER_CLASSES = {"1": "KNOW", "2": "KNOW", "3": "UNKNOWN"}


def suite_spec() -> dict[str, Any]:
    """The spec of the built-in `worldsense` suite (items come from `load_worldsense`)."""
    return {
        "name": "worldsense",
        "task": "constrained",
        "description": (
            "WorldSense: grounded reasoning over simple arrangements of entities (87,048 trials); "
            "answers are TRUE/FALSE, POSSIBLE/IMPOSSIBLE or 1/2/3."
        ),
        "source": "facebookresearch/worldsense test_set/trials.jsonl.bz2",
        "license": "CC BY-NC 4.0 (see the LICENSE beside the data)",
        "id_field": "Key",
        "text_field": "text",
        "gold_field": "goldresp",
        "options_field": "expectedresp",
        "templates": {"default": "{text}"},
        "group_by": ["problemname", "problemsize"],
        "cluster_field": "tuple_ID",
        "task_options": {"mode": "auto", "equivalent": dict(ANSWER_CLASSES)},
    }


def find_trials(path: str | Path) -> Path:
    """The trials file: `path` itself, or a known file name inside the directory `path`."""
    p = Path(path)
    if p.is_file():
        return p
    if p.is_dir():
        for name in TRIALS_NAMES:
            if (p / name).is_file():
                return p / name
    raise SuiteError(f"no WorldSense trials file ({', '.join(TRIALS_NAMES)}) found", p)


def _read_all(p: Path) -> bytes:
    """The file's bytes, decompressed (OSError/EOFError when unreadable or corrupt)."""
    if p.suffix == ".bz2" and _ibz2 is not None:
        try:
            # two threads over the stream's blocks: 0.9 s wall for the 71 MB test set, 1.5 s with bz2
            with _ibz2.open(str(p), parallelization=2) as f:
                data = bytes(f.read())
            # it reads a file that is not bzip2 at all as empty: only a non-empty read counts
            if data:
                return data
        except RuntimeError:
            pass  # its errors often say only "std::exception": the stdlib reads again and names the defect
    with _open(p) as f:
        return bytes(f.read())


def _open(p: Path):
    if p.suffix == ".bz2":
        return bz2.open(p, "rb")
    if p.suffix == ".gz":
        return gzip.open(p, "rb")
    return open(p, "rb")


def _need(rec: dict[str, Any], key: str, types: tuple[type, ...], p: Path, n: int) -> Any:
    if key not in rec:
        raise SuiteError("missing field", p, n, key)
    v = rec[key]
    if not isinstance(v, types) or isinstance(v, bool):
        raise SuiteError(
            f"expected {'/'.join(t.__name__ for t in types)}, got {type(v).__name__}", p, n, key
        )
    return v


def load_worldsense(path: str | Path) -> list[Item]:
    """All trials as Items: id = Key, options = expectedresp, gold de-obfuscated."""
    p = find_trials(path)
    items: list[Item] = []
    try:
        # One read, then lines from memory: BZ2File.readline per trial cost ~3x the decompression.
        f = io.BytesIO(_read_all(p))
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                rec = _loads(raw)
            except _DecodeError as e:
                raise SuiteError(f"invalid JSON: {e}", p, n) from e
            except UnicodeDecodeError as e:
                raise SuiteError("not valid UTF-8", p, n) from e
            if not isinstance(rec, dict):
                raise SuiteError(
                    f"each line must be a JSON object, got {type(rec).__name__}", p, n
                )
            key = _need(rec, "Key", (int, str), p, n)
            opts = _need(rec, "expectedresp", (list,), p, n)
            if not opts or not all(isinstance(o, str) for o in opts):
                raise SuiteError("must be a non-empty list of strings", p, n, "expectedresp")
            obf = _need(rec, "goldresp_obfusc", (str,), p, n)
            if obf not in DEOBFUSCATE:
                raise SuiteError(f"unknown obfuscated gold {obf!r}", p, n, "goldresp_obfusc")
            gold = DEOBFUSCATE[obf]
            if gold not in opts:
                raise SuiteError(
                    f"gold {gold!r} is not among the allowed responses {opts}",
                    p,
                    n,
                    "goldresp_obfusc",
                )
            text = _need(rec, "text", (str,), p, n)
            fields = {"Key": str(key), "goldresp": gold, "expectedresp": opts}
            for k in FIELDS:
                if k not in rec:
                    raise SuiteError("missing field", p, n, k)
                fields[k] = rec[k]
            items.append(
                Item(
                    item_id=str(key),
                    fields=fields,
                    gold=gold,
                    options=list(opts),
                    text=text,
                    line=n,
                )
            )
    except (OSError, EOFError) as e:  # unreadable or corrupt compressed stream
        raise SuiteError(f"cannot read: {e}", p) from e
    return items


def default_path() -> Path | None:
    """The shared WorldSense test set, when present beside the repository."""
    shared = _find_shared()
    if shared is None:
        return None
    cand = shared / "data" / "worldsense" / "test_set" / "trials.jsonl.bz2"
    return cand if cand.is_file() else None


def load_worldsense_suite(suite_path: str | Path | None = None) -> Suite:
    """The built-in `worldsense` suite reading `suite_path` (a trials file or a folder holding one)."""
    if suite_path is None:
        found = default_path()
        if found is None:
            raise SuiteError(
                "the worldsense suite needs --suite-path (trials.jsonl.bz2 or its folder)"
            )
        trials = found
    else:
        trials = find_trials(suite_path)
    suite = suite_from_spec(suite_spec(), None)
    suite.items_path = trials.resolve()
    suite._loader = lambda: load_worldsense(trials)
    suite._fields_finite = _REFUSES_NON_FINITE
    return suite


register_suite(SuiteEntry("worldsense", str(suite_spec()["task"]), load_worldsense_suite,
                          "WorldSense trials (needs --suite-path or ../shared)", large=True,
                          producers=("worldsense",)))
