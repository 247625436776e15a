"""Limits that keep hostile suite files from crashing or exhausting the loader.

Suite specs and items come from anyone (a downloaded benchmark, a colleague's folder), so
reading them is bounded: regular files only (no FIFOs, devices or symlink loops), a size
limit on specs, YAML without aliases (an alias bomb expands exponentially), JSON with a
nesting limit and integers that fit 64 bits, and prompt templates that may only name item
fields (no attribute access, indexing, or format specs that could pad a prompt to megabytes).

Every check raises `UnsafeInput` with a one-line message (and a line when known); the
suite loader turns it into a `SuiteError` naming the file.
"""

from __future__ import annotations

import collections
import errno
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

# The safe template language lives in the engine (tasks render prompts with it); suite
# loading checks every template against it, so it is re-exported here.
from llmscope.engine.templates import MAX_FORMAT_PRECISION as MAX_FORMAT_PRECISION
from llmscope.engine.templates import MAX_FORMAT_WIDTH as MAX_FORMAT_WIDTH
from llmscope.engine.templates import check_template as check_template
from llmscope.engine.templates import render_template as render_template

MAX_SPEC_BYTES = 1 << 20  # a suite spec is a few kB; 1 MiB leaves room for long templates
MAX_JSON_DEPTH = 64  # the deepest real record (CFC targets) nests 5 levels
MAX_INT = 2**63  # ids and counts must fit DuckDB's BIGINT


class UnsafeInput(ValueError):
    """A suite file the loader refuses to read; `line` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(message)


# -- files ----------------------------------------------------------------------------------
def file_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a suite file (None when it is a readable regular file)."""
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "symlink loop (a link that points back at itself)"
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return "file not found"
        return f"cannot read: {e.strerror}"
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a FIFO, socket or device would block or never end)"
    return None


def read_regular(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file, refusing FIFOs, devices, symlink loops and oversize files."""
    problem = file_problem(path)
    if problem:
        raise UnsafeInput(problem)
    # O_NONBLOCK: if the path was swapped for a FIFO after the check, open returns at once
    # and fstat below refuses it instead of blocking forever.
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise UnsafeInput(f"cannot read: {e.strerror}") from e
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeInput("not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise UnsafeInput(f"file is {st.st_size:,} bytes; the limit is {max_bytes:,}")
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise UnsafeInput(f"file is larger than the limit of {max_bytes:,} bytes")
    return data


def safe_resolve(path: Path) -> Path:
    """`path.resolve()` that reports a symlink loop as UnsafeInput (Python < 3.13 raises RuntimeError)."""
    try:
        resolved = path.resolve()
    except (RuntimeError, OSError) as e:
        raise UnsafeInput("symlink loop (a link that points back at itself)") from e
    return resolved


# -- structured data ------------------------------------------------------------------------
def depth_exceeds(obj: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether lists/dicts nest deeper than `limit` (iterative: no recursion on hostile input)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            if d > limit:
                return True
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            if d > limit:
                return True
            stack.extend((v, d + 1) for v in o)
    return False


def _parse_int(s: str) -> int:
    # int() of >4300 digits raises ValueError (CPython's DoS guard); refuse far earlier.
    if len(s.lstrip("-")) > 19 or abs(v := int(s)) >= MAX_INT:
        raise UnsafeInput(
            f"integer {s[:12]}{'...' if len(s) > 12 else ''} ({len(s)} digits) does not fit 64 bits"
        )
    return v


def _parse_float_finite(s: str) -> float:
    v = float(s)
    if not math.isfinite(v):
        raise UnsafeInput(f"number {s[:20]} overflows to infinity; write a finite number or null")
    return v


def _refuse_constant(s: str) -> float:
    raise UnsafeInput(f"{s} is not a number a suite may hold; write null for a missing value")


def loads_bounded(text: str, *, allow_nan: bool = True) -> Any:
    """`json.loads` with a nesting limit, 64-bit integers and (unless allow_nan) finite numbers.

    Raises json.JSONDecodeError for syntax errors and UnsafeInput for the limits.
    """
    kw: dict[str, Any] = {"parse_int": _parse_int}
    if not allow_nan:
        kw["parse_constant"] = _refuse_constant
        kw["parse_float"] = _parse_float_finite
    try:
        obj = json.loads(text, **kw)
    except RecursionError:
        raise UnsafeInput(
            f"JSON nested too deeply (the limit is {MAX_JSON_DEPTH} levels)"
        ) from None
    if depth_exceeds(obj):
        raise UnsafeInput(f"JSON nested too deeply (the limit is {MAX_JSON_DEPTH} levels)")
    return obj


def first_nonfinite(obj: Any, path: str = "") -> str | None:
    """The dotted path of the first NaN/±Infinity float inside `obj` (None when all finite)."""
    queue: collections.deque[tuple[Any, str]] = collections.deque([(obj, path)])
    while queue:
        o, p = queue.popleft()
        if isinstance(o, float) and not math.isfinite(o):
            return p or "<value>"
        if isinstance(o, dict):
            queue.extend((v, f"{p}.{k}" if p else str(k)) for k, v in o.items())
        elif isinstance(o, list):
            queue.extend((v, f"{p}[{i}]") for i, v in enumerate(o))
    return None
