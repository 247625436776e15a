"""Factors that would change nothing: refused before any cell runs (docs/studies.md, "Checks").

A study's cells exist so that a difference between them can be read as the effect of a factor.
A level that cannot change what a cell sends or scores would make its own run, with its own id,
and a matrix that looks as if the factor had been tested and found to do nothing. Refused here,
with one line naming the factor, the level, the suite and why:

- `system_prompt` where the suite's task scores without a chat template (`chat: false`, e.g.
  a choice task's log-likelihoods), as a level or as the study's option: the system prompt
  reaches the model only through the chat template (local models) or a chat request (APIs), so
  no request would carry it;
- `system_prompt` or `chat` on a local model that has no chat template: the text sent is the
  same with and without;
- two cells whose requests would be identical (levels that set the same values, or differ
  only in what the task does not send): the second is refused, naming the first.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from llmscope.studies.spec import Cell, Study, StudyError


@cache
def chat_template_known(model: str | None) -> bool | None:
    """Whether a local model has a chat template, read from its files without loading it
    (a GGUF file's metadata, a folder's tokenizer files); None when it cannot be told (a hub
    id not on disk, an API model: the server applies its own)."""
    from llmscope.engine.models import ModelSpecError, parse_model

    try:
        spec = parse_model(model)
    except ModelSpecError:
        return None
    if spec.backend != "hf" or spec.path is None:
        return None
    if spec.gguf_file is not None:
        try:
            from gguf import GGUFReader

            return "tokenizer.chat_template" in GGUFReader(Path(spec.path) / spec.gguf_file).fields
        except Exception:  # no gguf package or an unreadable file: the load says so
            return None
    folder = Path(spec.path)
    if not folder.is_dir():
        return None
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    cfg = folder / "tokenizer_config.json"
    if not cfg.is_file():
        return None
    try:
        return bool(json.loads(cfg.read_text(encoding="utf-8")).get("chat_template"))
    except (OSError, ValueError):
        return None


def _level_setting(study: Study, cell: Cell, option: str) -> tuple[str, str] | None:
    """(factor, level) of the cell's level that sets `option` (a run option or `opt.NAME`)."""
    for f in study.factors:
        lab = cell.levels.get(f.name)
        opts = dict(f.levels).get(lab or "", {})
        if option in opts or option.removeprefix("opt.") in (opts.get("opt") or {}):
            return f.name, str(lab)
    return None


def _effective_chat(cell: Cell, suites: dict[Any, Any]) -> bool | None:
    """Whether the cell's task passes prompts through the chat template (None: it depends on
    the scoring method, chosen when the model is probed)."""
    from llmscope.data.derived import with_templates
    from llmscope.data.suites import load_suite
    from llmscope.runs.start import task_identity

    key = (cell.suite.suite, cell.suite.suite_path)
    if key not in suites:
        suites[key] = load_suite(*key)
    suite = suites[key]
    if cell.templates is not None:
        suite = with_templates(suite, cell.templates.templates, cell.templates.level)
    opts = cell.task_options()
    if cell.options.get("chat") is not None:
        opts["chat"] = cell.options["chat"]
    chat = task_identity(suite, opts).get("chat")
    return chat if isinstance(chat, bool) else None


def _signature(cell: Cell, chat: bool | None) -> str:
    """What the cell sends and scores: its suite, templates, model, the backend options that
    change answers (the system prompt only where a chat template carries it) and task options."""
    cfg = cell.config()
    try:
        cfg = cfg.resolve()[0]  # the backend kind decides which fields are identity
    except Exception:  # noqa: BLE001 - check_cells has reported bad options already
        pass
    ident = cfg.identity()
    if chat is False:
        ident.pop("system_prompt", None)
    opts = cell.task_options()
    if cell.options.get("chat") is not None:
        opts["chat"] = cell.options["chat"]
    return json.dumps(
        [
            cell.suite.suite,
            cell.suite.suite_path,
            None if cell.templates is None else [cell.templates.templates],
            cell.model.model,
            ident,
            opts,
        ],
        sort_keys=True,
        default=str,
    )


def check_levels(study: Study) -> None:
    """Refuse a factor level that changes nothing a cell sends or scores (module doc); raises
    StudyError naming the file, line, factor and suite."""
    suites: dict[Any, Any] = {}
    seen: dict[str, Cell] = {}

    def refuse(cell: Cell, option: str, why: str) -> StudyError:
        fl = _level_setting(study, cell, option)
        assert fl is not None
        fname, lab = fl
        where = cell.sources.get(option) or ""
        path, _, line = where.rpartition(":")
        return StudyError(
            f"factor {fname!r} level {lab!r} sets {option} for suite {cell.suite.label!r}, which "
            f"cannot change what is sent: {why}",
            path or study.path,
            int(line) if line.isdigit() else None,
            f"grid.{fname}.{lab}.{option}",
        )

    for cell in study.cells:
        chat = _effective_chat(cell, suites)
        template = None if cell.model.is_api else chat_template_known(cell.model.model)
        if cell.options.get("system_prompt") and _level_setting(study, cell, "system_prompt"):
            if chat is False:
                raise refuse(
                    cell,
                    "system_prompt",
                    "its task scores the prompts without a chat template (chat: false), and a "
                    "system prompt is sent only through one; set `chat: true` for every level "
                    "(under `options` or the suite entry) to test it",
                )
            if template is False:
                raise refuse(
                    cell,
                    "system_prompt",
                    f"model {cell.model.label!r} has no chat template, and a system prompt is "
                    "sent only through one",
                )
        elif cell.options.get("system_prompt") and chat is False:
            where = cell.sources.get("system_prompt") or ""
            path, _, line = where.rpartition(":")
            raise StudyError(
                f"system_prompt would not be sent to suite {cell.suite.label!r}: its task scores "
                "the prompts without a chat template (chat: false), and a system prompt is sent "
                "only through one; set it on the suites that use a chat template, or set "
                "`chat: true` for this suite",
                path or study.path,
                int(line) if line.isdigit() else None,
                "options.system_prompt",
            )
        for opt in ("chat", "opt.chat"):
            if template is False and _level_setting(study, cell, opt):
                raise refuse(
                    cell,
                    opt,
                    f"model {cell.model.label!r} has no chat template, so the prompt is sent as "
                    "it is with chat on or off",
                )
        sig = _signature(cell, chat)
        if sig in seen:
            first = seen[sig]
            raise StudyError(
                f"cells [{first.key}] and [{cell.key}] would send identical requests (their "
                "levels set the same values, or differ only in what the suite's task does not "
                "send); drop one level or make them differ",
                study.path,
            )
        seen[sig] = cell
