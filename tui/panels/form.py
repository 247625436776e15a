"""The new-run form: every option `llmscope run` takes, filled into the same
`engine.config.BackendConfig` the CLI fills, with task options checked inline against the
options the suite's task declares (engine/tasks/options.py).

`form_run(values)` is the pure part (text of each field -> `FormRun`, or `FormError` naming
the field); `RunForm` is the widget the home screen mounts.
"""

from __future__ import annotations

import dataclasses
import shlex
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Input, Label, Select, Static

from llmscope.engine.config import (
    DTYPES,
    NUMERIC_RANGES,
    REASONING_EFFORTS,
    BackendConfig,
    ConfigError,
    ModelSpecError,
    parse_options,
)

__all__ = [
    "FIELDS",
    "FormError",
    "FormField",
    "FormRun",
    "RunForm",
    "check_task_options",
    "form_run",
]


@dataclass(frozen=True)
class FormField:
    """One form field: `name` is the BackendConfig field (or a run input) it fills."""

    name: str
    id: str  # widget id (the older ids are kept: tests and muscle memory use them)
    label: str
    kind: str = "text"  # text | int | select
    placeholder: str = ""
    default: str = ""
    choices: tuple[str, ...] = ()


# The registry of the form's fields, in screen order; `form_run` reads exactly these.
FIELDS: tuple[FormField, ...] = (
    FormField("suite", "f-suite", "suite", placeholder="built-in name or spec path"),
    FormField(
        "suite_path",
        "f-suite-path",
        "suite path",
        placeholder="data file/folder (commonsense, worldsense)",
    ),
    FormField(
        "model",
        "f-model",
        "model",
        placeholder="default | hf:ID or folder | gguf:FILE | openai:NAME",
    ),
    FormField(
        "base_url",
        "f-base-url",
        "base URL",
        placeholder="openai: models (several: comma-separated)",
    ),
    FormField(
        "device", "f-device", "device", default="auto", placeholder="auto, cpu, cuda, cuda:1, mps"
    ),
    FormField("dtype", "f-dtype", "dtype", kind="select", default="auto", choices=DTYPES),
    FormField(
        "chat",
        "f-chat",
        "chat",
        kind="select",
        default="task default",
        choices=("task default", "on", "off"),
    ),
    FormField("threads", "f-threads", "threads", kind="int", placeholder="torch default"),
    FormField("batch_size", "f-batch", "batch size", kind="int", default="16"),
    FormField("concurrency", "f-conc", "concurrency", kind="int", default="8"),
    FormField("limit", "f-limit", "limit", kind="int", placeholder="all items"),
    FormField("seed", "f-seed", "seed", kind="int", default="0"),
    FormField("top_logprobs", "f-top-logprobs", "top-logprobs", kind="int", default="20"),
    FormField(
        "reasoning", "f-reasoning", "reasoning", kind="select", default="off", choices=("off", "on")
    ),
    FormField(
        "reasoning_effort",
        "f-effort",
        "effort",
        kind="select",
        default="default",
        choices=("default", *REASONING_EFFORTS),
    ),
    FormField("options", "f-options", "task options", placeholder="key=value ... (JSON values)"),
)
BY_NAME = {f.name: f for f in FIELDS}


