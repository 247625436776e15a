"""Suite specs and item loading.

A suite is a spec (YAML or TOML) plus items (JSONL or CSV); see docs/SUITES.md.
Every malformed input raises `SuiteError` naming the file, the line and the field.
"""

from __future__ import annotations

import contextlib
import csv
import difflib
import gc
import hashlib
import io
import json
import os
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llmscope.data.design import expand_design
from llmscope.data.registry import BUILTIN_DIR as BUILTIN_DIR
from llmscope.data.registry import (
    FILE_READERS,
    SPEC_READERS,
    ExternalTasks,
    external_suite,
    suite_names,
)
from llmscope.data.safety import (
    MAX_SPEC_BYTES,
    UnsafeInput,
    check_template,
    depth_exceeds,
    file_problem,
    first_nonfinite,
    loads_bounded,
    read_regular,
    render_template,
    safe_resolve,
)
from llmscope.engine.errors import SuiteDataMissing as SuiteDataMissing
from llmscope.engine.errors import SuiteError as SuiteError
from llmscope.engine.tasks import Task, get_task, task_names
from llmscope.engine.tasks.options import TaskOptionError, validate_task_options
from llmscope.engine.types import Item, Work

SHARED_DIR_CANDIDATES = ("../shared", "../../shared")
# Old names kept for their callers; the registries (engine/tasks/registry.py,
# data/registry.py) are the single source of truth. TASK_TYPES is the built-in task types
# (task_names() also lists tasks registered later).
TASK_TYPES: tuple[str, ...] = tuple(task_names())
EXTERNAL_SUITES: ExternalTasks = ExternalTasks()  # external suite name -> task (live view)


class NoAliasLoader(yaml.SafeLoader):
    """A SafeLoader that refuses YAML aliases, naming the kind of file (`kind`) in the error.

    An alias bomb (each anchor listing the previous one nine times) expands exponentially when
    the data is walked; suite specs and task files have no need for aliases, so none are accepted."""

    kind = "YAML files"

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            ev = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                f"YAML aliases (*{ev.anchor}) are not allowed in {self.kind}; repeat the value",
                ev.start_mark,
            )
        return super().compose_node(parent, index)


class _SpecLoader(NoAliasLoader):
    """YAML 1.2 booleans: only true/false, so `answers: [yes, no]` stays strings; no aliases."""

    kind = "suite specs"


_SpecLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def template_fields(template: str) -> list[str]:
    """The `{field}` names a prompt template refers to (ValueError when it is malformed or unsafe)."""
    return check_template(template)


def render(template: str, fields: dict[str, Any]) -> str:
    """Fill a template from item fields; values are inserted literally (restricted formatter)."""
    return render_template(template, fields)


