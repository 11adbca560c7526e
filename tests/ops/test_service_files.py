"""The files that run the servers as services: systemd units (checked by ``systemd-analyze
verify`` where it exists), the macOS launch agent, the Dockerfile and compose file (no container
engine runs on the CI machines, so the image's command, settings and health check are run
here as the image would run them)."""

from __future__ import annotations

import os
import plistlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from configparser import ConfigParser
from pathlib import Path

import pytest
import yaml

from service.control.runner import GRACEFUL_SECONDS, QUEUE_STOP_SECONDS
from tests.service.svc_helpers import free_port
from voice.settings import ENVIRONMENT as VOICE_ENVIRONMENT
from voice.settings import Settings as VoiceSettings
from workbench.config import unknown_settings

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "ops" / "systemd"
BIN = Path(sys.executable).parent
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def unit(path: Path) -> ConfigParser:
    parser = ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # keys are case-sensitive
    parser.read(path)
    return parser


def environment(path: Path) -> dict[str, str]:
    """The unit's ``Environment=NAME=value`` lines."""
    pairs = [line.split("=", 1)[1] for line in path.read_text().splitlines()
             if line.startswith("Environment=")]  # fmt: skip
    return dict(pair.split("=", 1) for pair in pairs)


def seconds(value: str) -> float:
    return float(value.removesuffix("s"))


# -- systemd ---------------------------------------------------------------------------------


def test_the_service_unit_runs_workbench_serve_and_waits_for_the_queue():
    service = unit(SYSTEMD / "knowledge-workbench.service")["Service"]
    assert service["ExecStart"].split()[1:] == ["serve"]
    assert service["ExecStart"].split()[0].endswith("/bin/workbench")
    assert seconds(service["TimeoutStopSec"]) >= GRACEFUL_SECONDS + QUEUE_STOP_SECONDS
    assert service["DynamicUser"] == "yes" and service["StateDirectory"] == "knowledge-workbench"
    # the database lives in the state directory; every variable it sets is a real setting
    env = environment(SYSTEMD / "knowledge-workbench.service")
    assert unknown_settings(env) == []
    assert env["SVC_KNOWLEDGE_DB_PATH"].startswith("/var/lib/knowledge-workbench/")


def test_the_voice_unit_is_a_user_unit_that_speaks_what_it_accepted_before_stopping():
    parsed = unit(SYSTEMD / "voice-server.service")
    assert parsed["Install"]["WantedBy"] == "default.target"  # the user's session, not boot
    service = parsed["Service"]
    assert service["ExecStart"] == "%h/.local/bin/voice-server"
    assert "User" not in service and "DynamicUser" not in service
    assert seconds(service["TimeoutStopSec"]) > VoiceSettings.model_validate({}).stop_seconds
    assert service["EnvironmentFile"].startswith("-%h/")


def verify(path: Path, real_exec: Path, tmp_path: Path, *, user: bool) -> str:
    """``systemd-analyze verify`` of a copy whose ExecStart names an installed executable (it
    checks that the program exists); its complaints, empty when the unit is clean."""
    text = re.sub(r"^ExecStart=\S+", f"ExecStart={real_exec}", path.read_text(), flags=re.M)
    copy = tmp_path / path.name
    copy.write_text(text)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    command = [SYSTEMD_ANALYZE, *(["--user"] if user else []), "verify", str(copy)]
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SYSTEMD_LOG_COLOR": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    out = (done.stdout + done.stderr).strip()
    return out if done.returncode or out else ""


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_finds_nothing_wrong_in_either_unit(tmp_path):
    assert verify(SYSTEMD / "knowledge-workbench.service", BIN / "workbench", tmp_path,
                  user=False) == ""  # fmt: skip
    assert verify(SYSTEMD / "voice-server.service", BIN / "voice-server", tmp_path,
                  user=True) == ""  # fmt: skip
    # the check itself can fail: a misspelled key is reported
    broken = tmp_path / "broken" / "knowledge-workbench.service"
    broken.parent.mkdir()
    text = (SYSTEMD / "knowledge-workbench.service").read_text()
    broken.write_text(text.replace("TimeoutStopSec=", "TimeoutStopSecs="))
    assert "Unknown key" in verify(broken, BIN / "workbench", tmp_path, user=False)


# -- launchd ---------------------------------------------------------------------------------

PLIST = ROOT / "ops" / "launchd" / "org.knowledge-workbench.voice-server.plist"


def test_the_launch_agent_starts_voice_server_with_the_users_settings(tmp_path):
    agent = plistlib.loads(PLIST.read_bytes())
    assert agent["Label"] == PLIST.stem and agent["RunAtLoad"] is True
    assert agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["ExitTimeOut"] > VoiceSettings.model_validate({}).stop_seconds
    shell, flag, line = agent["ProgramArguments"]
    assert (shell, flag) == ("/bin/sh", "-c")
    # run the agent's line with a stand-in voice-server that records what it was given
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".config" / "voice-server").mkdir(parents=True)
    (home / ".config" / "voice-server" / "env").write_text("VOICE_PORT=8899\n")
    fake = home / ".local" / "bin" / "voice-server"
    fake.write_text('#!/bin/sh\necho "started with VOICE_PORT=$VOICE_PORT"\n')
    fake.chmod(0o755)
    done = subprocess.run([shell, flag, line], env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                          timeout=30)  # fmt: skip
    assert done.returncode == 0
    log = home / "Library" / "Logs" / "voice-server.log"
    assert log.read_text() == "started with VOICE_PORT=8899\n"
    assert "VOICE_PORT" in VOICE_ENVIRONMENT


