"""lm-evaluation-harness task YAML run as an llmscope suite.

`llmscope run --suite my_task.yaml` accepts a task YAML written for lm-eval
(`output_type: multiple_choice` or `loglikelihood`) and builds the same requests lm-eval
builds for a zero-shot run:

- context = `description` + `doc_to_text(doc)`;
- one continuation per choice: `target_delimiter` (default " ") + choice, scored by its
  log-likelihood given the context (llmscope's `task: choice`, no chat template);
- gold = `doc_to_choice(doc)[doc_to_target(doc)]` (an index, a digit string, or the choice text);
- lm-eval's `acc_norm` and `acc_mutual_info`, computed as lm-eval computes them (the choice
  task's schemes of those names, engine/schemes.py), where the task reports them: those its
  `metric_list` names, or `acc_norm` when it has no `metric_list` (lm-eval's default).

`doc_to_text`/`doc_to_choice`/`doc_to_target` follow lm-eval's rules (lm_eval/api/task.py,
0.4.x): an int is used as is; a string naming a column reads that column; any other string is
a Jinja template rendered with the doc (StrictUndefined, the `regex_replace` filter), and
`doc_to_choice`/digit targets are then read with `ast.literal_eval`; a list of choices is used
as is, a mapping gives its values. `include:` files are merged first (relative to the YAML).
The item id is the doc's 0-based position in the split, as lm-eval's `doc_id`, so
`llmscope import lm-eval` results line up item by item.

Data: `dataset_path` json/csv/parquet/arrow with `dataset_kwargs.data_files` (paths relative
to the YAML, then to the working directory) are read locally; any other `dataset_path` is a
hub id read through `datasets`. The split is `test_split`, else `validation_split`.

`loglikelihood` tasks become one-option items with no gold: the stored row keeps
log P(target | context) in `option_scores`, and accuracy is not computed (lm-eval's `acc`
there is greedy-match, which needs the model's argmax tokens).

Templates render in Jinja's immutable sandbox: a task file is shared like data, so a template
may read the doc, use filters, tests and loops, but never reach Python internals (`__globals__`,
`__class__`, ...), call methods that change values, or build strings, lists or ranges larger than
`MAX_TEMPLATE_SIZE`; such a template stops the load with one line naming the file and field.
YAML aliases are refused (an alias bomb expands exponentially), as in suite specs.

Not supported (a clear error, not a silent difference): `!function` tags (they run Python
from the task folder), `process_docs`, few-shot (`num_fewshot` > 0), multiple-input and
multiple-target tasks, `generate_until` and `loglikelihood_rolling`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from llmscope.data.hf_datasets import (
    LOCAL_FORMATS,
    DatasetSource,
    Row,
    read_hub_rows,
    read_local_rows,
)
from llmscope.data.registry import FileReader, register_file_reader
from llmscope.data.suites import (
    NoAliasLoader,
    Suite,
    SuiteError,
    _make_item,
    parse_problem,
    read_spec_text,
    suite_from_spec,
)
from llmscope.engine.types import Item

OUTPUT_TYPES = {"multiple_choice": "choice", "loglikelihood": "choice"}
LOCAL_BUILDERS = {"json": None, "csv": "csv", "parquet": "parquet", "arrow": "arrow"}
_DETECT = re.compile(
    r"^(output_type|doc_to_text|doc_to_choice|doc_to_target|dataset_path)\s*:", re.M
)
# Item field names for what the YAML computes; prefixed so they never shadow a dataset column.
ID, CONTEXT, CHOICES, GOLD = "doc_id", "lm_eval_context", "lm_eval_choices", "lm_eval_gold"


def lm_eval_suite_spec(
    name: str, task: str, description: str, source: str, delim: str, schemes: Any = None
) -> dict[str, Any]:
    """The suite spec of an lm-eval task (from its YAML, or rebuilt from a samples file): each
    item's context as lm-eval rendered it, the options as continuations after `delim`."""
    return {
        "name": name,
        "task": task,
        "description": description,
        "source": source,
        "id_field": ID,
        "text_field": CONTEXT,
        "gold_field": GOLD,
        "options_field": CHOICES,
        "templates": {"default": "{" + CONTEXT + "}"},
        "task_options": {
            "chat": False,
            "continuation": delim + "{option}",
            # lm-eval scores raw log-likelihoods only; no calibration or PMI requests
            "content_free": [],
            "domain_prompt": "",
            # the normalised accuracies lm-eval reports for this task, under lm-eval's names
            **({"schemes": schemes} if schemes else {}),
        },
    }