@dataclass
class Suite:
    """A loaded suite spec; items are read lazily (and once)."""

    name: str
    task: str
    spec: dict[str, Any]
    spec_path: Path | None
    items_path: Path | None
    templates: dict[str, str]
    id_field: str = "id"
    text_field: str = "text"
    gold_field: str | None = "gold"
    options_field: str | None = "options"
    answers: list[str] | None = None
    group_by: list[str] = field(default_factory=list)
    cluster_field: str | None = None
    variant_gold: dict[str, str | None] = field(default_factory=dict)
    task_options: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    source: str = ""
    _items: list[Item] | None = None
    _loader: Any = None  # custom item loader (e.g. WorldSense, full commonsense CSV)
    # the loader's parser cannot yield NaN/Infinity (orjson refuses them): the per-item scan for
    # them is skipped (WorldSense: 0.7 of 1.2 CPU s of validating 87k trials)
    _fields_finite: bool = False
    _hash: tuple[Any, str] | None = field(default=None, repr=False, compare=False)

    @property
    def task_type(self) -> type[Task]:
        """The Task class that owns this suite's item rules (engine/tasks/)."""
        return get_task(self.task)

    @property
    def suite_id(self) -> str:
        """Stable id: the name plus a hash of the spec and the items' content."""
        return f"{self.name}@{self.content_hash()[:12]}"

    def content_hash(self) -> str:
        spec_text = json.dumps(self.spec, sort_keys=True, default=str)
        st = None
        if self.items_path is not None and self.items_path.is_file():
            s = self.items_path.stat()
            st = (str(self.items_path), s.st_size, s.st_mtime_ns)
        # Memoised on the spec's text and the items file's identity: `suite_id` is read many
        # times per import and hashing WorldSense's 20 MB trials file each time cost ~0.5 s.
        memo = (spec_text, st)
        if self._hash is not None and self._hash[0] == memo:
            return self._hash[1]
        h = hashlib.sha256(spec_text.encode())
        if st is not None and self.items_path is not None:
            with open(self.items_path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        digest = h.hexdigest()
        self._hash = (memo, digest)
        return digest

    def items(self) -> list[Item]:
        """All items, validated (ids unique, required fields present)."""
        if self._items is None:
            if self._loader is not None:
                items = self._loader()
            else:
                if self.items_path is None:
                    raise SuiteError("the spec names no items file", self.spec_path, field="items")
                items = read_items(self)
            self._validate(items)
            self._items = items
        return self._items

    def _validate(self, items: list[Item]) -> None:
        src = self.items_path or self.spec_path
        if not items:
            raise SuiteError("no items", src)
        seen: dict[str, int] = {}
        # per suite, not per item (87k WorldSense trials): the task class and each template's fields
        task = self.task_type
        templates = [
            (variant, tpl, template_fields(tpl)) for variant, tpl in self.templates.items()
        ]
        for it in items:
            if it.item_id in seen:
                raise SuiteError(
                    f"duplicate id {it.item_id!r} (first on line {seen[it.item_id]})",
                    src,
                    it.line,
                    self.id_field,
                )
            seen[it.item_id] = it.line
            for variant, tpl, names in templates:
                for name in names:
                    if name not in it.fields:
                        raise SuiteError(
                            f"missing field used by template {variant!r}", src, it.line, name
                        )
                try:
                    render(tpl, it.fields)
                except ValueError as e:
                    raise SuiteError(f"template {variant!r}: {e}", src, it.line) from e
            if task.needs_options and not it.options:
                raise SuiteError(
                    "needs a non-empty list of options", src, it.line, self.options_field
                )
            self._check_item_semantics(it, src)
            task.check_item(it, self, src)  # the task's own item rules

    def _check_item_semantics(self, it: Item, src: Path | None) -> None:
        """Gold that the task can score, distinct options, finite numbers (file, line, field)."""
        bad = None if self._fields_finite else first_nonfinite(it.fields)
        if bad is not None:
            raise SuiteError(
                "NaN or Infinity is not a number a suite may hold; write null", src, it.line, bad
            )
        if it.options is not None:
            for o in it.options:
                if not o.strip():
                    raise SuiteError(
                        "options must not be empty or whitespace", src, it.line, self.options_field
                    )
            dup = next((o for i, o in enumerate(it.options) if o in it.options[:i]), None)
            if dup is not None:
                raise SuiteError(f"option {dup!r} appears twice", src, it.line, self.options_field)
        golds: list[tuple[str | None, str | None]] = [(it.gold, self.gold_field)]
        golds += [
            (_as_str(it.fields.get(g)), g) for g in self.variant_gold.values() if g is not None
        ]
        for gold, fname in golds:
            if gold is None:
                continue
            problem = self._gold_problem(gold, it.options)
            if problem:
                raise SuiteError(problem, src, it.line, fname)

    def _gold_problem(self, gold: str, options: list[str] | None) -> str | None:
        # The task's own rule, the one it scores by, so an accepted gold can be matched.
        return self.task_type.gold_problem(gold, options, self)

    def read_demo_items(self, path: Path) -> list[Item]:
        """Items of a few-shot demo file (JSONL with this suite's fields; data/design.py)."""
        return [_make_item(self, rec, path, n) for n, rec in read_jsonl(path)]

    def variant_names(self) -> list[str]:
        return list(self.templates) or ["default"]

    def work(
        self, limit: int | None = None, task_options: dict[str, Any] | None = None
    ) -> list[Work]:
        """Items × prompt variants, in a stable order (item-major).

        ``task_options`` are the run's options (suite spec merged with ``--opt`` / the TUI
        form); option ``permutations`` of a choice task comes from them when given, so it
        acts the same from every source.
        """
        items = self.items()
        if limit is not None:
            items = items[:limit]
        opts = {**self.task_options, **(task_options or {})}
        task = self.task_type
        out: list[Work] = []
        for it in items:
            for variant, tpl in (
                self.templates or {"default": "{" + self.text_field + "}"}
            ).items():
                gold: str | None = it.gold
                if variant in self.variant_gold:
                    g = self.variant_gold[variant]
                    gold = None if g is None else _as_str(it.fields.get(g))
                w = Work(
                    item=it,
                    variant=variant,
                    prompt=render(tpl, it.fields),
                    gold=gold,
                    options=it.options,
                )
                out.extend(task.expand_work(w, self, opts))  # the task's units (e.g. option orders)
        return expand_design(self, out, self.task_options)  # counterbalancing, few-shot demos

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "task": self.task,
            "description": self.description,
            "source": self.source,
            "spec_path": str(self.spec_path) if self.spec_path else None,
            "items_path": str(self.items_path) if self.items_path else None,
        }


