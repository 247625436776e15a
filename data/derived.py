"""Derived suites: a suite with its prompt templates replaced (docs/studies.md, "Templates").

A prompt template decides what the model is asked, so a run with other templates is another
run. Rather than a task option beside the suite (which the run's identity would not see), other
templates make another suite: `with_templates(suite, templates, level)` returns the suite named
`<suite>~<level>` whose spec is the parent's with its templates replaced and a `derived_from`
record (the parent's name and suite id, the level). Its content hash, and so its suite id and
every run's identity, follow from that spec and the parent's items: the same templates under
the same level name give the same suite again (a study cell and `llmscope run --templates`
alike), while other templates, another level name or a changed parent give another one.

The derived suite is an ordinary `Suite` for the runner, the store and every front end; its
`describe()` (stored in `runs.meta.suite`) adds `derived`, which is how a resume or a rerun
builds it again (`derivation_of_run`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from llmscope.data.safety import check_template
from llmscope.data.suites import Suite, SuiteError

SEP = "~"
# A level name becomes part of a suite name (shown in reports, file names of exports).
_LEVEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")


class TemplateError(ValueError):
    """A template set that cannot apply to a suite (one line; the caller adds where it was set)."""


@dataclass
class DerivedSuite(Suite):
    """A suite whose templates were replaced (`with_templates`); records its parent and level."""

    parent: str = ""
    parent_suite_id: str = ""
    level: str = ""

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["derived"] = {
            "parent": self.parent,
            "parent_suite_id": self.parent_suite_id,
            "level": self.level,
            "templates": dict(self.templates),
        }
        return out


def derived_name(parent: str, level: str) -> str:
    """The name of `parent` with the templates of `level`: `commonsense-sample~expert`."""
    return f"{parent}{SEP}{level}"


def normalize_templates(suite: Suite, templates: Any) -> dict[str, str]:
    """Variant -> template for `suite`: a mapping names variants; one text is for a suite with
    one variant. Raises TemplateError (unsafe or malformed template, a field the items lack,
    a variant the suite's `variant_gold` does not know)."""
    variants = suite.variant_names()
    if isinstance(templates, str):
        if len(variants) != 1:
            raise TemplateError(
                f"suite {suite.name!r} has {len(variants)} prompt variants ({', '.join(variants)}): "
                "give a mapping of variant -> template"
            )
        out = {variants[0]: templates}
    elif isinstance(templates, dict) and templates:
        out = {}
        for k, v in templates.items():
            if not isinstance(k, str) or not k.strip() or not isinstance(v, str):
                raise TemplateError(
                    f"variant {k!r}: a template set maps variant names to template text"
                )
            out[k] = v
    else:
        raise TemplateError(
            "must be a template (text) or a non-empty mapping of variant name -> template"
        )
    if suite.variant_gold:  # these variants decide the gold answer: keep their meaning
        unknown = [k for k in out if k not in variants]
        if unknown:
            raise TemplateError(
                f"variant {unknown[0]!r} is not a variant of suite {suite.name!r} "
                f"({', '.join(variants)}), whose gold answers depend on the variant (variant_gold)"
            )
    have = _item_fields(suite)
    for variant, tpl in out.items():
        try:
            names = check_template(tpl)
        except ValueError as e:
            raise TemplateError(f"template {variant!r} is malformed: {e}") from None
        for name in names:
            if name not in have:
                raise TemplateError(
                    f"template {variant!r} names field {name!r}, which not every item of suite "
                    f"{suite.name!r} has; fields: {', '.join(sorted(have))}"
                )
    return out


def _item_fields(suite: Suite) -> set[str]:
    items = suite.items()
    if not items:
        return set()
    common = set(items[0].fields)
    for it in items[1:]:
        common &= set(it.fields)
    return common


def with_templates(suite: Suite, templates: Any, level: str) -> DerivedSuite:
    """`suite` with its prompt templates replaced by `templates` (see `normalize_templates`),
    named `<suite>~<level>`, with its own content hash. Raises TemplateError."""
    if not isinstance(level, str) or not _LEVEL_RE.match(level):
        raise TemplateError(
            f"template level name {level!r} becomes part of the suite's name: use letters, digits "
            "and . _ + - (up to 64, starting with a letter or digit)"
        )
    if isinstance(suite, DerivedSuite):
        raise TemplateError(f"suite {suite.name!r} already has other templates ({suite.level!r})")
    tpls = normalize_templates(suite, templates)
    name = derived_name(suite.name, level)
    spec = {k: v for k, v in suite.spec.items() if k not in ("template", "templates")}
    variant_gold = {k: v for k, v in suite.variant_gold.items() if k in tpls}
    spec.update(
        name=name,
        templates=tpls,
        derived_from={"suite": suite.name, "suite_id": suite.suite_id, "level": level},
    )
    if "variant_gold" in spec:
        spec["variant_gold"] = variant_gold
    fields = {
        f.name: getattr(suite, f.name)
        for f in dataclasses.fields(Suite)
        if f.name not in ("_hash",) and f.init
    }
    fields.update(name=name, spec=spec, templates=tpls, variant_gold=variant_gold)
    return DerivedSuite(**fields, parent=suite.name, parent_suite_id=suite.suite_id, level=level)


@dataclass(frozen=True)
class Derivation:
    """Which templates a run's suite was given: the level's name and its template set."""

    level: str
    templates: Any


def derivation_of_run(run: dict[str, Any]) -> Derivation | None:
    """The derivation a stored run's suite was made with (None: the suite as loaded)."""
    meta = run.get("meta")
    suite = meta.get("suite") if isinstance(meta, dict) else None
    d = suite.get("derived") if isinstance(suite, dict) else None
    if not isinstance(d, dict) or not isinstance(d.get("level"), str):
        return None
    return Derivation(d["level"], d.get("templates"))


def apply(suite: Suite, derivation: Derivation | None) -> Suite:
    """`suite`, or its derived suite; a SuiteError (one line) for templates that do not fit."""
    if derivation is None:
        return suite
    try:
        return with_templates(suite, derivation.templates, derivation.level)
    except TemplateError as e:
        raise SuiteError(f"templates {derivation.level!r}: {e}") from None


def read_templates_file(arg: str) -> Derivation:
    """`[LEVEL=]FILE` (`llmscope run --templates`): a YAML or TOML file holding what a study's
    `templates:` holds (a mapping variant -> template; in YAML also one template text). The
    level's name is LEVEL, else the file's stem. Raises SuiteError naming the file."""
    import tomllib
    from pathlib import Path

    import yaml

    from llmscope.data.safety import MAX_SPEC_BYTES, UnsafeInput, read_regular
    from llmscope.data.suites import _SpecLoader

    def is_file(p: Path) -> bool:
        try:
            return p.is_file()
        except (OSError, ValueError):  # a name too long for the file system, a NUL byte
            return False

    level, sep, file = arg.partition("=")
    if not sep or not level or is_file(Path(arg)):
        level, file = Path(arg).stem, arg
    path = Path(file)
    if len(level) > 64 or any(len(part) > 255 for part in path.parts) or len(file) > 4096:
        shown = file if len(file) <= 80 else f"{file[:60]}... ({len(file):,} characters)"
        long_file = any(len(part) > 255 for part in path.parts) or len(file) > 4096
        too_long = "the file name" if long_file else "the level name"
        raise SuiteError(
            f"{too_long} is too long (at most 64 characters for a level, 255 for a file name)",
            shown,
            field="--templates",
        )
    try:
        text = read_regular(path, MAX_SPEC_BYTES).decode("utf-8")
        if path.suffix == ".toml":
            data: Any = tomllib.loads(text)
        else:
            data = yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except UnsafeInput as e:
        raise SuiteError(e.message, path, field="--templates") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SuiteError(f"cannot read templates: {msg}", path, field="--templates") from None
    if isinstance(data, dict) and set(data) == {"templates"}:  # a suite-spec-like file
        data = data["templates"]
    return Derivation(level, data)
