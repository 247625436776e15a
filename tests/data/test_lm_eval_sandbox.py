"""Hostile lm-eval task templates never run code (data/lm_eval_tasks.py renders in a sandbox).

Each attack tries to write a marker file through Python internals reachable from Jinja's
globals; the load must stop with one line naming the file and field, and the marker must not
exist afterwards. Legit templates (filters, indexing, loops, method calls that do not mutate)
render exactly as lm-eval renders them, written out by hand below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmscope.data.suites import SuiteError, load_suite
from tests.helpers.cli import assert_clean_error, cli
from tests.helpers.lm_eval import TINY_ARC_DOCS, write_task

HEAD = (
    "task: evil\ndataset_path: json\ndataset_kwargs: {data_files: {test: docs.jsonl}}\ntest_split: test\n"
    'output_type: multiple_choice\ndoc_to_choice: "{{choices.text}}"\n'
)
TARGET = 'doc_to_target: "{{choices.label.index(answerKey)}}"\n'


def _attacks(marker: Path) -> dict[str, str]:
    cmd = f"touch {marker}"
    return {
        "cycler_globals": f"{{{{ cycler.__init__.__globals__.os.system('{cmd}') }}}}",
        "self_globals": f"{{{{ self.__init__.__globals__.__builtins__.__import__('os').system('{cmd}') }}}}",
        "lipsum_globals": f"{{{{ lipsum.__globals__['os'].system('{cmd}') }}}}",
        "joiner_globals": f"{{{{ joiner.__init__.__globals__.os.popen('{cmd}').read() }}}}",
        "namespace_globals": f"{{{{ namespace.__init__.__globals__.os.system('{cmd}') }}}}",
        "class_mro": (
            "{% for c in ''.__class__.__mro__[1].__subclasses__() %}{% if c.__name__ == 'Popen' %}"
            f"{{{{ c('{cmd}', shell=True) }}}}{{% endif %}}{{% endfor %}}"
        ),
        "attr_filter": (
            f"{{{{ (cycler|attr('__init__')|attr('__globals__'))['os'].system('{cmd}') }}}}"
        ),
        "format_string": "{{ '{0.__init__.__globals__[os]}'.format(cycler) }}",
        "statement_set": f"{{% set x = cycler.__init__.__globals__.os.system('{cmd}') %}}ok",
    }


@pytest.mark.parametrize("name", list(_attacks(Path("/x"))))
def test_hostile_template_is_refused_and_runs_nothing(tmp_path: Path, name: str) -> None:
    marker = tmp_path / "PWNED"
    tpl = _attacks(marker)[name]
    path = write_task(tmp_path, HEAD + TARGET + f"doc_to_text: {json.dumps(tpl)}\n")
    with pytest.raises(SuiteError) as e:
        load_suite(path).items()
    msg = str(e.value)
    assert "\n" not in msg
    assert str(path) in msg and "doc_to_text" in msg, msg
    assert "unsafe" in msg.lower(), msg
    assert not marker.exists()


def test_hostile_target_and_choice_fields_are_named(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    evil = json.dumps(f"{{{{ cycler.__init__.__globals__.os.system('touch {marker}') }}}}")
    for field in ("doc_to_target", "doc_to_choice"):
        head = HEAD if field == "doc_to_target" else HEAD.replace("doc_to_choice", "x_unused")
        y = (
            head
            + (TARGET if field == "doc_to_choice" else "")
            + 'doc_to_text: "{{question}}"\n'
            + f"{field}: {evil}\n"
        )
        with pytest.raises(SuiteError, match=field) as e:
            load_suite(write_task(tmp_path, y)).items()
        assert "unsafe" in str(e.value).lower()
    assert not marker.exists()


def test_resource_bombs_are_refused(tmp_path: Path) -> None:
    for tpl, _what in (
        ("{{ 'x' * 10000000000 }}", "repetition"),
        ("{{ 9 ** 999999999 }}", "exponent"),
        ("{% for i in range(99999) %}{{ 'abcdefghijklmnopqrstuvwxyz' }}{% endfor %}", "output"),
        ("{{ range(10000000)|list|length }}", "range"),
    ):
        path = write_task(tmp_path, HEAD + TARGET + f"doc_to_text: {json.dumps(tpl)}\n")
        with pytest.raises(SuiteError, match="unsafe") as e:
            load_suite(path).items()
        assert "doc_to_text" in str(e.value), (tpl, e.value)


def test_mutating_a_doc_is_refused(tmp_path: Path) -> None:
    tpl = "{{ choices.text.append('x') }}{{ question }}"
    with pytest.raises(SuiteError, match="unsafe"):
        load_suite(
            write_task(tmp_path, HEAD + TARGET + f"doc_to_text: {json.dumps(tpl)}\n")
        ).items()


def test_yaml_alias_is_refused(tmp_path: Path) -> None:
    y = HEAD + TARGET + "a: &a [x, x]\nb: [*a, *a]\ndoc_to_text: question\n"
    with pytest.raises(SuiteError, match="aliases"):
        load_suite(write_task(tmp_path, y))


def test_legit_templates_still_render(tmp_path: Path) -> None:
    """Filters, indexing, loops, `loop` variables, ranges, tests and `regex_replace`, as lm-eval
    task files use them; the expected text is written out by hand."""
    tpl = (
        "{{ question|trim|upper }} ({{ choices.text[0] }}/{{ choices.label|join(',') }})"
        "{% for c in choices.text %} {{ loop.index }}.{{ c|title }}{% endfor %}"
        "{% if answerKey is string %} k{% endif %} {{ range(3)|list|length }}"
        " {{ question|regex_replace('[aeiou]', '') }}"
    )
    y = HEAD + TARGET + f"doc_to_text: {json.dumps(tpl)}\n"
    work = load_suite(write_task(tmp_path, y)).work()
    q = TINY_ARC_DOCS[0]["question"]
    assert work[0].prompt == (
        f"{q.upper()} (green/A,B,C) 1.Green 2.Blue 3.Red k 3 Wht clr s th sky n  clr dy?"
    )
    assert [w.gold for w in work] == ["blue", "four"]


def test_cli_run_of_a_hostile_task_file(tmp_path: Path) -> None:
    """The reported attack end to end: `llmscope run --suite evil.yaml` exits 2 with one line and
    nothing is executed (the marker is written by the shell only if the template ran)."""
    marker = tmp_path / "PWNED"
    tpl = f"{{{{ cycler.__init__.__globals__.os.system('id > {marker}') }}}}"
    path = write_task(
        tmp_path, HEAD + TARGET + f"doc_to_text: {json.dumps(tpl)}\n", name="evil.yaml"
    )
    proc = cli(
        "run", "--suite", str(path), "--db", str(tmp_path / "r.duckdb"), "--no-cache", "--quiet"
    )
    err = assert_clean_error(proc, "evil.yaml", "doc_to_text", "unsafe")
    assert len(err.strip().splitlines()) == 1, err
    assert not marker.exists()
