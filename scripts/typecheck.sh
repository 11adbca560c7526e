#!/usr/bin/env bash
# The strict type check: mypy as pyproject.toml's [tool.mypy] configures it (strict, over
# workbench/); exits non-zero when it reports an error.
#   scripts/typecheck.sh                  the whole core
#   scripts/typecheck.sh workbench/llm    only these modules (extra arguments go to mypy)
set -euo pipefail
cd "$(dirname "$0")/.."
MYPY=${MYPY:-.venv/bin/mypy}
# this tree's workbench/, not an installed copy of the package
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$MYPY" "$@"
