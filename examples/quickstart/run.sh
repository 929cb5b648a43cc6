#!/usr/bin/env bash
# The CPU quickstart: build a tiny model and data locally (no download), then train it:
# a short SFT warm-up stage, then GRPO on single-digit arithmetic.
# Honours TRINITY_CHECKPOINT_ROOT_DIR (default ./checkpoints); extra arguments are config overrides.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=examples/quickstart
[ -f "$here/model/config.json" ] || trinity tiny-model "$here/model"
[ -f "$here/data/tasks.jsonl" ] || python3 "$here/make_data.py" "$here/data"
exec trinity run --config "$here/quickstart.yaml" "$@"
