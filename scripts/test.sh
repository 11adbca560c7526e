#!/usr/bin/env bash
# Set up (idempotent, including the torch extra the embedder tests compare against, the
# multilingual embedder, the voice engine and its model, and the small local LLM server) and
# run every test:
# unit and integration tests, the notebooks under nbval, and the docs build; then the tests
# again with their stores on PostgreSQL.
# Extra arguments go to pytest (e.g. scripts/test.sh -x -k search).
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_TORCH=${WITH_TORCH:-1} WITH_MULTILINGUAL=${WITH_MULTILINGUAL:-1} WITH_POSTGRES=${WITH_POSTGRES:-1} \
  WITH_VOICE=${WITH_VOICE:-1} WITH_LOCAL_LLM=${WITH_LOCAL_LLM:-1} scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE
run() {
  set +e
  "$@"
  local code=$?
  set -e
  if [ "$code" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure" >&2
    return 1
  fi
  return "$code"
}
# every test on the embedded default (DuckDB), then again with every store of the tests on a
# throw-away PostgreSQL (tests/pg.py; needs Debian's postgresql package, which .ci/run installs)
status=0
run .venv/bin/python -m pytest --nbval-lax -p no:cacheprovider tests notebooks "$@" || status=$?
echo "== the suite again on PostgreSQL (WORKBENCH_TEST_BACKEND=postgres)"
run env WORKBENCH_TEST_BACKEND=postgres .venv/bin/python -m pytest -p no:cacheprovider tests "$@" ||
  status=$?
exit "$status"
