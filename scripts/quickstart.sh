#!/usr/bin/env bash
# The main job on embedded defaults: SmolLM2-135M (built in, offline), rule coach, local sandbox, synthetic
# problems; a coached arm beside a control arm (configs/quickstart.yaml, mappa_train/experiments/quickstart.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
exec .venv/bin/mappa quickstart "$@"
