"""Studies: one file naming suites, models and an option grid (docs/studies.md).

A *cell* is one (suite, model, options) combination and is one normal run, started through
`llmscope/runs/start.py` like `llmscope run`: the same identity rules, so a finished cell is
reused and an interrupted one resumes. This module reads and checks a study file, expands
its cells, records which runs belong to which study, and lists a study's cells with their
state, counts and headline metric (`llmscope/studies/store.py`, for `llmscope study status` and the TUI).

Membership is kept twice:
- in each run's `meta.studies` (study name -> cell key), so a run says which studies use it;
- in two tables `llmscope/studies/store.py` creates (`studies`, `study_cells`, CREATE TABLE IF NOT EXISTS),
  because a cell can fail before any run exists (a bad endpoint, a model that does not load)
  and its error must still be listed, and because `study status NAME` shows the whole grid,
  cells not yet started included, without the study file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from llmscope.engine.config import BackendConfig, ConfigError

if TYPE_CHECKING:
    from llmscope.data.derived import Derivation
    from llmscope.runs.start import RunRequest

STUDY_KEYS = ("name", "db", "suites", "models", "options", "grid", "plan", "description")
# Run options a study may set (top-level `options`, a model or suite entry, a grid level):
# every BackendConfig field that `llmscope run`'s flags fill, plus these.
_CONFIG_FIELDS: dict[str, str] = {
    f.name: str(f.type)
    for f in dataclasses.fields(BackendConfig)
    if f.name not in ("model", "kind", "extra")
}
_EXTRA_KEYS: dict[str, str] = {"limit": "int | None", "opt": "dict", "cache": "bool"}
RUN_KEYS: tuple[str, ...] = (*_CONFIG_FIELDS, *_EXTRA_KEYS)
# Options that do not change what a run measures: as a grid factor they would make two cells
# one run (the run's identity leaves them out).
_NOT_A_FACTOR = ("limit", "cache", "concurrency", "timeout", "max_retries", "batch_size", "threads")
MODEL_KEYS = ("model", "label", *RUN_KEYS)
# `templates` (a suite entry, a grid level): other prompt templates make a derived suite
# `<suite>~<level>` with its own identity (data/derived.py), not a run option.
SUITE_KEYS = ("suite", "suite_path", "label", "templates", *RUN_KEYS)
LEVEL_KEYS = ("templates", *RUN_KEYS)


class StudyError(Exception):
    """A bad study file: one line naming the file, line and field."""

    def __init__(
        self,
        message: str,
        path: str | Path | None = None,
        line: int | None = None,
        fieldname: str | None = None,
    ) -> None:
        where = str(path) if path is not None else ""
        if path is not None and line is not None:
            where += f":{line}"
        parts = [p for p in (where, f"field '{fieldname}'" if fieldname else "") if p]
        super().__init__(", ".join(parts) + (": " if parts else "") + message)
        self.path, self.line, self.field = path, line, fieldname


@dataclass(frozen=True)
class ModelEntry:
    """One model of the study: its `--model` argument and the run options given with it."""

    label: str
    model: str | None  # None: the embedded default
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def is_api(self) -> bool:
        return (self.model or "").startswith("openai:")


@dataclass(frozen=True)
class SuiteEntry:
    label: str
    suite: str  # a built-in name or a spec path
    suite_path: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Factor:
    """A grid factor: named levels, each a set of run options."""

    name: str
    levels: tuple[tuple[str, dict[str, Any]], ...]


@dataclass(frozen=True)
class Cell:
    """One (suite, model, options) combination: one run."""

    key: str
    position: int
    suite: SuiteEntry
    model: ModelEntry
    levels: dict[str, str]  # factor name -> level label
    options: dict[str, Any]  # merged run options (config fields, limit, opt, cache)
    sources: dict[str, str]  # option (or opt.NAME) -> where in the file it was set
    templates: Derivation | None = None  # other prompt templates: the suite `<suite>~<level>`
    templates_field: str | None = None  # where in the file they were given (dotted)

    def config(self) -> BackendConfig:
        """The cell's BackendConfig (unresolved), as `llmscope run`'s flags would fill it."""
        given = {k: v for k, v in self.options.items() if k in _CONFIG_FIELDS}
        return dataclasses.replace(BackendConfig(), model=self.model.model, **given)

    def task_options(self) -> dict[str, Any]:
        return dict(self.options.get("opt") or {})

    def request(self, plan: tuple[dict[str, Any], str, str] | None = None) -> RunRequest:
        """The cell as the request `llmscope run` would make from the same flags."""
        from llmscope.runs.start import RunRequest

        return RunRequest(
            suite_name=self.suite.suite,
            suite_path=self.suite.suite_path,
            config=self.config(),
            task_options=self.task_options(),
            limit=self.options.get("limit"),
            cache=bool(self.options.get("cache", True)),
            plan=plan,
            templates=self.templates,
        )


@dataclass
class Study:
    name: str
    path: Path
    db: str | None
    suites: list[SuiteEntry]
    models: list[ModelEntry]
    factors: list[Factor]
    cells: list[Cell]
    plan: str | None = None
    description: str | None = None
    spec_hash: str = ""

    def record(self) -> dict[str, Any]:
        """What `study status NAME` needs without the file: the grid's shape and its cells."""
        return {
            "name": self.name,
            "source": str(self.path.resolve()),
            "suites": [s.label for s in self.suites],
            "models": [m.label for m in self.models],
            "factors": {f.name: [lab for lab, _ in f.levels] for f in self.factors},
            "plan": self.plan,
            # each cell's item count (None: every item): the items a suite's cells report on
            "limits": {c.key: c.options.get("limit") for c in self.cells},
        }


