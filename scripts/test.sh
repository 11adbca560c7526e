#!/usr/bin/env bash
# Set up (idempotent) and run the tests. Two modes:
#
#   scripts/test.sh           the full run (what CI runs, .ci/run): set-up with the torch extra
#       (the embedder tests compare against it), the multilingual embedder, the voice engine and
#       its model, PostgreSQL's client and the small local LLM server (llama-cpp-python, built
#       from source in a fresh clone: about 5.5 min on 2 cores); then every test, the notebooks
#       under nbval and the docs build; then the tests again with their stores on PostgreSQL.
#       About 45 min on 2 cores.
#   scripts/test.sh --quick   a first run (also QUICK=1): no torch, no voice engine, no local-LLM
#       build and no PostgreSQL pass; the tests that need one of them are skipped, saying so
#       (WORKBENCH_TEST_QUICK=1, tests/conftest.py). The same tests and notebooks otherwise.
#
# Extra arguments go to pytest (e.g. scripts/test.sh -x -k search, scripts/test.sh --quick -x).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=${QUICK:-0}
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
if [ "$quick" = 1 ]; then
  echo "== quick run: no torch, voice engine, local LLM or PostgreSQL pass (the full run: scripts/test.sh)"
  WITH_TORCH=0 WITH_MULTILINGUAL=0 WITH_POSTGRES=1 WITH_VOICE=0 WITH_LOCAL_LLM=0 scripts/setup.sh
  export WORKBENCH_TEST_QUICK=1
else
  WITH_TORCH=${WITH_TORCH:-1} WITH_MULTILINGUAL=${WITH_MULTILINGUAL:-1} WITH_POSTGRES=${WITH_POSTGRES:-1} \
    WITH_VOICE=${WITH_VOICE:-1} WITH_LOCAL_LLM=${WITH_LOCAL_LLM:-1} scripts/setup.sh
fi
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
if [ "$quick" = 1 ]; then
  echo "== quick run done (no PostgreSQL pass; the full run: scripts/test.sh)"
  exit "$status"
fi
echo "== the suite again on PostgreSQL (WORKBENCH_TEST_BACKEND=postgres)"
run env WORKBENCH_TEST_BACKEND=postgres .venv/bin/python -m pytest -p no:cacheprovider tests "$@" ||
  status=$?
exit "$status"