class FormError(ValueError):
    """A field's value is not allowed; `field` is the FormField name."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass
class FormRun:
    """What the form asks for: the same inputs `llmscope run` takes."""

    suite: str
    suite_path: str | None
    options: dict[str, Any]
    limit: int | None
    config: BackendConfig

    def params(self) -> dict[str, Any]:
        """The parameters `LlmscopeApp.start_run` takes."""
        return {
            "suite": self.suite,
            "suite_path": self.suite_path,
            "options": dict(self.options),
            "limit": self.limit,
            "config": self.config,
            "model": self.config.model,
        }


def _flag_field(message: str) -> str | None:
    for name, (flag, _lo, _hi) in NUMERIC_RANGES.items():
        if message.startswith(flag + " "):
            return name
    for flag, name in (
        ("--dtype", "dtype"),
        ("--base-url", "base_url"),
        ("--reasoning-effort", "reasoning_effort"),
    ):
        if message.startswith(flag):
            return name
    return None


def form_run(values: Mapping[str, str]) -> FormRun:
    """The form's text (FormField name -> text) as a FormRun; FormError names the bad field.

    Numbers are checked against the same ranges as the CLI's flags (BackendConfig.validate),
    so the form and `llmscope run` accept exactly the same values."""

    def val(name: str) -> str:
        return str(values.get(name, BY_NAME[name].default) or "").strip()

    def number(name: str) -> int | None:
        text = val(name)
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            raise FormError(
                name, f"{BY_NAME[name].label} must be a whole number, got {text!r}"
            ) from None

    suite = val("suite")
    if not suite:
        raise FormError("suite", "choose a suite (a built-in name or a spec path)")
    limit = number("limit")
    if limit is not None and limit < 1:
        raise FormError("limit", f"limit must be 1 or more, got {limit}")
    try:
        options = parse_options(shlex.split(val("options")))
    except (ConfigError, ValueError) as e:
        raise FormError("options", f"task options: {e}") from None
    urls = [u.strip() for u in val("base_url").split(",") if u.strip()]
    chat = {"on": True, "off": False}.get(val("chat"))
    cfg = BackendConfig(
        model=val("model") or None,
        base_url=urls or None,  # a list, as `--base-url` (repeatable) gives it
        device=val("device") or "auto",
        dtype=val("dtype") or "auto",
        chat=chat,
        reasoning=val("reasoning") == "on",
        reasoning_effort=None
        if val("reasoning_effort") in ("", "default")
        else val("reasoning_effort"),
    )
    for name in ("threads", "batch_size", "concurrency", "seed", "top_logprobs"):
        n = number(name)
        if n is not None:
            cfg = dataclasses.replace(cfg, **{name: n})
    try:
        cfg.validate()
        if (
            cfg.reasoning_effort is not None
        ):  # API models only: the same rule `llmscope run` applies
            cfg.resolve()
    except ConfigError as e:
        raise FormError(_flag_field(str(e)) or "model", str(e)) from None
    except ModelSpecError as e:  # the model argument itself is wrong
        raise FormError("model", str(e)) from None
    return FormRun(
        suite=suite, suite_path=val("suite_path") or None, options=options, limit=limit, config=cfg
    )


_SUITE_TASKS: dict[tuple[str, str | None], tuple[str, dict[str, Any]]] = {}
_SUITE_LOCK = threading.Lock()


def _suite_task(suite: str, suite_path: str | None) -> tuple[str, dict[str, Any]]:
    """(task name, the suite's own task options), cached: loading a spec is not free."""
    key = (suite, suite_path)
    with _SUITE_LOCK:
        hit = _SUITE_TASKS.get(key)
    if hit is None:
        from llmscope.data.suites import load_suite

        s = load_suite(suite, suite_path)
        hit = (s.task, dict(s.task_options))
        with _SUITE_LOCK:
            _SUITE_TASKS[key] = hit
    return hit


def check_task_options(run: FormRun) -> tuple[str | None, str]:
    """(error or None, hint listing the task's declared options) for the form's task options.

    The same check `llmscope run` makes: the suite's task_options merged with the given ones
    (and `chat` from the chat field) through `validate_task_options`."""
    from llmscope.engine.tasks.options import TaskOptionError, option_table, validate_task_options

    try:
        task, suite_opts = _suite_task(run.suite, run.suite_path)
    except Exception as e:  # the suite itself is wrong: say so on the suite line
        return f"suite: {str(e).splitlines()[0] if str(e) else type(e).__name__}", ""
    opts = dict(run.options)
    if run.config.chat is not None:
        opts["chat"] = run.config.chat
    names = ", ".join(f"{s.name} ({s.type})" for s in option_table(task))
    hint = f"{task} options: {names or '(none)'}"
    try:
        validate_task_options(task, {**suite_opts, **opts})
    except TaskOptionError as e:
        return str(e), hint
    return None, hint


class RunForm(VerticalScroll):
    """The new-run form (fields from FIELDS); posts `RunForm.Submitted` with a FormRun."""

    DEFAULT_CSS = """
    RunForm { height: 1fr; width: 1fr; padding: 0 1; border-left: solid $primary; }
    RunForm > Grid { grid-size: 4; grid-columns: 12 1fr 12 1fr; grid-rows: 1; grid-gutter: 0 1; height: auto; }
    RunForm Input { height: 1; }
    RunForm Select { height: 1; }
    RunForm #f-check { height: auto; }
    RunForm #f-opts-row { grid-size: 2; grid-columns: 12 1fr; height: auto; }
    RunForm Button { width: 100%; height: 1; }
    RunForm Label.-invalid { color: $error; text-style: bold; }
    RunForm Input.-invalid { color: $error; }
    """

    class Submitted(Message):
        def __init__(self, run: FormRun) -> None:
            super().__init__()
            self.run = run

    def compose(self) -> ComposeResult:
        yield Label(
            "New run  (Enter in a field or the button starts it)", classes="title form-title"
        )
        with Grid():
            for f in FIELDS:
                if f.name == "options":
                    continue
                yield Label(f.label, id=f"{f.id}-label")
                if f.kind == "select":
                    yield Select(
                        [(c, c) for c in f.choices],
                        value=f.default,
                        allow_blank=False,
                        id=f.id,
                        compact=True,
                    )
                else:
                    yield Input(
                        value=f.default or None,
                        placeholder=f.placeholder,
                        id=f.id,
                        compact=True,
                        type="integer" if f.kind == "int" else "text",
                    )
        with Grid(id="f-opts-row"):
            o = BY_NAME["options"]
            yield Label(o.label, id=f"{o.id}-label")
            yield Input(placeholder=o.placeholder, id=o.id, compact=True)
        # The button before the check line: a long message must not push it out of view.
        yield Button("Start run", id="start", variant="primary", compact=True)
        yield Static("", id="f-check")

    def on_mount(self) -> None:
        for inp in self.query(Input):
            inp.cursor_blink = False

    def values(self) -> dict[str, str]:
        """FormField name -> the text the field holds."""
        out: dict[str, str] = {}
        for f in FIELDS:
            w = self.query_one(f"#{f.id}")
            out[f.name] = (
                str(w.value) if isinstance(w, Select) else self.query_one(f"#{f.id}", Input).value
            )
        return out

    def set_value(self, name: str, value: str) -> None:
        w = self.query_one(f"#{BY_NAME[name].id}")
        if isinstance(w, (Input, Select)):
            w.value = value

    def show_check(self, error: str | None, hint: str = "", field: str | None = None) -> None:
        """The check line under the form, and the field that caused an error marked beside it
        (its label reads "✘ <label>" in red; hovering the field shows the message)."""
        if error and field is None:
            field = "suite" if error.startswith("suite:") else "options"
        for f in FIELDS:
            lab = self.query_one(f"#{f.id}-label", Label)
            w = self.query_one(f"#{f.id}")
            bad = bool(error) and f.name == field
            lab.update(f"✘ {f.label}" if bad else f.label)
            lab.set_class(bad, "-invalid")
            w.set_class(bad, "-invalid")
            w.tooltip = error if bad else None
        t = Text()
        if error:
            t.append(
                "✘ "
                + (
                    f"{BY_NAME[field].label}: "
                    if field and not error.startswith((BY_NAME[field].label, field))
                    else ""
                )
                + error,
                style="bold red",
            )
        elif hint:
            t.append("✔ ", style="green")
        if hint:
            t.append(("\n" if error else "") + hint, style="dim")
        self.query_one("#f-check", Static).update(t)

    # -- inline checks ----------------------------------------------------------------------
    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id in ("f-suite", "f-suite-path", "f-options", "f-model"):
            self.check()

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id in ("f-chat", "f-effort"):
            self.check()

    def check(self) -> None:
        try:
            run = form_run(self.values())
        except FormError as e:
            self.show_check(str(e), field=e.field)
            return
        self._check_options(run)

    @work(thread=True, exclusive=True, exit_on_error=False, group="form-check")
    def _check_options(self, run: FormRun) -> None:
        err, hint = check_task_options(run)
        self.app.call_from_thread(self.show_check, err, hint)

    # -- submit -----------------------------------------------------------------------------
    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            event.stop()
            self.submit()

    def submit(self) -> None:
        """Start the run, or name the field that stops it beside that field (an unknown suite
        was once a toast that vanished when the run thread failed)."""
        try:
            run = form_run(self.values())
        except FormError as e:
            self._refuse(str(e), e.field)
            return
        err, hint = check_task_options(run)  # the suite loads and the task options are valid
        if err:
            self._refuse(err, "suite" if err.startswith("suite:") else "options", hint)
            return
        self.show_check(None, hint)
        self.post_message(self.Submitted(run))

    def _refuse(self, error: str, field: str, hint: str = "") -> None:
        self.show_check(error, hint, field=field)
        self.query_one(f"#{BY_NAME[field].id}").focus()
