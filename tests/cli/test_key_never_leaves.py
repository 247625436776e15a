"""A planted API key never leaves: not through a base URL with credentials, not through an
`@FILE` base URL naming a file that is no list of URLs (on the command line or in a study file,
with and without --trust-study), not through a study naming such a file as a suite.

Each case runs the real CLI in a subprocess with its own HOME and working folder; afterwards
every file under both (the endpoints list, any database, caches, live channel) and everything
printed is searched for the key. The endpoints list keeps public URLs only, mode 0600.
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
from pathlib import Path

import pytest

from tests.helpers.cli import cli, cli_env, record

pytestmark = pytest.mark.reliability

CLOSED = "http://127.0.0.1:9/v1"  # nothing listens: a request, were one sent, fails


def _setup(tmp_path: Path) -> tuple[Path, Path, Path, str]:
    key = "sk-planted-" + secrets.token_hex(12)
    home, work, elsewhere = tmp_path / "home", tmp_path / "work", tmp_path / "elsewhere"
    for d in (home, work, elsewhere):
        d.mkdir()
    (work / "items.jsonl").write_text(
        "".join(f'{{"id": {i}, "text": "c {i}"}}\n' for i in range(3))
    )
    (work / "suite.yaml").write_text("name: s\ntask: yesno\nitems: items.jsonl\n")
    # an environment-like file and a shadow-like file, outside the folders searched
    (elsewhere / "environ").write_text(f"PATH=/bin\nOPENAI_API_KEY={key}\n{CLOSED}\n")
    (elsewhere / "shadow").write_text(f"root:{key}:20228:0:99999:7:::\n")
    (elsewhere / "shadow2").write_text(f"daemon:*:1:2:::\nroot:{key}:20228:0:99999:7\n")
    return home, work, elsewhere, key


def _leaks(
    key: str, roots: list[Path], outputs: list[subprocess.CompletedProcess[str]]
) -> list[str]:
    found = []
    needle = key.encode()
    for root in roots:
        for p in root.rglob("*"):
            if p.is_file() and needle in p.read_bytes():
                found.append(str(p))
    for o in outputs:
        if key in o.stdout or key in o.stderr:
            found.append(f"output of {o.args[3:6]}")
    return found


def _run(work: Path, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, env=cli_env(HOME=str(home), XDG_CONFIG_HOME="", **env), cwd=work)


def _api_run(work: Path, home: Path, base_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _run(
        work,
        home,
        "run",
        "--suite",
        "suite.yaml",
        "--db",
        "r.duckdb",
        "--model",
        "openai:m",
        "--base-url",
        base_url,
        "--no-report",
        **env,
    )


def _one_line(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 2, (p.returncode, p.stderr)
    err = p.stderr.strip()
    assert "Traceback" not in err and err.count("llmscope: error:") == 1, err
    return err


@pytest.mark.slow
def test_a_key_in_the_base_url_or_an_at_file_never_leaves(tmp_path: Path) -> None:
    home, work, elsewhere, key = _setup(tmp_path)
    outs = []
    # 1-2: credentials in the URL, refused before anything is printed, remembered or stored
    for url in (f"http://user:{key}@127.0.0.1:9/v1", f"http://{key}@127.0.0.1:9/v1"):
        outs.append(_api_run(work, home, url, OPENAI_API_KEY="sk-other-0000000000"))
        assert "user:password@" in _one_line(outs[-1])
    # 3: `@FILE` on the command line naming an environment-like file
    outs.append(_api_run(work, home, f"@{elsewhere / 'environ'}"))
    assert "line 1 is not a URL" in _one_line(outs[-1])
    # 4: the same in a study file, with and without --trust-study
    (work / "st.yaml").write_text(
        f'name: st\nsuites: [suite.yaml]\nmodels:\n  - model: openai:m\n    base_url: "@{elsewhere / "environ"}"\n'
    )
    for extra in ((), ("--trust-study",)):
        outs.append(_run(work, home, "study", "run", "st.yaml", "--db", "st.duckdb", *extra))
        err = _one_line(outs[-1])
        assert "st.yaml:5, field 'base_url'" in err and "line 1 is not a URL" in err, err
    # 5: a study naming a file with the key in it as a suite: the error quotes none of it
    (work / "st2.yaml").write_text(
        f'name: st2\nsuites: ["{elsewhere / "shadow"}"]\nmodels: [{{model: openai:m, base_url: "{CLOSED}"}}]\n'
    )
    for extra in ((), ("--dry-run",)):
        outs.append(
            _run(
                work,
                home,
                "study",
                "run",
                "st2.yaml",
                "--db",
                "st2.duckdb",
                "--trust-study",
                *extra,
            )
        )
        _one_line(outs[-1])
    # the same file, and one YAML cannot parse, as the study's plan
    for shadow in ("shadow", "shadow2"):
        (work / "st4.yaml").write_text(
            f'name: st4\nsuites: [suite.yaml]\nplan: "{elsewhere / shadow}"\n'
            f'models: [{{model: openai:m, base_url: "{CLOSED}"}}]\n'
        )
        outs.append(_run(work, home, "study", "run", "st4.yaml", "--dry-run"))
        assert "field 'plan'" in _one_line(outs[-1])
    # 6: the real /proc/self/environ with the key planted in the environment
    if Path("/proc/self/environ").is_file():
        outs.append(_api_run(work, home, "@/proc/self/environ", OPENAI_API_KEY=key))
        assert "is not a URL" in _one_line(outs[-1]) or "not UTF-8" in outs[-1].stderr
        (work / "st3.yaml").write_text(
            'name: st3\nsuites: [suite.yaml]\nmodels:\n  - model: openai:m\n    base_url: "@/proc/self/environ"\n'
        )
        outs.append(
            _run(work, home, "study", "run", "st3.yaml", "--db", "st3.duckdb", OPENAI_API_KEY=key)
        )
        _one_line(outs[-1])
    leaks = _leaks(key, [home, work], outs)
    files = sum(1 for r in (home, work) for p in r.rglob("*") if p.is_file())
    record("key_never_leaves", cases=len(outs), files_searched=files, leaks=len(leaks))
    assert leaks == []
    assert not (work / "r.duckdb").exists() and not (work / "st.duckdb").exists()


def test_endpoints_file_keeps_public_urls_only_mode_0600(tmp_path: Path) -> None:
    home, work, _, key = _setup(tmp_path)
    ep = home / ".config" / "llmscope" / "endpoints.txt"
    ep.parent.mkdir(parents=True)
    # a file an older version wrote: a URL with a key, environment lines, world-readable
    ep.write_text(
        f"http://u:{key}@10.0.0.1:8000/v1?k={key}\nOPENAI_API_KEY={key}\nhttp://10.0.0.2/v1\n"
    )
    os.chmod(ep, 0o644)
    out = _api_run(work, home, "http://127.0.0.1:9/v1/", OPENAI_API_KEY="sk-other-0000000000")
    assert "Traceback" not in out.stderr, out.stderr
    # the URL with a key in it is one llmscope refuses: dropped with the other lines
    assert ep.read_text().splitlines() == ["http://10.0.0.2/v1", CLOSED]
    assert stat.S_IMODE(ep.stat().st_mode) == 0o600
    assert _leaks(key, [home, work], [out]) == []
    # a new file is created 0600 too
    ep.unlink()
    _api_run(work, home, CLOSED, OPENAI_API_KEY="sk-other-0000000000")
    assert ep.read_text() == CLOSED + "\n" and stat.S_IMODE(ep.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (
            f"{CLOSED}\n\n# a comment\nhttp://127.0.0.1:10/v1\nnot a url at all\n",
            "line 5 is not a URL",
        ),
        ("http://u:SECRETSECRET@127.0.0.1:9/v1\n", "line 1 has user:password@"),
        ("\n# nothing\n", "no URLs"),
    ],
)
def test_at_file_lines_are_checked_and_never_shown(tmp_path: Path, content: str, why: str) -> None:
    from llmscope.engine.backend import BackendConfigError
    from llmscope.engine.openai import expand_base_urls

    f = tmp_path / "urls.txt"
    f.write_text(content)
    with pytest.raises(BackendConfigError) as e:
        expand_base_urls(f"@{f}")
    assert (
        why in str(e.value) and "SECRETSECRET" not in str(e.value) and "at all" not in str(e.value)
    )


def test_at_file_must_be_a_small_regular_file(tmp_path: Path) -> None:
    from llmscope.engine.backend import BackendConfigError
    from llmscope.engine.openai import expand_base_urls

    with pytest.raises(BackendConfigError, match="not a regular file"):
        expand_base_urls("@/dev/zero")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BackendConfigError, match="not a regular file"):
        expand_base_urls(f"@{fifo}")
    big = tmp_path / "big.txt"
    big.write_text((CLOSED + "\n") * 5000)
    with pytest.raises(BackendConfigError, match="not a list of URLs"):
        expand_base_urls(f"@{big}")
    ok = tmp_path / "ok.txt"
    ok.write_text(f"# two replicas\n{CLOSED}/\nhttp://[::1]:8001/v1  # local\n")
    assert expand_base_urls(f"@{ok}") == [CLOSED, "http://[::1]:8001/v1"]
