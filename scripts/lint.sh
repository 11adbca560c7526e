#!/usr/bin/env bash
# The lint CI runs: ruff's rules and its formatter (check only) over the whole tree, then the
# strict type check of workbench/, service/, serving/ and voice/ (scripts/typecheck.sh: mypy
# as pyproject.toml configures it).
#   scripts/lint.sh          check
#   scripts/lint.sh --fix    apply the safe fixes and the formatting
set -euo pipefail
cd "$(dirname "$0")/.."
RUFF=${RUFF:-.venv/bin/ruff}
if [ "${1:-}" = "--fix" ]; then
  "$RUFF" check --fix .
  "$RUFF" format .
else
  "$RUFF" check .
  "$RUFF" format --check .
fi
scripts/typecheck.sh
