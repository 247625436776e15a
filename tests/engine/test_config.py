"""engine/config.py: BackendConfig validation, records, identity, and the backend registry
(model arguments: revision/trust_remote_code/adapter/system prompt/8-4 bit)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from pathlib import Path

import pytest

from llmscope.engine.config import BUILDERS, BackendConfig, ConfigError, build_backend


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("concurrency", 0, "--concurrency must be between 1 and 1024, got 0"),
        ("concurrency", 5000, "--concurrency must be between 1 and 1024, got 5000"),
        ("top_logprobs", 0, "--top-logprobs must be between 1 and 100"),
        ("max_retries", -1, "--max-retries must be between 0 and 100, got -1"),
        ("timeout", -2.0, "--timeout must be between 0.001 and 86400, got -2"),
        ("timeout", math.nan, "--timeout must be a number"),
        ("samples", 0, "--samples must be between 1 and 10000"),
        ("batch_size", 0, "--batch-size must be between 1 and 65536, got 0"),
        ("threads", 0, "--threads must be between 1 and 4096"),
        ("seed", -1, "--seed must be between 0 and 4294967295, got -1"),
        (
            "dtype",
            "float8",
            "--dtype must be one of auto, float32, bfloat16, float16, got 'float8'",
        ),
        (
            "reasoning_effort",
            "max",
            "--reasoning-effort must be one of none, minimal, low, medium, high, got 'max'",
        ),
    ],
)
def test_out_of_range_values_name_the_flag_and_the_range(
    field: str, value: object, needle: str
) -> None:
    cfg = dataclasses.replace(BackendConfig(), **{field: value})
    with pytest.raises(ConfigError) as e:
        cfg.validate()
    assert needle in str(e.value)


def test_defaults_are_valid_and_both_quantisations_exclude_each_other() -> None:
    assert BackendConfig().validate() == BackendConfig()
    with pytest.raises(ConfigError, match="exclude each other"):
        BackendConfig(load_in_8bit=True, load_in_4bit=True).validate()


def test_record_round_trip_keeps_unknown_keys_and_never_a_key() -> None:
    cfg = BackendConfig(
        model="openai:m",
        kind="openai",
        base_url="http://h:1/v1",
        concurrency=3,
        system_prompt="Be brief.",
    )
    d = cfg.to_dict()
    assert not any("key" in k for k in d)
    assert BackendConfig.from_dict(d) == cfg
    newer = {**d, "future_option": 7}
    back = BackendConfig.from_dict(newer)
    assert back.extra == {"future_option": 7}
    assert back.to_dict()["future_option"] == 7


def test_identity_differences_ignore_speed_options() -> None:
    a = BackendConfig(model="openai:m", kind="openai", base_url="http://a/v1")
    faster = dataclasses.replace(a, concurrency=64, timeout=5.0, max_retries=1)
    assert a.differences(faster) == []
    moved = dataclasses.replace(a, base_url="http://b/v1", top_logprobs=5)
    assert a.differences(moved) == [
        "base_url: 'http://a/v1' -> 'http://b/v1'",
        "top_logprobs: 20 -> 5",
    ]
    # a local model's identity has no API fields
    loc = BackendConfig(model="hf:x", kind="hf")
    assert "base_url" not in loc.identity() and "dtype" in loc.identity()


def test_reasoning_effort_is_identity_and_api_only() -> None:
    a = BackendConfig(
        model="openai:m", kind="openai", base_url="http://a/v1", reasoning_effort="low"
    )
    assert a.differences(dataclasses.replace(a, reasoning_effort="high")) == [
        "reasoning_effort: 'low' -> 'high'"
    ]
    assert a.differences(dataclasses.replace(a, reasoning_effort=None)) == [
        "reasoning_effort: 'low' -> None"
    ]
    assert BackendConfig.from_dict(a.to_dict()).reasoning_effort == "low"
    with pytest.raises(ConfigError, match="--reasoning-effort applies to API models"):
        BackendConfig(model="hf:x", reasoning_effort="low").resolve()


def test_registry_has_both_kinds_and_local_only_flags_are_refused_for_apis() -> None:
    assert set(BUILDERS) >= {"hf", "openai"}
    for field, flag in [
        ("revision", "--revision"),
        ("adapter", "--adapter"),
        ("load_in_4bit", "--load-in-4bit"),
        ("trust_remote_code", "--trust-remote-code"),
    ]:
        value: object = True if field.startswith(("load", "trust")) else "x"
        cfg = dataclasses.replace(BackendConfig(model="openai:m"), **{field: value})
        with pytest.raises(ConfigError, match=f"{flag} apply to local models only"):
            build_backend(cfg)


def test_openai_config_records_the_resolved_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    built = build_backend(BackendConfig(model="openai:m"))
    try:
        assert (
            built.config.base_url == "http://127.0.0.1:9/v1"
        )  # from the environment, stored for resume
        assert built.config.kind == "openai"
        assert built.identity["base_url"] == "http://127.0.0.1:9/v1"
    finally:
        asyncio.run(built.backend.aclose())


def test_missing_key_for_the_default_endpoint_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set"):
        build_backend(BackendConfig(model="openai:gpt-4o-mini"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.cli import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("cfg"))


def test_quantisation_without_cuda_is_a_clear_error(tiny: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the error is for machines without it")
    for flag, field in [("--load-in-8bit", "load_in_8bit"), ("--load-in-4bit", "load_in_4bit")]:
        cfg = dataclasses.replace(BackendConfig(model=f"hf:{tiny}", device="cpu"), **{field: True})
        with pytest.raises(ConfigError, match=f"{flag} needs a CUDA"):
            build_backend(cfg)


def test_system_prompt_goes_through_the_chat_template(tiny: Path) -> None:
    from transformers import AutoTokenizer

    built = build_backend(
        BackendConfig(
            model=f"hf:{tiny}",
            device="cpu",
            dtype="float32",
            threads=1,
            system_prompt="You are terse.",
        )
    )
    try:
        tok = AutoTokenizer.from_pretrained(str(tiny))
        expected = tok.apply_chat_template(
            [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Is ice cold?"},
            ],
            add_generation_prompt=True,
            tokenize=False,
        )
        assert built.backend.render("Is ice cold?") == expected
        assert "You are terse." in expected
        assert built.backend.describe()["system_prompt"] == "You are terse."
        assert built.identity["system_prompt"] == "You are terse."
    finally:
        asyncio.run(built.backend.aclose())


def test_adapter_is_applied_and_recorded(tiny: Path, tmp_path: Path) -> None:
    pytest.importorskip("peft", reason="--adapter needs peft (the `peft` extra)")
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32)
    lora = get_peft_model(
        base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    adapter = tmp_path / "lora"
    lora.save_pretrained(str(adapter))

    built = build_backend(
        BackendConfig(
            model=f"hf:{tiny}", device="cpu", dtype="float32", threads=1, adapter=str(adapter)
        )
    )
    try:
        ids = torch.tensor([[1, 5, 9, 17, 33]])
        ref_base = AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32).eval()
        ref = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32), str(adapter)
        ).eval()
        with torch.no_grad():
            mine = built.backend.model(ids).logits
            theirs = ref(ids).logits
            plain = ref_base(ids).logits
        assert torch.allclose(mine, theirs, atol=1e-5)
        assert not torch.allclose(mine, plain, atol=1e-3)  # the adapter changes the answers
        assert built.identity["adapter"] == str(adapter)
        assert built.backend.describe()["model_args"] == {"adapter": str(adapter)}
    finally:
        asyncio.run(built.backend.aclose())


def test_adapter_folder_without_config_is_refused(tiny: Path, tmp_path: Path) -> None:
    pytest.importorskip("peft")
    with pytest.raises(ConfigError, match="no adapter_config.json"):
        build_backend(BackendConfig(model=f"hf:{tiny}", device="cpu", adapter=str(tmp_path)))
