"""Torch threads of the local backend: physical cores by default, set once."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from llmscope.engine.hf import HFBackend  # noqa: E402
from llmscope.engine.hf.loading import default_threads, physical_cores  # noqa: E402
from tests.helpers.tinymodel import make_tiny_model, tiny_spec  # noqa: E402


def test_physical_cores_counts_each_core_once() -> None:
    psutil = pytest.importorskip("psutil")
    cpu_max = Path("/sys/fs/cgroup/cpu.max")
    quota = cpu_max.read_text().split()[0] if cpu_max.is_file() else "max"
    if (
        not hasattr(os, "sched_getaffinity")
        or len(os.sched_getaffinity(0)) != os.cpu_count()
        or quota != "max"
    ):
        pytest.skip(
            "process limited to some CPUs or by a CPU quota: psutil's host count is no reference"
        )
    assert physical_cores() == psutil.cpu_count(logical=False)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    d = tmp_path_factory.mktemp("tiny")
    model, tok = make_tiny_model(d, vocab="trained")
    return model, tok, tiny_spec(d)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    import threading

    calls: list[tuple[int, str]] = []
    real = torch.set_num_threads

    def spy(n: int) -> None:
        calls.append((n, threading.current_thread().name))
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", spy)
    return calls


def test_default_threads_are_the_physical_cores(
    tiny: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tok, spec = tiny
    calls = _spy(monkeypatch)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert default_threads() == physical_cores()
    b = HFBackend(spec, model=model, tokenizer=tok, device="cpu", dtype="float32")
    asyncio.run(b.aclose())  # no work: two threads on a loaded 2-core machine are slow
    assert calls == [(physical_cores(), "llmscope-hf")]
    assert b.describe()["threads"] is None and b.describe()["torch_threads"] == physical_cores()


def test_threads_are_set_once_in_the_model_thread(
    tiny: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tok, spec = tiny
    calls = _spy(monkeypatch)
    before = torch.get_num_threads()
    b = HFBackend(
        spec, model=model, tokenizer=tok, device="cpu", dtype="float32", batch_size=2, threads=1
    )
    prompts = [f"Is a {w} an animal?" for w in ("cat", "stone", "river")]

    async def go() -> Any:
        try:
            for _ in range(2):  # several calls, several batches
                await asyncio.gather(*[b.next_token(p, ["yes", "no"]) for p in prompts])
                await b.loglik([(p, " yes it is") for p in prompts])
        finally:
            await b.aclose()

    asyncio.run(go())
    assert b.stats()["batches"] >= 4
    assert calls == [(1, "llmscope-hf")]
    assert b.describe()["torch_threads"] == 1
    assert torch.get_num_threads() == before  # the caller's thread keeps its own setting


def test_omp_num_threads_is_the_default_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")
    assert default_threads() == physical_cores()