# -- container -------------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    rows = [line.strip() for line in text.splitlines()]
    return [(r.split(None, 1)[0].upper(), r.split(None, 1)[1]) for r in rows
            if r and not r.startswith("#")]  # fmt: skip


def final_stage() -> list[tuple[str, str]]:
    rows = dockerfile()
    last = max(i for i, (op, _) in enumerate(rows) if op == "FROM")
    return rows[last:]


def image_env() -> dict[str, str]:
    env = {}
    for op, args in final_stage():
        if op == "ENV":
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def test_the_image_installs_the_base_package_and_runs_as_a_user():
    rows = dockerfile()
    bases = [args.split()[0] for op, args in rows if op == "FROM"]
    assert all(re.fullmatch(r"python:3\.11-slim-\w+", base) for base in bases), bases
    installs = [args for op, args in rows if op == "RUN" and "pip install" in args]
    assert len(installs) == 1 and re.search(r"pip install \.(\s|$)", installs[0])  # no extras
    final = dict(final_stage())
    assert final["USER"] not in ("root", "0")
    assert final["ENTRYPOINT"] == '["workbench"]' and final["CMD"] == '["serve"]'
    assert {"8000", "9090"} <= set(final["EXPOSE"].split())
    env = image_env()
    assert unknown_settings(env) == []
    assert env["SVC_KNOWLEDGE_DB_PATH"].startswith("/data/") and "/data" in final["VOLUME"]


def test_every_file_the_image_copies_exists_and_passes_the_dockerignore():
    ignore = (ROOT / ".dockerignore").read_text().split()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = []
    for op, args in dockerfile():
        if op == "COPY" and not args.startswith("--from"):
            copied += args.split()[:-1]
    assert copied and set(copied) <= allowed
    assert all((ROOT / name).exists() for name in copied)
    # every package the project ships (pyproject's packages.find) is in the image
    pyproject = (ROOT / "pyproject.toml").read_text()
    include = re.search(r"include = \[(.*?)\]", pyproject).group(1)
    packages = {name.strip(' "*') for name in include.split(",")}
    assert packages <= set(copied)


def test_compose_runs_the_image_with_a_token_and_a_volume():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    service = compose["services"]["knowledge-workbench"]
    assert service["build"] == "."
    assert ":?" in service["environment"]["SVC_KNOWLEDGE_API_TOKEN"]  # required
    assert unknown_settings(service["environment"]) == []
    assert any(v.endswith(":/data") for v in service["volumes"])
    volume = next(v for v in service["volumes"] if v.endswith(":/data")).split(":")[0]
    assert volume in compose["volumes"]
    assert all(port.startswith("127.0.0.1:") for port in service["ports"])
    grace = service["stop_grace_period"]
    assert seconds(grace) >= GRACEFUL_SECONDS + QUEUE_STOP_SECONDS


def health_check() -> list[str]:
    args = dict(final_stage())["HEALTHCHECK"]
    return __import__("json").loads(args.split("CMD", 1)[1].strip())


@pytest.mark.slow
def test_the_image_command_starts_with_its_settings_and_passes_its_health_check(tmp_path):
    """What the container runs, run here: ``workbench serve`` with the image's environment
    (its /data replaced by a temporary folder, its ports by free ones), then the image's own
    HEALTHCHECK command; without a token it refuses to start, as the image relies on."""
    port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    env.update({k: v.replace("/data", str(tmp_path)) for k, v in image_env().items()})
    env["PATH"] = f"{BIN}:{env['PATH']}"
    env.update(SVC_KNOWLEDGE_PORT=str(port), SVC_KNOWLEDGE_METRICS_PORT=str(metrics_port))
    entry = ["workbench", "serve"]

    refused = subprocess.run(entry, env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    assert refused.returncode != 0 and "SVC_KNOWLEDGE_API_TOKEN" in refused.stderr
    assert "Traceback" not in refused.stderr

    env["SVC_KNOWLEDGE_API_TOKEN"] = "container-token-0123456789"
    check = [c.replace(":8000/", f":{port}/") for c in health_check()]
    check[0] = sys.executable if check[0] == "python" else check[0]
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(entry, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
            if subprocess.run(check, capture_output=True, timeout=30).returncode == 0:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the health check never passed")
        assert (tmp_path / "knowledge.duckdb").exists()  # the database went to /data
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0
        log.close()
    # and the check fails once the service is gone
    assert subprocess.run(check, capture_output=True, timeout=30).returncode != 0