# -- reading -----------------------------------------------------------------------------------
class _Where:
    """Line numbers of a study file's fields (YAML: from the composed nodes; TOML: by search)."""

    def __init__(self, path: Path, text: str, lines: dict[tuple[Any, ...], int] | None) -> None:
        self.path, self.text, self.lines = path, text, lines

    def line(self, at: tuple[Any, ...]) -> int | None:
        if self.lines is not None:
            for n in range(len(at), 0, -1):
                if at[:n] in self.lines:
                    return self.lines[at[:n]]
            return None
        for key in reversed([a for a in at if isinstance(a, str)]):  # TOML: the key's first line
            pat = re.compile(
                rf"^\s*(\[+\s*)?(\"{re.escape(key)}\"|{re.escape(key)})\s*(=|\]|\.)", re.M
            )
            m = pat.search(self.text) or re.search(rf"\b{re.escape(key)}\s*=", self.text)
            if m:
                return self.text.count("\n", 0, m.start()) + 1
        return None

    def error(self, message: str, at: tuple[Any, ...]) -> StudyError:
        return StudyError(message, self.path, self.line(at), _dotted(at))


def _dotted(at: tuple[Any, ...]) -> str:
    out = ""
    for a in at:
        out += f"[{a}]" if isinstance(a, int) else (f".{a}" if out else str(a))
    return out


