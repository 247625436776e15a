"""WorldSense (Benchekroun et al. 2023) trials as constrained-answer items.

`trials.jsonl.bz2` holds one JSON object per line with `Key`, `problemname`,
`tuple_ID`, `text`, `expectedresp` (the allowed responses), `problemsize`,
`skin`, `qskin`, `complexity`, `goldresp_obfusc` and more. The gold is stored
obfuscated by name; `DEOBFUSCATE` maps it back.
"""

from __future__ import annotations

import bz2
import gzip
import json
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

from llmscope.data.registry import SuiteEntry, register_suite
from llmscope.data.suites import Suite, SuiteError, gc_paused, shared_data, suite_from_spec
from llmscope.engine.errors import SuiteDataMissing
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


# indexed_bzip2's threads. With one it holds the GIL while it decodes (so the parse waits for
# each chunk) yet the whole import measured lowest in CPU and wall on 2 busy cores: with two
# (GIL released, parse overlapped) 4.5-5.7 against 4.5-5.1 s wall; the stdlib's bz2 (GIL
# released, one core) 8.1-9.8 against 6.2-8.6 s (load average 2.7-3.3).
_IBZ2_THREADS = 1
_CHUNK = 4 << 20  # decompressed bytes handed over at a time (~18 chunks for the 71 MB test set)
_RESTART = (
    object()
)  # the parallel decoder failed: the lines so far are dropped, the stdlib reads again


def _produce(p: Path, out: queue.Queue[Any], stop: threading.Event, parallel: bool) -> None:
    """Put the file's decompressed bytes on `out` in chunks, then None; an OSError/EOFError
    (unreadable or corrupt) is put in their place. Runs on its own thread, a few chunks
    ahead of the parse: memory holds those chunks, not the whole 71 MB (see `_IBZ2_THREADS`
    for how much of the decoding overlaps the parse)."""

    def put(v: Any) -> bool:
        while not stop.is_set():
            try:
                out.put(v, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    try:
        if p.suffix == ".bz2" and _ibz2 is not None and parallel:
            sent = 0
            try:
                with _ibz2.open(str(p), parallelization=_IBZ2_THREADS) as f:
                    while chunk := f.read(_CHUNK):
                        sent += len(chunk)
                        if not put(bytes(chunk)):
                            return
                # it reads a file that is not bzip2 at all as empty: only a non-empty read counts
                if sent:
                    put(None)
                    return
            except Exception:  # noqa: BLE001 - any failure of it: the stdlib reads again
                # its errors often say only "std::exception" (and with one thread, a file that is
                # not bzip2 is a ValueError): the stdlib reads again and names the defect
                if sent and not put(_RESTART):
                    return
        with _open(p) as f:
            while chunk := f.read(_CHUNK):
                if not put(bytes(chunk)):
                    return
        put(None)
    except BaseException as e:  # noqa: BLE001 - handed to the reader, which raises it
        put(e)


def _chunks(p: Path, parallel: bool = True) -> Generator[Any, None, None]:
    """The decompressed bytes of `p` in chunks (or `_RESTART`), decompressed on a second thread
    into a bounded queue; raises OSError/EOFError when the file is unreadable or corrupt.
    `parallel`: indexed_bzip2 where it is installed (else the stdlib)."""
    out: queue.Queue[Any] = queue.Queue(maxsize=4)
    stop = threading.Event()
    t = threading.Thread(
        target=_produce, args=(p, out, stop, parallel), name="worldsense-bz2", daemon=True
    )
    t.start()
    try:
        while True:
            try:
                v = out.get(timeout=0.5)
            except queue.Empty:
                if t.is_alive() or not out.empty():
                    continue
                raise OSError("the decompressing thread ended without a result") from None
            if v is None:
                break
            if isinstance(v, BaseException):
                raise v
            yield v
    finally:
        stop.set()  # a parse error or an abandoned read: the producer stops at its next chunk
        t.join()


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


def _trial(raw: bytes, p: Path, n: int) -> Item | None:
    """Line `n` of the trials file as an Item (None when blank)."""
    if not raw.strip():
        return None
    try:
        rec = _loads(raw)
    except _DecodeError as e:
        raise SuiteError(f"invalid JSON: {e}", p, n) from e
    except UnicodeDecodeError as e:
        raise SuiteError("not valid UTF-8", p, n) from e
    if not isinstance(rec, dict):
        raise SuiteError(f"each line must be a JSON object, got {type(rec).__name__}", p, n)
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
    return Item(item_id=str(key), fields=fields, gold=gold, options=list(opts), text=text, line=n)


def load_worldsense(path: str | Path) -> list[Item]:
    """All trials as Items: id = Key, options = expectedresp, gold de-obfuscated.

    Lines are parsed while the rest of the file is decompressed (`_chunks`). The errors are
    those of reading everything first: a defect in the compressed stream is reported before
    any bad line (a bad line waits for the rest of the stream to be read)."""
    p = find_trials(path)
    with gc_paused():
        return _load(p, parallel=True)


def _load(p: Path, parallel: bool) -> list[Item]:
    items: list[Item] = []
    chunks = _chunks(p, parallel)
    try:
        n = 0  # lines parsed
        tail = b""  # the line the last chunk ended inside
        for chunk in chunks:
            if chunk is _RESTART:
                items, n, tail = [], 0, b""
                continue
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            try:
                for raw in lines:
                    n += 1
                    it = _trial(raw, p, n)
                    if it is not None:
                        items.append(it)
            except SuiteError:
                # the whole-file read this replaces reported a corrupt stream first; and when
                # the parallel decoder failed later, its bytes were not the file's: read again
                if _drain(chunks):
                    return _load(p, parallel=False)
                raise
        if tail:
            it = _trial(tail, p, n + 1)
            if it is not None:
                items.append(it)
    except (OSError, EOFError) as e:  # unreadable or corrupt compressed stream
        raise SuiteError(f"cannot read: {e}", p) from e
    finally:
        chunks.close()
    return items


def _drain(chunks: Iterator[Any]) -> bool:
    """Read the rest of the stream (OSError/EOFError when it is corrupt); whether the parallel
    decoder failed in it (`_RESTART`)."""
    restarted = False
    for v in chunks:
        restarted = restarted or v is _RESTART
    return restarted


def default_path() -> Path | None:
    """The shared WorldSense test set, when present beside the repository."""
    return shared_data("worldsense/test_set/trials.jsonl.bz2")


def load_worldsense_suite(suite_path: str | Path | None = None) -> Suite:
    """The built-in `worldsense` suite reading `suite_path` (a trials file or a folder holding one)."""
    if suite_path is None:
        found = default_path()
        if found is None:
            raise SuiteDataMissing(
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


register_suite(
    SuiteEntry(
        "worldsense",
        str(suite_spec()["task"]),
        load_worldsense_suite,
        "WorldSense trials (needs --suite-path or ../shared)",
        large=True,
        producers=("worldsense",),
    )
)
