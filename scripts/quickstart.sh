#!/usr/bin/env bash
# The main job on embedded defaults: tiny offline model, rule coach, local sandbox, synthetic problems.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
exec .venv/bin/mappa quickstart "$@"