def _yaml_lines(node: Any, at: tuple[Any, ...], out: dict[tuple[Any, ...], int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = (*at, str(k.value))
            out[key] = k.start_mark.line + 1
            _yaml_lines(v, key, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out[(*at, i)] = v.start_mark.line + 1
            _yaml_lines(v, (*at, i), out)


def _read(path: Path) -> tuple[dict[str, Any], _Where]:
    from llmscope.data.safety import MAX_SPEC_BYTES, UnsafeInput, depth_exceeds, read_regular

    # the suite specs' loader: YAML 1.2 booleans, no aliases
    from llmscope.data.suites import PARSE_ERRORS, _SpecLoader, parse_problem

    try:
        text = read_regular(path, MAX_SPEC_BYTES).decode("utf-8")
    except UnicodeDecodeError as e:
        raise StudyError(f"not UTF-8 text ({e.reason})", path) from e
    except UnsafeInput as e:
        raise StudyError(e.message, path) from e
    except OSError as e:
        raise StudyError(f"cannot read: {e.strerror or e}", path) from e
    lines: dict[tuple[Any, ...], int] | None = None
    data: Any = None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        else:
            loader = _SpecLoader(text)
            try:
                node = loader.get_single_node()
                lines = {}
                _yaml_lines(node, (), lines)
                data = loader.construct_document(node) if node is not None else None
            finally:
                loader.dispose()
    except PARSE_ERRORS as e:
        msg, line = parse_problem(e, text)
        raise StudyError(msg, path, line) from None
    if not isinstance(data, dict):
        raise StudyError(
            "a study file is a mapping of keys (name, suites, models, options, grid, plan)", path
        )
    if depth_exceeds(data, 16):
        raise StudyError("nested too deeply (the limit is 16 levels)", path)
    return data, _Where(path, text, lines)


def _type_ok(typ: str, v: Any) -> bool:
    allowed = {t.strip() for t in typ.split("|")}
    checks = {
        "None": v is None,
        "bool": isinstance(v, bool),
        "int": isinstance(v, int) and not isinstance(v, bool),
        "float": isinstance(v, (int, float)) and not isinstance(v, bool),
        "str": isinstance(v, str),
        "list[str]": isinstance(v, list) and all(isinstance(x, str) for x in v),
        "dict": isinstance(v, dict),
    }
    return any(checks.get(t, False) for t in allowed)


def _entry_options(
    entry: dict[Any, Any],
    w: _Where,
    at: tuple[Any, ...],
    keys: tuple[str, ...],
    option_keys: tuple[str, ...],
    sources: dict[str, str],
) -> dict[str, Any]:
    """A suite or model entry: every key one of `keys`; its run options (`option_keys`) checked."""
    bad = [k for k in entry if k not in keys]
    if bad:
        raise w.error(f"unknown key; allowed: {', '.join(keys)}", (*at, str(bad[0])))
    return _run_options(
        {k: v for k, v in entry.items() if k in option_keys}, w, at, option_keys, sources
    )


def _run_options(
    raw: Any, w: _Where, at: tuple[Any, ...], allowed: tuple[str, ...], sources: dict[str, str]
) -> dict[str, Any]:
    """Check a mapping of run options (types, known keys); note where each was set."""
    if not isinstance(raw, dict):
        raise w.error("must be a mapping of run options", at)
    out: dict[str, Any] = {}
    for k, v in raw.items():
        k = str(k)
        if k not in allowed:
            raise w.error(f"unknown key; allowed: {', '.join(allowed)}", (*at, k))
        typ = _CONFIG_FIELDS.get(k) or _EXTRA_KEYS.get(k)
        if typ is not None and not _type_ok(typ, v):
            raise w.error(
                f"must be {typ.replace('dict', 'a mapping of task options')}, got {v!r}", (*at, k)
            )
        if k == "limit" and v is not None and v < 1:
            raise w.error(f"must be 1 or more, got {v}", (*at, k))
        if k == "templates":
            if not (isinstance(v, str) or (isinstance(v, dict) and v)):
                raise w.error(
                    "must be a template (text), a mapping variant -> template, or (in a grid "
                    "level) a mapping suite label -> templates",
                    (*at, k),
                )
            sources[k] = _located(w, (*at, k))
            for tk in v if isinstance(v, dict) else ():
                sources[f"templates.{tk}"] = _located(w, (*at, k, str(tk)))
            out[k] = v
            continue
        if k == "opt":
            if "templates" in v:
                raise w.error(
                    "prompt templates make another suite: give them as `templates:` in a grid level "
                    "or a suite entry (docs/studies.md), not as a task option",
                    (*at, k, "templates"),
                )
            for ok in v:
                sources[f"opt.{ok}"] = _located(w, (*at, k, str(ok)))
        else:
            sources[k] = _located(w, (*at, k))
        out[k] = dict(v) if k == "opt" else v
    return out


def _located(w: _Where, at: tuple[Any, ...]) -> str:
    line = w.line(at)
    return f"{w.path}:{line}" if line else str(w.path)


def _merge(*layers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in layers:
        for k, v in layer.items():
            out[k] = {**out.get(k, {}), **v} if k == "opt" else v
    return out


def _relative(base: Path, value: str) -> str:
    """A path in a study file is relative to the file's folder (as suite specs' item files are)."""
    p = Path(value).expanduser()
    if p.is_absolute() or not (base / p).exists():
        return value
    return str((base / p).resolve())


def _model_arg(base: Path, model: str | None) -> str | None:
    if model in (None, "", "default"):
        return None
    assert model is not None
    for prefix in ("hf:", "gguf:"):
        if model.startswith(prefix):
            return prefix + _relative(base, model[len(prefix) :])
    if model.endswith(".gguf"):
        return _relative(base, model)
    return model


# The most cells a study may have unless the user raises it (`study run --max-cells`): the
# count is checked before any cell is built, so a grid of a million cells is refused at once
# rather than built for minutes.
MAX_CELLS = 10_000


def load_study(path: str | Path, max_cells: int = MAX_CELLS) -> Study:
    """Read and check a study file (YAML or TOML); raises StudyError naming file, line, field."""
    from llmscope.data.derived import Derivation

    p = Path(path)
    data, w = _read(p)
    base = p.resolve().parent
    for k in data:
        if k not in STUDY_KEYS:
            raise w.error(f"unknown study key; allowed: {', '.join(STUDY_KEYS)}", (str(k),))
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise w.error("required: the study's name (text)", ("name",))
    db = data.get("db")
    if db is not None and not isinstance(db, str):
        raise w.error("must be the path of a DuckDB file", ("db",))
    desc = data.get("description")
    sources: dict[str, str] = {}
    common = _run_options(data.get("options") or {}, w, ("options",), RUN_KEYS, sources)

    suites: list[tuple[SuiteEntry, dict[str, str]]] = []
    raw_suites = data.get("suites")
    if not isinstance(raw_suites, list) or not raw_suites:
        raise w.error("required: a list of suites (built-in names or spec paths)", ("suites",))
    for i, s in enumerate(raw_suites):
        src: dict[str, str] = {}
        if isinstance(s, str):
            s = {"suite": s}
        if not isinstance(s, dict) or not isinstance(s.get("suite"), str):
            raise w.error("a suite is a name or path, or a mapping with `suite:`", ("suites", i))
        opts = _entry_options(s, w, ("suites", i), SUITE_KEYS, LEVEL_KEYS, src)
        if "templates" in opts and not s.get("label"):
            raise w.error(
                "templates make the suite `<suite>~<label>`: give this entry a `label:`",
                ("suites", i, "templates"),
            )
        sname = _suite_arg(base, s["suite"])
        spath = s.get("suite_path")
        if spath is not None and not isinstance(spath, str):
            raise w.error("must be a path", ("suites", i, "suite_path"))
        src["suite"] = _located(w, ("suites", i))
        label = str(s.get("label") or s["suite"])
        suites.append(
            (SuiteEntry(label, sname, _relative(base, spath) if spath else None, opts), src)
        )

    models: list[tuple[ModelEntry, dict[str, str]]] = []
    raw_models = data.get("models", ["default"])
    if not isinstance(raw_models, list) or not raw_models:
        raise w.error(
            "must be a list of models (default, hf:..., gguf:..., openai:NAME with base_url)",
            ("models",),
        )
    for i, m in enumerate(raw_models):
        src = {}
        if isinstance(m, str) or m is None:
            m = {"model": m}
        if not isinstance(m, dict) or not (
            m.get("model") is None or isinstance(m.get("model"), str)
        ):
            raise w.error(
                "a model is a --model argument, or a mapping with `model:` (and base_url, ...)",
                ("models", i),
            )
        opts = _entry_options(m, w, ("models", i), MODEL_KEYS, RUN_KEYS, src)
        src["model"] = _located(w, ("models", i))
        label = str(m.get("label") or m.get("model") or "default")
        models.append((ModelEntry(label, _model_arg(base, m.get("model")), opts), src))

    for kind, entries in (("suites", [s for s, _ in suites]), ("models", [m for m, _ in models])):
        labels = [e.label for e in entries]
        dup = next((x for i, x in enumerate(labels) if x in labels[:i]), None)
        if dup is not None:
            raise w.error(
                f"{dup!r} is listed twice; give one of them another `label:`",
                (kind, labels.index(dup, labels.index(dup) + 1)),
            )

    factors: list[tuple[Factor, list[dict[str, str]]]] = []
    grid = data.get("grid") or {}
    if not isinstance(grid, dict):
        raise w.error(
            "must be a mapping: factor -> list of values, or factor -> {level: {options}}",
            ("grid",),
        )
    for fname, spec in grid.items():
        fname = str(fname)
        at: tuple[Any, ...] = ("grid", fname)
        levels: list[tuple[str, dict[str, Any]]] = []
        level_src: list[dict[str, str]] = []
        if isinstance(spec, list):  # one option over values: `seed: [0, 1]`
            if fname in ("opt", "model", "suite"):
                raise w.error(
                    "name the option itself (a task option or a run option), with its values", at
                )
            if fname == "templates":
                raise w.error(
                    "template sets are named levels: `FACTOR: {LEVEL: {templates: ...}, ...}`", at
                )
            if not spec:
                raise w.error("a factor needs at least one value", at)
            for j, v in enumerate(spec):
                src = {}
                raw = {fname: v} if fname in RUN_KEYS else {"opt": {fname: v}}
                lw = _Where(
                    w.path,
                    w.text,
                    None
                    if w.lines is None
                    else {
                        **w.lines,
                        (*at, j, fname): w.line((*at, j)) or 0,
                        (*at, j, "opt", fname): w.line((*at, j)) or 0,
                    },
                )
                levels.append((_level_label(v), _run_options(raw, lw, (*at, j), RUN_KEYS, src)))
                level_src.append(src)
        elif isinstance(
            spec, dict
        ):  # named levels: `prompt: {plain: {}, expert: {system_prompt: ...}}`
            if not spec:
                raise w.error("a factor needs at least one level", at)
            for lab, opts in spec.items():
                src = {}
                levels.append(
                    (
                        str(lab),
                        _run_options(
                            opts if opts is not None else {}, w, (*at, str(lab)), LEVEL_KEYS, src
                        ),
                    )
                )
                level_src.append(src)
        else:
            raise w.error(
                "a factor is a list of values or a mapping of level names to run options", at
            )
        for lab, opts in levels:
            for k in opts:
                if k in _NOT_A_FACTOR:
                    raise w.error(
                        f"{k} does not change what a run measures, so every level would be the same "
                        "run; set it under `options` instead",
                        at if isinstance(spec, list) else (*at, lab, k),
                    )
        labels = [lab for lab, _ in levels]
        dup = next((x for i, x in enumerate(labels) if x in labels[:i]), None)
        if dup is not None:
            raise w.error(f"level {dup!r} appears twice", at)
        factors.append((Factor(fname, tuple(levels)), level_src))

    plan = data.get("plan")
    if plan is not None:
        if not isinstance(plan, str):
            raise w.error("must be the path of a plan file (llmscope plan)", ("plan",))
        plan = _relative(base, plan)
        from llmscope.runs.plan import PlanError, read_plan

        try:
            read_plan(plan)
        except PlanError as e:
            raise w.error(str(e), ("plan",)) from None

    n_cells = len(models) * len(suites)
    for f, _ in factors:
        n_cells *= len(f.levels)
    if n_cells > max_cells:
        sizes = " x ".join(
            [f"{len(models)} models", f"{len(suites)} suites"]
            + [f"{len(f.levels)} {f.name}" for f, _ in factors]
        )
        raise StudyError(
            f"{sizes} make {n_cells:,} cells, over the limit of {max_cells:,}; make the grid "
            "smaller, or raise the limit with --max-cells",
            p,
        )
    suite_labels = {s.label for s, _ in suites}
    cells: list[Cell] = []
    combos = itertools.product(*[range(len(f.levels)) for f, _ in factors]) if factors else [()]
    level_combos = list(combos)
    pos = 0
    for m, msrc in models:
        for s, ssrc in suites:
            for combo in level_combos:
                chosen = [
                    (f, f.levels[j], fsrc[j]) for (f, fsrc), j in zip(factors, combo, strict=True)
                ]
                seen: dict[str, str] = {}
                for f, (_, opts), _src in chosen:  # two factors setting one option: ambiguous
                    for k in [
                        *(k for k in opts if k != "opt"),
                        *(f"opt.{o}" for o in opts.get("opt", {})),
                    ]:
                        if k in seen and seen[k] != f.name:
                            raise w.error(
                                f"factors {seen[k]!r} and {f.name!r} both set {k}; one option, one "
                                "factor",
                                ("grid", f.name),
                            )
                        seen[k] = f.name
                merged = _merge(common, s.options, m.options, *[lv[1] for _, lv, _ in chosen])
                merged.pop("templates", None)
                src = {**sources, **ssrc, **msrc}
                i_s = [x for x, _ in suites].index(s)
                tpl, tpl_at = (
                    (Derivation(s.label, s.options["templates"]), ("suites", i_s, "templates"))
                    if "templates" in s.options
                    else (None, None)
                )
                for f, (lab, opts), lsrc in chosen:
                    src.update(lsrc)
                    if "templates" in opts:
                        got = _level_templates(opts["templates"], s, suite_labels, w, f, lab)
                        if got is not None:
                            tpl, tpl_at = Derivation(lab, got[0]), got[1]
                            src["templates"] = _located(w, tpl_at)
                levels_map = {f.name: lv[0] for f, lv, _ in chosen}
                key = " | ".join([s.label, m.label, *(f"{k}={v}" for k, v in levels_map.items())])
                cells.append(
                    Cell(
                        key,
                        pos,
                        s,
                        m,
                        levels_map,
                        merged,
                        src,
                        tpl,
                        _dotted(tpl_at) if tpl_at is not None else None,
                    )
                )
                pos += 1
    study = Study(
        name.strip(),
        p,
        db,
        [s for s, _ in suites],
        [m for m, _ in models],
        [f for f, _ in factors],
        cells,
        plan,
        desc if isinstance(desc, str) else None,
        hashlib.sha256(w.text.encode()).hexdigest()[:16],
    )
    check_cells(study, w)
    return study


def _level_templates(
    value: Any, s: SuiteEntry, suite_labels: set[str], w: _Where, f: Factor, lab: str
) -> tuple[Any, tuple[Any, ...]] | None:
    """A grid level's templates for suite `s`, and where they are: one template set for every
    suite, or a mapping suite label -> template set (None: this suite keeps its templates)."""
    at: tuple[Any, ...] = ("grid", f.name, lab, "templates")
    if isinstance(value, dict):
        named = [k for k in value if str(k) in suite_labels]
        if named and len(named) < len(value):
            other = next(k for k in value if str(k) not in suite_labels)
            raise w.error(
                f"{other!r} is not a suite label of this study ({', '.join(sorted(suite_labels))}); "
                "a level's templates are either one set for every suite or keyed by suite label",
                (*at, str(other)),
            )
        if named:
            if s.label not in value:
                return None
            return value[s.label], (*at, s.label)
    return value, at


def _suite_arg(base: Path, value: str) -> str:
    from llmscope.data.registry import BUILTIN_DIR, external_suite

    if external_suite(value) is not None or (BUILTIN_DIR / value / "suite.yaml").is_file():
        return value
    return _relative(base, value)


def _level_label(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def check_cells(study: Study, w: _Where | None = None) -> None:
    """Check every cell as `llmscope run` would before loading a model: the backend options and
    each suite's task options and design. Errors name the file, line and field that set the value."""
    from llmscope.data.derived import TemplateError, with_templates
    from llmscope.data.suites import SuiteError, load_suite
    from llmscope.engine.models import ModelSpecError
    from llmscope.engine.tasks.options import TaskOptionError, validate_task_options

    loaded: dict[tuple[Any, ...], Any] = {}
    checked: set[str] = set()
    for c in study.cells:
        try:
            c.config().resolve()
        except ConfigError as e:
            flag = _flag_field(str(e))
            if flag in c.sources:
                raise _cell_error(study, c, str(e), flag) from None
            raise _cell_error(
                study, c, str(e), "model", at=f"models[{study.models.index(c.model)}]"
            ) from None
        except ModelSpecError as e:
            raise _cell_error(
                study, c, str(e), "model", at=f"models[{study.models.index(c.model)}]"
            ) from None
        sk: tuple[Any, ...] = (c.suite.suite, c.suite.suite_path)
        if sk not in loaded:
            try:
                loaded[sk] = load_suite(*sk)
                loaded[sk].items()
            except SuiteError as e:
                raise _cell_error(
                    study,
                    c,
                    f"suite {c.suite.label!r}: {e}",
                    "suite",
                    at=f"suites[{study.suites.index(c.suite)}]",
                ) from None
        suite = loaded[sk]
        if c.templates is not None:
            dk = (*sk, c.templates.level, json.dumps(c.templates.templates, sort_keys=True))
            if dk not in loaded:
                try:
                    loaded[dk] = with_templates(suite, c.templates.templates, c.templates.level)
                except TemplateError as e:
                    raise _cell_error(
                        study,
                        c,
                        f"templates {c.templates.level!r}: {e}",
                        "templates",
                        at=c.templates_field,
                    ) from None
            suite, sk = loaded[dk], dk
        opts = c.task_options()
        if c.options.get("chat") is not None:
            opts["chat"] = c.options["chat"]
        sig = json.dumps([sk, opts], sort_keys=True, default=str)
        if sig in checked:
            continue
        checked.add(sig)
        try:
            validate_task_options(suite.task, {**suite.task_options, **opts})
        except TaskOptionError as e:
            m = re.search(r"option '([^']+)'", str(e))
            raise _cell_error(study, c, str(e), f"opt.{m.group(1)}" if m else None) from None
        saved = suite.task_options
        try:
            suite.task_options = {**saved, **opts}
            suite.work(1)  # design options (counterbalancing, few-shot) as prepare_run checks them
        except (SuiteError, ConfigError, ValueError) as e:
            first = next(iter(opts), None)
            raise _cell_error(study, c, str(e), f"opt.{first}" if first else None) from None
        finally:
            suite.task_options = saved


def _flag_field(msg: str) -> str | None:
    m = re.search(r"--([a-z0-9-]+)", msg)
    return m.group(1).replace("-", "_") if m else None


def _cell_error(
    study: Study, c: Cell, msg: str, option: str | None, at: str | None = None
) -> StudyError:
    where = c.sources.get(option or "") if option else None
    path, line = study.path, None
    if where and ":" in where:
        path_s, _, line_s = where.rpartition(":")
        path, line = Path(path_s), int(line_s) if line_s.isdigit() else None
    fieldname = at or option
    return StudyError(f"cell [{c.key}]: {msg}", path, line, fieldname)