class FunctionRef(str):
    """A `!function module.name` reference (kept as text; never executed)."""


class _TaskLoader(NoAliasLoader):
    """lm-eval's YAML dialect: `!function` tags are recorded, not imported; no aliases."""

    kind = "task files"


_TaskLoader.add_constructor(
    "!function",
    lambda loader, node: FunctionRef(loader.construct_scalar(node)),  # type: ignore[arg-type]
)


def is_lm_eval_yaml(path: Path) -> bool:
    """True for a .yaml/.yml file with lm-eval task keys (doc_to_text, output_type, ...)."""
    if path.suffix.lower() not in (".yaml", ".yml") or not path.is_file():
        return False
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    # a task that only includes a base YAML (`include:` + `task:`) has no llmscope `name:`
    return bool(_DETECT.search(text)) or (
        bool(re.search(r"^include\s*:", text, re.M)) and not re.search(r"^name\s*:", text, re.M)
    )


def read_task_config(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The task YAML as a mapping, with `include:` files merged underneath (lm-eval's order)."""
    if path in _seen:
        raise SuiteError(
            "include cycle: " + " -> ".join(str(p) for p in (*_seen, path)), path, None, "include"
        )
    text = read_spec_text(path)
    try:
        data = yaml.load(text, Loader=_TaskLoader)  # noqa: S506 - a SafeLoader subclass
    except (RecursionError, yaml.YAMLError) as e:
        msg, line = parse_problem(e, text)
        raise SuiteError(msg, path, line) from None
    if not isinstance(data, dict):
        raise SuiteError("an lm-eval task YAML must be a mapping", path)
    inc = data.pop("include", None)
    if inc is None:
        return data
    if not isinstance(inc, str):
        raise _field_error(path, "include", "must be a file name")
    base_path = (path.parent / inc).resolve()
    if not base_path.is_file():
        raise _field_error(path, "include", f"included file not found: {base_path}")
    base = read_task_config(base_path, (*_seen, path))
    return {**base, **data}


def _field_error(path: Path, key: str, msg: str, field: str | None = None) -> SuiteError:
    """An error in the task YAML's top-level `key` (reported as `field`, default the key), with
    the line that key is on."""
    return SuiteError(msg, path, _line(path, key), field or key)


def _line(path: Path, key: str) -> int | None:
    try:
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").split("\n"), 1):
            if line.startswith(f"{key}:"):
                return n
    except OSError:
        return None
    return None


MAX_TEMPLATE_SIZE = 1_000_000  # characters or elements one template operation may build


def _jinja_env() -> Any:
    """lm-eval's environment (StrictUndefined, `regex_replace`), inside Jinja's immutable sandbox.

    The sandbox refuses attribute access to internals (`cycler.__init__.__globals__`...), calls
    of methods that mutate, and caps `range`; `*`, `**` and `~` are intercepted here too so that
    `{{ 'x' * 10**10 }}` is refused instead of exhausting memory.
    """
    from jinja2 import StrictUndefined
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _Env(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if (
                operator == "**"
                and isinstance(right, int)
                and abs(right) > 64
                and isinstance(left, (int, float))
                and abs(left) > 1
            ):
                raise SecurityError(f"{left!r} ** {right!r}: exponent too large")
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if (
                        isinstance(seq, (str, list, tuple))
                        and isinstance(n, int)
                        and len(seq) * n > MAX_TEMPLATE_SIZE
                    ):
                        raise SecurityError(
                            f"repetition builds more than {MAX_TEMPLATE_SIZE:,} elements"
                        )
            return super().call_binop(context, operator, left, right)

    env = _Env(undefined=StrictUndefined, keep_trailing_newline=True)
    env.filters["regex_replace"] = lambda s, pattern, repl, count=0: re.sub(
        pattern, repl, s, count=count
    )
    return env


def _refuse_internals(env: Any, template: str) -> None:
    """Refuse names and strings inside Jinja code that reach for internals (`__globals__`,
    `_private`): the sandbox blocks them too, but some paths (the `attr` filter on what it
    already refused) end in a vague "undefined" message instead of saying why."""
    from jinja2.exceptions import SecurityError, TemplateSyntaxError

    try:
        tokens = list(env.lex(template))
    except TemplateSyntaxError:
        return  # compiling reports it with its line
    for _, kind, value in tokens:
        if (kind == "name" and value.startswith("_")) or (kind == "string" and "__" in value):
            raise SecurityError(f"{value!r} reaches for Python internals")


class TaskTemplates:
    """doc_to_text / doc_to_choice / doc_to_target with lm-eval's semantics."""

    def __init__(self, config: dict[str, Any], columns: set[str], path: Path) -> None:
        self.config = config
        self.columns = columns
        self.path = path
        self.env = _jinja_env()
        self._compiled: dict[str, Any] = {}

    def _render(self, key: str, template: str, doc: dict[str, Any], line: int) -> str:
        from jinja2 import TemplateError
        from jinja2.exceptions import SecurityError

        try:
            tpl = self._compiled.get(template)
            if tpl is None:
                _refuse_internals(self.env, template)
                tpl = self._compiled[template] = self.env.from_string(template)
            out, size = [], 0
            for chunk in tpl.generate(**doc):  # loops can multiply output: stop at the cap
                size += len(chunk)
                if size > MAX_TEMPLATE_SIZE:
                    raise SecurityError(f"output longer than {MAX_TEMPLATE_SIZE:,} characters")
                out.append(chunk)
            return "".join(out)
        except SecurityError as e:
            # the task file's own line, not the doc's: the template is what is refused
            raise SuiteError(
                f"unsafe Jinja template refused (templates may only read the doc): {e}",
                self.path,
                _line(self.path, key),
                key,
            ) from e
        except TemplateError as e:
            raise SuiteError(f"Jinja template failed on this doc: {e}", self.path, line, key) from e
        except (OverflowError, MemoryError, RecursionError) as e:
            raise SuiteError(
                f"unsafe Jinja template refused (too expensive on this doc): "
                f"{type(e).__name__}: {str(e)[:100]}",
                self.path,
                line,
                key,
            ) from e

    def text(self, doc: dict[str, Any], line: int) -> str:
        v = self.config.get("doc_to_text")
        if v is None:
            raise SuiteError("required", self.path, _line(self.path, "doc_to_text"), "doc_to_text")
        if isinstance(v, int) and not isinstance(v, bool):
            raise SuiteError(
                "an integer doc_to_text (multiple-input tasks such as winogrande) is not supported",
                self.path,
                _line(self.path, "doc_to_text"),
                "doc_to_text",
            )
        out = doc[v] if v in self.columns else self._render("doc_to_text", v, doc, line)
        if not isinstance(out, str) or (
            out.isdigit() and self.config.get("doc_to_choice") is not None and v not in self.columns
        ):
            raise SuiteError(
                "doc_to_text must give text (a number here means a multiple-input task, "
                "not supported)",
                self.path,
                line,
                "doc_to_text",
            )
        return out

    def choices(self, doc: dict[str, Any], line: int) -> list[str]:
        v = self.config.get("doc_to_choice")
        if v is None:
            raise SuiteError(
                "required for multiple_choice",
                self.path,
                _line(self.path, "doc_to_choice"),
                "doc_to_choice",
            )
        if isinstance(v, dict):
            out: Any = list(v.values())
        elif isinstance(v, list):
            out = v
        elif v in self.columns:
            out = doc[v]
        else:
            s = self._render("doc_to_choice", v, doc, line)
            try:
                out = ast.literal_eval(s)
            except (SyntaxError, ValueError) as e:
                raise SuiteError(
                    f"doc_to_choice must render to a Python list literal, got {s[:80]!r}",
                    self.path,
                    line,
                    "doc_to_choice",
                ) from e
        if not isinstance(out, (list, tuple)) or not out:
            raise SuiteError(
                f"doc_to_choice must give a non-empty list, got {type(out).__name__}",
                self.path,
                line,
                "doc_to_choice",
            )
        return [str(c) for c in out]

    def target(self, doc: dict[str, Any], line: int) -> int | str:
        v = self.config.get("doc_to_target")
        if v is None:
            raise SuiteError(
                "required", self.path, _line(self.path, "doc_to_target"), "doc_to_target"
            )
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, list):
            raise SuiteError(
                "a list doc_to_target (multiple targets) is not supported",
                self.path,
                _line(self.path, "doc_to_target"),
                "doc_to_target",
            )
        if v in self.columns:
            out = doc[v]
        else:
            out = self._render("doc_to_target", v, doc, line)
            if out.isdigit() and self.config.get("doc_to_choice") is not None:
                out = int(out)
            elif len(out) >= 2 and out[0] == "[" and out[-1] == "]":
                raise SuiteError(
                    "multiple targets (a list) are not supported", self.path, line, "doc_to_target"
                )
        if isinstance(out, bool) or not isinstance(out, (int, str)):
            raise SuiteError(
                f"doc_to_target must give an index or a string, got {type(out).__name__}",
                self.path,
                line,
                "doc_to_target",
            )
        return out


def _check_supported(cfg: dict[str, Any], path: Path) -> str:
    def err(msg: str, key: str) -> SuiteError:
        return _field_error(path, key, msg)

    if "task" not in cfg or not isinstance(cfg["task"], str):
        if "group" in cfg:
            raise err("this is a group YAML; pass the YAML of one task", "group")
        raise err("required: the task name", "task")
    out = cfg.get("output_type", "generate_until")
    if out not in OUTPUT_TYPES:
        raise err(
            f"output_type {out!r} is not supported; llmscope runs multiple_choice and loglikelihood "
            "task YAML",
            "output_type",
        )
    for key, value in cfg.items():
        if isinstance(value, FunctionRef):
            raise err(
                f"`!function {value}` runs Python from the task folder, which llmscope does not do; "
                "write it as a Jinja template or a column name",
                key,
            )
    if cfg.get("process_docs") is not None:
        raise err("process_docs is not supported (documents are used as stored)", "process_docs")
    shots = cfg.get("num_fewshot") or 0
    if isinstance(shots, bool) or not isinstance(shots, int):
        raise err(f"must be an integer, got {shots!r}", "num_fewshot")
    if shots > 0:
        raise err(
            "few-shot contexts are not built from lm-eval YAML; use num_fewshot: 0", "num_fewshot"
        )
    return str(out)


def _data_source(cfg: dict[str, Any], path: Path) -> tuple[DatasetSource, list[Path]]:
    """Where the docs come from: local files for the json/csv/parquet/arrow builders, else a hub id."""
    dpath = cfg.get("dataset_path")
    if not isinstance(dpath, str) or not dpath:
        raise _field_error(
            path,
            "dataset_path",
            "required: a hub id, or json/csv/parquet with dataset_kwargs.data_files",
        )
    split = cfg.get("test_split") or cfg.get("validation_split")
    if not isinstance(split, str):
        raise _field_error(
            path,
            "test_split",
            "set test_split (or validation_split): the split whose docs are scored",
        )
    kwargs = cfg.get("dataset_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise _field_error(path, "dataset_kwargs", "must be a mapping")
    if dpath not in LOCAL_BUILDERS:
        name = cfg.get("dataset_name")
        rev = kwargs.get("revision")
        return DatasetSource(
            path=dpath,
            name=name if isinstance(name, str) else None,
            split=split,
            revision=rev if isinstance(rev, str) else None,
            spec_path=path,
        ), []
    files = kwargs.get("data_files")
    if isinstance(files, dict):
        if split not in files:
            raise _field_error(
                path,
                "dataset_kwargs",
                f"data_files has no entry for split {split!r} (has {', '.join(map(str, files))})",
                "dataset_kwargs.data_files",
            )
        files = files[split]
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        raise _field_error(
            path,
            "dataset_kwargs",
            f"dataset_path {dpath!r} needs dataset_kwargs.data_files (a file, a list, or "
            "split -> file)",
            "dataset_kwargs.data_files",
        )
    resolved = []
    for f in files:
        cands = [(path.parent / f), Path(f)]
        hit = next((c for c in cands if c.is_file()), None)
        if hit is None:
            raise _field_error(
                path,
                "dataset_kwargs",
                f"data file not found: {f} (looked beside the YAML and in the working directory)",
                "dataset_kwargs.data_files",
            )
        resolved.append(hit.resolve())
    fmt = LOCAL_BUILDERS[dpath]
    src = DatasetSource(path=str(resolved[0]), split=split, local=resolved[0], format=fmt)
    if fmt is None:  # the `json` builder reads JSON Lines and JSON arrays alike
        src.format = (
            "jsonl"
            if resolved[0].suffix.lower() in (".jsonl", ".ndjson")
            else LOCAL_FORMATS.get(resolved[0].suffix.lower(), "jsonl")
        )
    return src, resolved


def _rows(src: DatasetSource, files: list[Path]) -> list[Row]:
    if not files:
        return read_hub_rows(src)
    rows: list[Row] = []
    for f in files:
        part = DatasetSource(path=str(f), split=src.split, local=f, format=src.format)
        for r in read_local_rows(part):
            rows.append(Row(r.values, r.line, len(rows)))
    return rows


def _items_loader(
    suite: Suite,
    cfg: dict[str, Any],
    out_type: str,
    src: DatasetSource,
    files: list[Path],
    path: Path,
) -> Callable[[], list[Item]]:
    description = cfg.get("description") or ""
    if not isinstance(description, str):
        raise _field_error(
            path, "description", "must be a string (Jinja templates are rendered per doc)"
        )

    def load() -> list[Item]:
        rows = _rows(src, files)
        cols = set(rows[0].values) if rows else set()
        t = TaskTemplates(cfg, cols, path)
        data_path = files[0] if files else path
        items = []
        for r in rows:
            doc = r.values
            desc = (
                t._render("description", description, doc, r.line)
                if "{{" in description
                else description
            )
            rec: dict[str, Any] = {**doc, ID: r.index, CONTEXT: desc + t.text(doc, r.line)}
            if out_type == "multiple_choice":
                choices = t.choices(doc, r.line)
                if len(set(choices)) != len(choices):
                    raise SuiteError(
                        f"duplicate choices {choices!r}: options must be distinct",
                        data_path,
                        r.line,
                        "doc_to_choice",
                    )
                target = t.target(doc, r.line)
                if isinstance(target, int):
                    if not 0 <= target < len(choices):
                        raise SuiteError(
                            f"target index {target} is outside the {len(choices)} choices",
                            data_path,
                            r.line,
                            "doc_to_target",
                        )
                    gold = choices[target]
                elif target in choices:
                    gold = target
                else:
                    raise SuiteError(
                        f"target {target!r} is not one of the choices {choices!r}",
                        data_path,
                        r.line,
                        "doc_to_target",
                    )
                rec[CHOICES], rec[GOLD] = choices, gold
            else:  # loglikelihood: the target is the one continuation; no accuracy
                target = t.target(doc, r.line)
                rec[CHOICES], rec[GOLD] = [str(target)], None
            items.append(_make_item(suite, rec, data_path, r.line))
        return items

    return load


def _lm_eval_schemes(cfg: dict[str, Any], out_type: str) -> list[str]:
    """lm-eval's acc_norm / acc_mutual_info where the task reports them: those its `metric_list`
    names, or lm-eval's default multiple-choice metrics (acc, acc_norm) when it has none."""
    if out_type != "multiple_choice":
        return []
    metrics = cfg.get("metric_list")
    if not isinstance(metrics, list):
        names = ["acc", "acc_norm"]  # lm-eval 0.4's DEFAULT_METRIC_REGISTRY["multiple_choice"]
    else:
        names = [str(m.get("metric")) for m in metrics if isinstance(m, dict)]
    return [n for n in ("acc_norm", "acc_mutual_info") if n in names]


def load_lm_eval_suite(path: Path) -> Suite:
    """An lm-eval task YAML as a Suite (see the module docstring for what is supported)."""
    cfg = read_task_config(path)
    out_type = _check_supported(cfg, path)
    delim = cfg.get("target_delimiter", " ")
    if not isinstance(delim, str):
        raise _field_error(path, "target_delimiter", "must be a string")
    src, files = _data_source(cfg, path)
    spec = lm_eval_suite_spec(
        cfg["task"],
        OUTPUT_TYPES[out_type],
        f"lm-evaluation-harness task {cfg['task']} ({out_type}), zero-shot",
        f"lm-eval task YAML {path}",
        delim,
        _lm_eval_schemes(cfg, out_type),
    )
    suite = suite_from_spec(spec, path)
    # The task config (with `!function` references as text) is part of the suite's identity.
    suite.spec = {
        **spec,
        "lm_eval": {k: (str(v) if isinstance(v, FunctionRef) else v) for k, v in cfg.items()},
        "lm_eval_output_type": out_type,
    }
    suite.items_path = files[0] if len(files) == 1 else None
    suite._loader = _items_loader(suite, cfg, out_type, src, files, path)
    return suite


register_file_reader(FileReader("lm-eval task YAML", is_lm_eval_yaml, load_lm_eval_suite))
