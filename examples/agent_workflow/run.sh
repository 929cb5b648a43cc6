#!/usr/bin/env bash
# The plain-openai agent trained as a workflow plugin on a CPU (see docs/agents.md). Uses the
# quickstart's tiny model and tasks, built locally when missing; extra arguments are overrides.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f examples/quickstart/model/config.json ] || trinity tiny-model examples/quickstart/model
[ -f examples/quickstart/data/tasks.jsonl ] || python3 examples/quickstart/make_data.py examples/quickstart/data
exec trinity --plugin-dir examples/agent_workflow run --config examples/agent_workflow/agent.yaml "$@"
