"""Pytest fixtures around `tests/helpers/oai_server.py` (a scripted OpenAI-compatible server).

Test modules import what they use: `from tests.helpers.oai import oai, oai_server  # noqa: F401`.
The server runs as a subprocess on 127.0.0.1 (port chosen by the OS, printed on its
first stdout line); `oai` resets its state before each test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SERVER = Path(__file__).resolve().parent / "oai_server.py"
CANARY_KEY = "sk-canary-7f3a9c2e1b8d4f60a5e7c9b1d3f5a7c9"


@dataclass
class OAIServer:
    """Handle on a running test server: its base URL and control helpers."""

    port: int
    proc: subprocess.Popen

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _call(self, path: str, payload: Any = None) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def script(self, marker: str, **spec: Any) -> str:
        """Script the answers for prompts containing `marker`; returns the marker."""
        self._call("/_control/script", {"marker": marker, "spec": spec})
        return marker

    def faults(self, **cfg: Any) -> None:
        """Random fault injection: rate, seed, kinds, sleep, retry_after."""
        self._call("/_control/faults", cfg)

    def reset(self) -> None:
        self._call("/_control/reset", {})

    def release(self, marker: str) -> None:
        """Let the requests held for `marker` (its script's `hold_after`) go on, and later ones."""
        self._call("/_control/release", {"marker": marker})

    def held(self, marker: str) -> int:
        """How many requests for `marker` wait at its gate now."""
        return int(self.server_stats().get("held", {}).get(marker, 0))

    def log(self, marker: str | None = None) -> list[dict[str, Any]]:
        """Requests seen (optionally only those matched to `marker`), in arrival order."""
        entries = self._call("/_control/log")
        return [e for e in entries if marker is None or e["marker"] == marker]

    def server_stats(self) -> dict[str, Any]:
        return self._call("/_control/stats")


def start_server(*args: str) -> OAIServer:
    """Start `oai_server.py` with extra CLI args and wait for its port line."""
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.isdigit():
        proc.kill()
        raise RuntimeError(f"oai_server.py did not print a port: {line!r}")
    return OAIServer(int(line), proc)


def stop_server(server: OAIServer) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(timeout=5)


@contextmanager
def running_server(*args: str) -> Iterator[OAIServer]:
    """A scripted server (`start_server(*args)`) for the block, stopped however the block ends."""
    server = start_server(*args)
    try:
        yield server
    finally:
        stop_server(server)


@contextmanager
def running_pair() -> Iterator[tuple[OAIServer, OAIServer]]:
    """Two scripted servers (two replicas, or a good one and a bad one) for the block."""
    with running_server() as a, running_server() as b:
        yield a, b


@pytest.fixture(scope="module")
def oai_server() -> Iterator[OAIServer]:
    """One scripted server per test module."""
    with running_server() as server:
        yield server


@pytest.fixture
def oai(oai_server: OAIServer, monkeypatch: pytest.MonkeyPatch) -> OAIServer:
    """The module's server, reset, with the canary key in OPENAI_API_KEY."""
    oai_server.reset()
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return oai_server


def write_marked_suite(
    folder: Path,
    name: str,
    n_items: int,
    id_prefix: str,
    text: str,
    second: str = "True or not? {text}",
    topics: bool = False,
) -> Path:
    """A yes/no suite `name` for the scripted server: items `{id_prefix}{i}` with the text
    `text.format(i=i)` (a marker the server answers by, e.g. '[sess] claim {i}'), gold yes on odd
    `i` (a topic odd/even with `topics`), asked with 'TEXT Answer yes or no.' and `second`."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "items.jsonl", "w", encoding="utf-8") as f:
        for i in range(n_items):
            row = {
                "id": f"{id_prefix}{i}",
                "text": text.format(i=i),
                "gold": "yes" if i % 2 else "no",
            }
            if topics:
                row["topic"] = "odd" if i % 2 else "even"
            f.write(json.dumps(row) + "\n")
    (folder / "suite.yaml").write_text(
        f"name: {name}\ntask: yesno\nitems: items.jsonl\n"
        f"templates:\n  a: '{{text}} Answer yes or no.'\n  b: '{second}'\n",
        encoding="utf-8",
    )
    return folder / "suite.yaml"


def note_fault_outcome(case: str, outcome: str) -> None:
    """Add one measured outcome to the `api_fault_matrix` figures that RELIABILITY.md lists
    (bench/_out/reliability.json, via tests.helpers.cli.record)."""
    from tests.helpers.cli import record

    record("api_fault_matrix", merge=True, **{case: outcome})  # under record's lock (xdist)