def _as_str(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def read_spec_text(path: Path) -> str:
    """A spec or task file's text: a regular file of at most MAX_SPEC_BYTES, UTF-8 (SuiteError otherwise)."""
    try:
        return read_regular(path, MAX_SPEC_BYTES).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SuiteError(f"not UTF-8 text ({e.reason})", path) from e
    except UnsafeInput as e:
        raise SuiteError(e.message, path) from e


def parse_problem(e: Exception, text: str | None = None) -> tuple[str, int | None]:
    """A spec file that does not parse (YAML, TOML, or nested past Python's recursion limit),
    as (message, 1-based line or None): the problem only, never the quoted text (the file may
    be anyone's). YAML reader errors (control characters) give a character position instead
    of a mark: its line is counted in `text`."""
    if isinstance(e, RecursionError):
        return "nested too deeply", None
    if isinstance(e, tomllib.TOMLDecodeError):
        return f"invalid TOML: {e}", getattr(e, "lineno", None)
    mark = getattr(e, "problem_mark", None)
    line = mark.line + 1 if mark else None
    pos = getattr(e, "position", None)
    if line is None and text is not None and isinstance(pos, int):
        line = text[:pos].count("\n") + 1
    problem = getattr(e, "problem", None) or getattr(e, "reason", None) or "not YAML"
    return f"invalid YAML: {problem}", line


# what a spec file's parser raises for a file that does not parse (`parse_problem` reads it)
PARSE_ERRORS = (RecursionError, tomllib.TOMLDecodeError, yaml.YAMLError)


def _read_spec(path: Path) -> dict[str, Any]:
    text = read_spec_text(path)
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        else:
            data = yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except PARSE_ERRORS as e:
        msg, line = parse_problem(e, text)
        raise SuiteError(msg, path, line) from None
    if not isinstance(data, dict):
        raise SuiteError("the spec must be a mapping of keys to values", path)
    if depth_exceeds(data, 16):
        raise SuiteError("nested too deeply (the limit is 16 levels)", path)
    return data


def _spec_line(path: Path | None, key: str) -> int | None:
    if path is None or not path.is_file():
        return None
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").split("\n"), 1):
        if line.lstrip().startswith(f"{key}:") or line.lstrip().startswith(f"{key} ="):
            return n
    return None


# Every key a suite spec may hold (docs/SUITES.md); anything else is a typo such as `answer:`.
SPEC_KEYS = (
    "name",
    "task",
    "description",
    "source",
    "license",
    "items",
    "id_field",
    "text_field",
    "gold_field",
    "options_field",
    "answers",
    "templates",
    "template",
    "variant_gold",
    "group_by",
    "cluster_field",
    "task_options",
    # machine-psychology toolkit I (data/design.py, analysis/choicefit.py)
    "human_counts_field",
    "condition_fields",
    "option_types_field",
)


_KEY_LIKE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


def _check_spec_keys(spec: dict[str, Any], err: Any) -> None:
    for key in spec:
        if key not in SPEC_KEYS:
            k = str(key)
            if not _KEY_LIKE.match(k) or not any(x in SPEC_KEYS for x in spec):
                # not a suite spec at all (a password file named by someone's study): say so
                # without quoting any of it
                raise err(
                    "not a suite spec (a key that is no suite key; the file's content is not "
                    f"shown); allowed keys: {', '.join(SPEC_KEYS)}",
                    None,
                )
            close = difflib.get_close_matches(k, SPEC_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise err(f"unknown key {k!r}{hint}; allowed keys: {', '.join(SPEC_KEYS)}", k)


def _check_answers(answers: list[Any], err: Any) -> list[str]:
    labels = [str(a) for a in answers]
    for a in labels:
        if not a.strip():
            raise err("answer labels must not be empty or whitespace", "answers")
    dup = next((a for i, a in enumerate(labels) if a in labels[:i]), None)
    if dup is not None:
        raise err(f"answer label {dup!r} appears twice", "answers")
    if len(labels) < 2:
        raise err(f"needs at least two answer labels, got {labels!r}", "answers")
    return labels


def suite_from_spec(
    spec: dict[str, Any], spec_path: Path | None = None, base_dir: Path | None = None
) -> Suite:
    """Validate a spec mapping and build a Suite."""

    def err(msg: str, key: str) -> SuiteError:
        return SuiteError(msg, spec_path, _spec_line(spec_path, key), key)

    _check_spec_keys(spec, err)

    def get_str(key: str, default: str | None = None, required: bool = False) -> str | None:
        if key not in spec or spec[key] is None:
            if required:
                raise err("required", key)
            return default
        v = spec[key]
        if not isinstance(v, str) or (required and not v.strip()):
            raise err(f"must be a non-empty string, got {type(v).__name__}", key)
        return v

    name = get_str("name", required=True)
    task = get_str("task", required=True)
    assert name is not None and task is not None
    if task not in task_names():
        raise err(f"unknown task {task!r}; expected one of {', '.join(task_names())}", "task")
    task_type = get_task(task)
    templates_raw = spec.get("templates", spec.get("template"))
    templates: dict[str, str]
    if templates_raw is None:
        templates = {}
    elif isinstance(templates_raw, str):
        templates = {"default": templates_raw}
    elif isinstance(templates_raw, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in templates_raw.items()
    ):
        templates = dict(templates_raw)
    else:
        raise err("must be a string or a mapping of variant name to template string", "templates")
    for variant, tpl in templates.items():
        try:
            template_fields(tpl)
        except ValueError as e:
            raise err(f"template {variant!r} is malformed: {e}", "templates") from e
    answers = spec.get("answers")
    if answers is not None and (
        not isinstance(answers, list)
        or not answers
        or not all(isinstance(a, (str, int)) for a in answers)
    ):
        raise err("must be a non-empty list of strings", "answers")
    if answers is None and task_type.default_answers is not None:
        answers = list(task_type.default_answers)
    if task_type.needs_answers and not answers:
        raise err(task_type.needs_answers, "answers")
    if answers is not None:
        answers = _check_answers(answers, err)
    group_by = spec.get("group_by", [])
    if isinstance(group_by, str):
        group_by = [group_by]
    if not isinstance(group_by, list) or not all(isinstance(g, str) for g in group_by):
        raise err("must be a list of field names", "group_by")
    variant_gold = spec.get("variant_gold", {}) or {}
    if not isinstance(variant_gold, dict):
        raise err("must be a mapping of variant to field name or null", "variant_gold")
    task_options = spec.get("task_options", {}) or {}
    if not isinstance(task_options, dict):
        raise err("must be a mapping", "task_options")
    try:
        validate_task_options(task, task_options)
    except TaskOptionError as e:
        raise err(str(e), "task_options") from None
    items_path = None
    items_name = get_str("items")
    if items_name:
        base = base_dir or (spec_path.parent if spec_path else Path.cwd())
        try:
            items_path = safe_resolve(base / items_name)
        except UnsafeInput as e:
            raise err(f"{e.message}: {base / items_name}", "items") from e
        problem = file_problem(items_path)
        if problem == "file not found":
            raise err(f"items file not found: {items_path}", "items")
        if problem:
            raise err(f"items file {items_path}: {problem}", "items")
    return Suite(
        name=name,
        task=task,
        spec=spec,
        spec_path=spec_path,
        items_path=items_path,
        templates=templates,
        id_field=get_str("id_field", "id") or "id",
        text_field=get_str("text_field", "text") or "text",
        gold_field=get_str("gold_field", "gold"),
        options_field=get_str("options_field", "options"),
        answers=[str(a) for a in answers] if answers else None,
        group_by=list(group_by),
        cluster_field=get_str("cluster_field"),
        variant_gold=dict(variant_gold),
        task_options=dict(task_options),
        description=get_str("description", "") or "",
        source=get_str("source", "") or "",
    )


def _parse_options(raw: Any, path: Path, line: int, fname: str) -> list[str] | None:
    if raw is None or raw == "":
        return None
    if isinstance(raw, str):
        s = raw.strip()
        if s.startswith("["):
            try:
                raw = json.loads(s)
            except json.JSONDecodeError as e:
                raise SuiteError(f"options are not a JSON list: {e.msg}", path, line, fname) from e
        else:
            return [o.strip() for o in s.split("|")]
    if not isinstance(raw, list) or not all(isinstance(o, (str, int, float)) for o in raw):
        raise SuiteError("options must be a list of strings", path, line, fname)
    return [_as_str(o) or "" for o in raw]


def _make_item(suite: Suite, rec: dict[str, Any], path: Path, line: int) -> Item:
    if suite.id_field not in rec or rec[suite.id_field] in (None, ""):
        raise SuiteError("missing item id", path, line, suite.id_field)
    item_id = rec[suite.id_field]
    if not isinstance(item_id, (str, int)) or isinstance(item_id, bool):
        raise SuiteError(
            f"id must be a string or integer, got {type(item_id).__name__}",
            path,
            line,
            suite.id_field,
        )
    gold = None
    if suite.gold_field and suite.gold_field in rec:
        g = rec[suite.gold_field]
        if g is not None and not isinstance(g, (str, int, float, bool)):
            raise SuiteError(
                f"gold must be a scalar, got {type(g).__name__}", path, line, suite.gold_field
            )
        gold = _as_str(g)
        if gold is not None and not gold.strip():
            gold = None  # a blank cell means "no gold" (unscored), never a gold answer of ""
    options = None
    if suite.options_field and suite.options_field in rec:
        options = _parse_options(rec[suite.options_field], path, line, suite.options_field)
    text = rec.get(suite.text_field)
    if text is not None and not isinstance(text, str):
        raise SuiteError(
            f"text must be a string, got {type(text).__name__}", path, line, suite.text_field
        )
    if text is None:
        text = suite.task_type.item_text(rec)
    return Item(
        item_id=str(item_id), fields=rec, gold=gold, options=options, text=text or "", line=line
    )


def _surrogate_field(rec: dict[str, Any]) -> str | None:
    """The first field whose value holds a lone surrogate (JSON allows the escape; UTF-8 does not)."""

    def bad(v: Any) -> bool:
        if isinstance(v, str):
            return any("\ud800" <= ch <= "\udfff" for ch in v)
        if isinstance(v, list):
            return any(bad(x) for x in v)
        if isinstance(v, dict):
            return any(bad(k) or bad(x) for k, x in v.items())
        return False

    return next((str(k) for k, v in rec.items() if bad(k) or bad(v)), None)


def jsonl_records(
    text: str, path: str | Path, *, allow_nan: bool = True
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of JSON Lines text; SuiteError otherwise.

    A generator, so a caller validating records reports the first defect in file order.
    Nesting is limited and integers must fit 64 bits; `allow_nan=False` also refuses
    NaN/Infinity (suite items; published results files do hold NaN).
    """
    # JSON Lines are separated by "\n" only; str.splitlines() would also split inside
    # strings holding U+2028, U+0085, \x1c... (legal raw in JSON written with ensure_ascii=False).
    for n, line_text in enumerate(text.split("\n"), 1):
        if not line_text.strip():
            continue
        try:
            rec = loads_bounded(line_text, allow_nan=allow_nan)
        except json.JSONDecodeError as e:
            raise SuiteError(f"invalid JSON: {e.msg} (column {e.colno})", path, n) from e
        except UnsafeInput as e:
            raise SuiteError(e.message, path, n) from e
        if not isinstance(rec, dict):
            raise SuiteError(f"each line must be a JSON object, got {type(rec).__name__}", path, n)
        yield n, rec


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (restored after; nests). Building 10^5 items makes
    the collector walk the growing heap again and again: half the WorldSense trials' parse
    (0.7 -> 0.35 s). The objects built there hold no reference cycles to free."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_jsonl(path: str | Path, *, allow_nan: bool = True) -> list[tuple[int, dict[str, Any]]]:
    """`jsonl_records` of a UTF-8 regular file."""
    try:
        text = read_regular(Path(path)).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SuiteError("not valid UTF-8", path) from e
    except UnsafeInput as e:
        raise SuiteError(e.message, path) from e
    return list(jsonl_records(text, path, allow_nan=allow_nan))


def read_items(suite: Suite) -> list[Item]:
    """Read a JSONL or CSV items file into validated Items."""
    path = suite.items_path
    assert path is not None
    try:
        raw = read_regular(path)
    except UnsafeInput as e:
        raise SuiteError(e.message, path) from e
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SuiteError("not valid UTF-8", path, line) from e
    items: list[Item] = []
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        for n, rec in jsonl_records(text, path):  # NaN is refused with its field by _validate
            bad = _surrogate_field(rec)
            if bad is not None:
                raise SuiteError(
                    "lone UTF-16 surrogate escape (\\ud800-\\udfff): not valid Unicode",
                    path,
                    n,
                    bad,
                )
            items.append(_make_item(suite, rec, path, n))
    elif path.suffix.lower() in (".csv", ".tsv"):
        delim = "\t" if path.suffix.lower() == ".tsv" else ","
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delim, strict=True)
        try:
            header = next(reader)
        except StopIteration:
            raise SuiteError("empty CSV file (no header)", path, 1) from None
        except csv.Error as e:
            raise SuiteError(f"invalid CSV: {e}", path, 1) from e
        if len(set(header)) != len(header):
            dup = next(h for h in header if header.count(h) > 1)
            raise SuiteError("duplicate column in header", path, 1, dup)
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                raise SuiteError(f"invalid CSV: {e}", path, reader.line_num) from e
            n = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise SuiteError(f"expected {len(header)} columns, found {len(row)}", path, n)
            items.append(_make_item(suite, dict(zip(header, row, strict=False)), path, n))
    else:
        raise SuiteError("items must be a .jsonl or .csv file", path)
    return items


def _find_shared() -> Path | None:
    """The third-party data folder: `$LLMSCOPE_SHARED` when set (and nothing else: a path
    that holds no `data/` means none, so tests can run as on a machine without it), else
    `../shared` (or `../../shared`) beside the working folder or the repository."""
    env = os.environ.get("LLMSCOPE_SHARED")
    if env:
        p = Path(env).expanduser()
        return p.resolve() if (p / "data").is_dir() else None
    here = Path.cwd()
    for base in [here, Path(__file__).resolve().parents[1]]:
        for cand in SHARED_DIR_CANDIDATES:
            p = (base / cand).resolve()
            if (p / "data").is_dir():
                return p
    return None


def shared_data(rel: str) -> Path | None:
    """`<shared>/data/<rel>` when the shared data folder lies beside the repository and holds it."""
    shared = _find_shared()
    p = shared / "data" / rel if shared is not None else None
    return p if p is not None and p.exists() else None


def suite_source(suite_path: str | Path | None, default: str, name: str, wants: str) -> Path:
    """The path a suite loader reads: `suite_path`, else the shared data's `default` when present;
    a SuiteError saying what --suite-path takes (`wants`) otherwise."""
    if suite_path is not None:
        return Path(suite_path)
    found = shared_data(default)
    if found is None:
        # SuiteDataMissing: a listing shows the suite as needing a path
        raise SuiteDataMissing(f"the {name} suite needs --suite-path ({wants})")
    return found


def builtin_names() -> list[str]:
    """Names of the suites shipped in data/builtin, plus the loaders that need a path."""
    return suite_names()


def load_suite(name_or_path: str | Path, suite_path: str | Path | None = None) -> Suite:
    """A built-in suite by name, or a spec file by path.

    `commonsense` and `worldsense` read the full third-party files from
    `suite_path` (or `../shared/...` when present).
    """
    s = str(name_or_path)
    entry = external_suite(s)
    if entry is not None:
        suite: Suite = entry.loader(suite_path)
        return suite
    if suite_path is not None and str(suite_path) != "":
        # only the loaders of third-party data read it; ignoring it would run another suite's
        # items than the user pointed at
        raise SuiteError(
            f"--suite-path (a study's suite_path) is read only by the suites that load third-party "
            f"data files ({', '.join(sorted(EXTERNAL_SUITES))}); {s!r} has its own items: leave the "
            "path out",
            suite_path,
        )
    builtin = BUILTIN_DIR / s / "suite.yaml"
    if builtin.is_file():
        path = builtin
    else:
        path = Path(s)
        if path.is_dir():
            for cand in ("suite.yaml", "suite.yml", "suite.toml"):
                if (path / cand).is_file():
                    path = path / cand
                    break
        if not path.is_file():
            problem = file_problem(path)
            if problem and problem != "file not found":
                raise SuiteError(problem, path)
            raise SuiteError(
                f"no built-in suite or spec file called {s!r}; built-in suites: {', '.join(builtin_names())}"
            )
    for reader in FILE_READERS:  # e.g. lm-evaluation-harness task YAML (data/lm_eval_tasks.py)
        if reader.matches(path):
            loaded: Suite = reader.load(path.resolve())
            return loaded
    spec = _read_spec(path)
    try:
        resolved = safe_resolve(path)
    except UnsafeInput as e:
        raise SuiteError(e.message, path) from e
    for spec_reader in SPEC_READERS:  # e.g. `dataset:` items (data/hf_datasets.py)
        if spec_reader.matches(spec):
            from_spec: Suite = spec_reader.load(spec, resolved)
            return from_spec
    return suite_from_spec(spec, resolved)
