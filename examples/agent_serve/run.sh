#!/usr/bin/env bash
# Serve mode end to end on a CPU: the proxy, a trainer beside it, and agent.py feeding both.
# Uses the quickstart's tiny model and tasks (built locally when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=examples/agent_serve
[ -f examples/quickstart/model/config.json ] || trinity tiny-model examples/quickstart/model
[ -f examples/quickstart/data/tasks.jsonl ] || python3 examples/quickstart/make_data.py examples/quickstart/data
port=${AGENT_PROXY_PORT:-8010}
export AGENT_PROXY_PORT=$port
trinity run --config "$here/serve.yaml" "$@" &
serve=$!
trap 'kill $serve 2>/dev/null || true' EXIT
healthy() { python3 -c "import httpx, sys; httpx.get(sys.argv[1], timeout=2).raise_for_status()" "$1" 2>/dev/null; }
until healthy "http://127.0.0.1:$port/health"; do
  kill -0 $serve 2>/dev/null || { echo "the proxy exited" >&2; exit 1; }
  sleep 1
done
trinity run --config "$here/serve.yaml" mode=train "$@" &
trainer=$!
python3 "$here/agent.py" "http://127.0.0.1:$port" examples/quickstart/data/tasks.jsonl --steps 5
wait $trainer
python3 -c "import httpx, sys; print(httpx.get(sys.argv[1]).json())" "http://127.0.0.1:$port/metrics"
