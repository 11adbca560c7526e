#!/usr/bin/env bash
# Set up (idempotent) and run the knowledge service on the embedded default:
# DuckDB file data/knowledge.duckdb in the clone (SVC_KNOWLEDGE_DB_PATH overrides it; the
# command itself, with nothing configured, uses the per-user data folder), the in-process
# local embedder, tools on 127.0.0.1:8000, metrics and /health/decay on 127.0.0.1:9090.
# It installs only what serving needs (WITH_DEV=0: no test, docs or notebook tools; no torch).
# Extra arguments go to `workbench serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_DEV=0 scripts/setup.sh
export SVC_KNOWLEDGE_DB_PATH="${SVC_KNOWLEDGE_DB_PATH:-$PWD/data/knowledge.duckdb}"
exec .venv/bin/workbench serve "$@"
