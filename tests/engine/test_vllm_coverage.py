"""Every built-in suite has a test in the real-vLLM tier (runs without vLLM installed)."""

from __future__ import annotations

import inspect

from tests.engine import test_server_vllm as tier


def test_every_builtin_suite_has_a_vllm_test() -> None:
    from llmscope.data.suites import BUILTIN_DIR

    shipped = {p.parent.name for p in BUILTIN_DIR.glob("*/suite.yaml")}
    assert shipped <= tier.VLLM_TESTED, (
        f"built-in suites without a vLLM test: {sorted(shipped - tier.VLLM_TESTED)}"
    )
    # ... and each listed suite is run by a test function of the tier, not only listed
    tests = "\n".join(
        inspect.getsource(f)
        for name, f in vars(tier).items()
        if name.startswith("test_") and callable(f)
    )
    assert all(f'"{s}"' in tests for s in tier.VLLM_TESTED), [
        s for s in tier.VLLM_TESTED if f'"{s}"' not in tests
    ]
