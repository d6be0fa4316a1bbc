"""The project's ``Containerfile``, read as instructions: one parser for every test that holds
something to it (the manifests' entrypoint, the packages it installs, the image it builds)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"

Instruction = tuple[str, str]


def instructions(path: Path = CONTAINERFILE) -> list[Instruction]:
    """``[(INSTRUCTION, arguments)]`` with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert pending == "", f"{path} ends inside a continued line"
    return [(op.upper(), args) for op, args in (line.split(None, 1) for line in logical)]


def stages(path: Path = CONTAINERFILE) -> list[list[Instruction]]:
    """The instructions of each ``FROM`` stage (the global ``ARG``s before the first dropped)."""
    out: list[list[Instruction]] = []
    for op, args in instructions(path):
        if op == "FROM":
            out.append([])
        if out:
            out[-1].append((op, args))
    return out


def global_args(path: Path = CONTAINERFILE) -> dict[str, str]:
    """``{name: default}`` of the ``ARG``s before the first ``FROM`` (usable in ``FROM``)."""
    found: dict[str, str] = {}
    for op, args in instructions(path):
        if op == "FROM":
            break
        if op == "ARG":
            name, _, default = args.partition("=")
            found[name] = default
    return found


def builder_sources(path: Path = CONTAINERFILE) -> list[str]:
    """What the builder stage COPYs from the context: all a wheel of the project needs."""
    sources: list[str] = []
    for op, args in stages(path)[0]:
        if op == "COPY" and not args.startswith("--from"):
            *copied, _dest = shlex.split(args)
            sources += [name.rstrip("/") for name in copied]
    return sources


def copy_sources(dest: Path) -> Path:
    """Copy :func:`builder_sources` of the checkout into ``dest`` (no ``__pycache__``), so a
    wheel is built there: a build writes ``build/`` and ``*.egg-info`` beside the sources, and
    never into the checkout."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in builder_sources():
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def entrypoint(path: Path = CONTAINERFILE) -> list[str]:
    """The final stage's ``ENTRYPOINT`` (exec form): what the manifests' commands must name."""
    (value,) = [args for op, args in stages(path)[-1] if op == "ENTRYPOINT"]
    parsed = json.loads(value)
    assert isinstance(parsed, list) and all(isinstance(word, str) for word in parsed), value
    return parsed
