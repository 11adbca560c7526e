"""How to install an optional part, said for the copy that runs.

A clone has its set-up script (``scripts/setup.sh`` with a ``WITH_…=1`` flag) and its fetch
scripts; an installed copy (``pipx install .``, ``uv tool install .``, a wheel in a virtualenv)
has neither, so a hint that names them sends its user nowhere. :func:`where` looks once at the
running copy (:class:`Copy`); :func:`extra_hint` and :func:`packages_hint` are pure functions of
it, tested for every kind of copy.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DISTRIBUTION", "Copy", "extra_hint", "packages_hint", "where"]

DISTRIBUTION = "knowledge-workbench"


@dataclass(frozen=True)
class Copy:
    """The running copy: ``clone`` is its source tree when it runs from one (else None);
    ``pipx`` whether pipx manages its environment; ``python`` that environment's interpreter
    and ``has_pip`` whether it has pip (uv's tool environments have none)."""

    clone: Path | None
    pipx: bool
    python: str
    has_pip: bool


def where() -> Copy:
    """The copy this process runs (the package's folder, ``sys.prefix``)."""
    root = Path(__file__).resolve().parents[1]
    clone = root if (root / "scripts" / "setup.sh").is_file() else None
    prefix = Path(sys.prefix).as_posix()
    return Copy(
        clone=clone,
        pipx="/pipx/venvs/" in prefix + "/",
        python=sys.executable,
        has_pip=importlib.util.find_spec("pip") is not None,
    )


def _pip(copy: Copy) -> str:
    python = shlex.quote(copy.python)
    return f"{python} -m pip install" if copy.has_pip else f"uv pip install --python {python}"


def extra_hint(copy: Copy, extra: str, setup_flag: str) -> str:
    """How to add the extra ``extra`` to this copy: the clone's set-up script with
    ``setup_flag`` (e.g. ``WITH_VOICE=1``), else a reinstall naming the extra."""
    if copy.clone is not None:
        return f"`{setup_flag} {shlex.quote(str(copy.clone / 'scripts' / 'setup.sh'))}`"
    target = f"'<your clone or wheel>[{extra}]'"
    if copy.pipx:
        return f"`pipx install --force {target}`"
    return f"`{_pip(copy)} {target}`"


def packages_hint(
    copy: Copy, setup_flag: str, packages: Sequence[str], no_deps: Sequence[str] = ()
) -> str:
    """How to add ``packages`` (and ``no_deps``, installed without their dependencies) to
    this copy: the clone's set-up script with ``setup_flag``, else pipx's or pip's commands
    for the environment it runs in."""
    if copy.clone is not None:
        return f"`{setup_flag} {shlex.quote(str(copy.clone / 'scripts' / 'setup.sh'))}`"
    quoted = " ".join(shlex.quote(p) for p in packages)
    loose = " ".join(shlex.quote(p) for p in no_deps)
    if copy.pipx:
        steps = [f"pipx inject {DISTRIBUTION} {quoted}"]
        if loose:
            steps.append(f"pipx runpip {DISTRIBUTION} install --no-deps {loose}")
    else:
        steps = [f"{_pip(copy)} {quoted}"]
        if loose:
            steps.append(f"{_pip(copy)} --no-deps {loose}")
    return " then ".join(f"`{step}`" for step in steps)
