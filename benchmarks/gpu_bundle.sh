#!/usr/bin/env bash
# Packs what `bench_e2e.py gpu` needs beyond a bare GPU machine's own PyTorch image (Python 3.12,
# torch, transformers, numpy, pyarrow, pandas, ... but no registry to install from) into one
# archive, for machines that cannot reach PyPI:
#
#   bash benchmarks/gpu_bundle.sh .gpu            # here, where pip works: writes .gpu/site.tar.xz
#   mkdir -p /tmp/site && tar -xJf .gpu/site.tar.xz -C /tmp/site   # there
#   PYTHONPATH=/tmp/site python3 benchmarks/bench_e2e.py gpu
#
# The versions are this environment's (pip resolves none: --no-deps), built for CPython 3.12 on
# x86-64. Ray's wheel (79 MB) leaves out its Java jars and the dashboard's web client, which a
# run never loads, so that the archive fits a 64 MiB transfer.
set -euo pipefail
out=${1:?usage: gpu_bundle.sh OUT_DIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
# What trinity-core and trinity-workflows need that the device image (2026-11) lacks.
missing="annotated-types antlr4-python3-runtime datasets dill fastapi httpcore2 httpx2 jiter jsonschema
  jsonschema-specifications latex2sympy2-extended math-verify multiprocess omegaconf openai opentelemetry-api
  pydantic pydantic-core ray referencing rpds-py sniffio sqlalchemy starlette truststore typing-inspection
  tzdata uvicorn"
pins=$(python - $missing <<'EOF'
import importlib.metadata, sys
print(" ".join(f"{name}=={importlib.metadata.version(name)}" for name in sys.argv[1:]))
EOF
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platforms=""
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=" --platform $tag"
done
# shellcheck disable=SC2086  # the pins and platform flags are lists
python -m pip install -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
  --target "$work/site" $pins
python -m pip wheel -q --no-deps -w "$work/wheels" "$repo/packages/trinity-core" "$repo/packages/trinity-workflows"
python -m pip install -q --no-deps --target "$work/site" "$work"/wheels/*.whl
rm -rf "$work/site/ray/jars" "$work/site/ray/dashboard/client/build" "$work/site/bin"
mkdir -p "$out"
tar -cJf "$out/site.tar.xz" -C "$work/site" .
du -h "$out/site.tar.xz"
