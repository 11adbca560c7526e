#!/usr/bin/env bash
# The strict type check: mypy as pyproject.toml's [tool.mypy] configures it (strict, over
# workbench/, service/, serving/ and voice/); exits non-zero when it reports an error.
#   scripts/typecheck.sh                  all four packages
#   scripts/typecheck.sh workbench/llm    only these modules (extra arguments go to mypy)
set -euo pipefail
cd "$(dirname "$0")/.."
MYPY=${MYPY:-.venv/bin/mypy}
# this tree's packages, not an installed copy
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$MYPY" "$@"
