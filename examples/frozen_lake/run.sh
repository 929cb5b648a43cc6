#!/usr/bin/env bash
# FrozenLake on a CPU: build the tiny model and the tasks locally (no download), then train.
# Honours TRINITY_CHECKPOINT_ROOT_DIR (default ./checkpoints); extra arguments are config overrides.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=examples/frozen_lake
[ -f examples/quickstart/model/config.json ] || trinity tiny-model examples/quickstart/model
[ -f "$here/data/tasks.jsonl" ] || python3 "$here/make_data.py" "$here/data"
exec trinity run --config "$here/frozen_lake.yaml" "$@"
