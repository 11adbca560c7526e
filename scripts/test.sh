#!/usr/bin/env bash
# Set up (idempotent, including the torch extra the embedder tests compare against, the
# multilingual embedder, the voice engine and its model, and the small local LLM server) and
# run every test:
# unit and integration tests, the notebooks under nbval, and the docs build.
# Extra arguments go to pytest (e.g. scripts/test.sh -x -k search).
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_TORCH=${WITH_TORCH:-1} WITH_MULTILINGUAL=${WITH_MULTILINGUAL:-1} WITH_VOICE=${WITH_VOICE:-1} WITH_LOCAL_LLM=${WITH_LOCAL_LLM:-1} \
  scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE
set +e
.venv/bin/python -m pytest --nbval-lax -p no:cacheprovider tests notebooks "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$code"
