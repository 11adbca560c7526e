#!/usr/bin/env bash
# Build the wheel (`python -m build`) and check that it installs into a fresh virtualenv and
# starts: both console scripts answer --version, and `workbench status` opens a database in the
# per-user folder of a temporary home. Dependencies come from uv's cache (what setup.sh
# installed) when they are all there, else from the package index.
# Usage: scripts/check_wheel.sh [PYTHON]   (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$(date +%s)
# --no-isolation: the build backend (setuptools) of the running environment, no download
"$PY" -m build --wheel --no-isolation --outdir "$work/dist" . >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; exit 1; }
wheel=$(ls "$work"/dist/knowledge_workbench-*.whl)
"$PY" -m uv venv --quiet --python "$PY" "$work/venv"
install() { "$PY" -m uv pip install --quiet --python "$work/venv/bin/python" "$@" "$wheel"; }
install --offline 2>/dev/null || install
cd "$work"  # away from the clone: the installed package, not the source tree, is imported
for prog in workbench knowledge-workbench; do
  "$work/venv/bin/$prog" --version
done
XDG_DATA_HOME="$work/data" "$work/venv/bin/workbench" status >/dev/null
# the memory browser's static files ship in the wheel (served at /ui)
"$work/venv/bin/python" -c "from service.ui.routes import static_files as f; import sys; \
n = set(f()); sys.exit(0 if {'index.html', 'app.js', 'views/group.js'} <= n else f'/ui: {n}')"
test -f "$work/data/knowledge-workbench/knowledge.duckdb"
echo "wheel $(basename "$wheel") installs and starts ($(( $(date +%s) - started )) s)"
