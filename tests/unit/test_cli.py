"""The command line as a user meets it: ``python -m multusd ...`` run as a subprocess from the
worktree root, as an operator would run ``multusd``.

Every subcommand and option has a help line, in plain text; ``multusd`` with an unknown
subcommand lists the valid ones; ``install-shim --dest`` into a missing directory says so and
creates nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

from multusd.cli import SUBCOMMANDS

REPO = Path(__file__).resolve().parents[2]

MISSING_HELP_ALLOWED: dict[str, set[str]] = {}
"""Options known to have no help line (none): the test fails on any new one, and on an entry
here that has gained its help line, so the list only shrinks."""


def multusd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "multusd", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@cache
def help_text(command: str) -> str:
    """``multusd <command> --help``, which must succeed and print its own usage."""
    done = multusd(*command.split(), "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {' '.join(['multusd', *command.split()])} ")
    return done.stdout


def kubesim_subcommands() -> list[str]:
    """The emulator's subcommands, as its own help lists them (``{serve,faults,...}``)."""
    found = re.search(r"\{([a-z,-]+)\}", help_text("kubesim"))
    assert found is not None
    return found.group(1).split(",")


@cache
def commands() -> list[str]:
    """Every command line that has a ``--help``: the daemon's, each subcommand's, and each of
    the emulator's subcommands (their helps fetched side by side: ~20 interpreter starts)."""
    names = ["", *SUBCOMMANDS, *(f"kubesim {name}" for name in kubesim_subcommands())]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(help_text, names))
    return names


def without_help(text: str) -> set[str]:
    """The options and positionals of an argparse help text that have no help line.

    argparse lists each at an indent of two; its help follows on the same line after at least
    two spaces, or on the next, more indented, line. An invocation never holds two spaces."""
    missing: set[str] = set()
    lines = text.splitlines()
    in_arguments = False
    for i, line in enumerate(lines):
        if line.endswith(":") and not line.startswith(" "):
            in_arguments = line in ("options:", "positional arguments:")
            continue
        if not in_arguments or not re.match(r"  \S", line):
            continue
        invocation, _, own_help = line.strip().partition("  ")
        follows = i + 1 < len(lines) and re.match(r"   +\S", lines[i + 1]) is not None
        if not own_help.strip() and not follows:
            missing.add(invocation.split(", ")[-1].split()[0])
    return missing


def test_every_option_of_every_command_has_a_help_line() -> None:
    missing = {command: without_help(help_text(command)) for command in commands()}
    new = {c: sorted(m - MISSING_HELP_ALLOWED.get(c, set())) for c, m in missing.items()}
    assert not {c: m for c, m in new.items() if m}, "options without a help line"
    stale = {c: sorted(a - missing.get(c, set())) for c, a in MISSING_HELP_ALLOWED.items()}
    assert not {c: s for c, s in stale.items() if s}, "now documented: remove from the list"


def test_help_is_plain_text_without_rest_markup() -> None:
    markup = re.compile(r"``|:(func|class|data|mod|meth|attr):`")
    marked = [c for c in commands() if markup.search(help_text(c))]
    assert not marked


def test_multusd_help_lists_every_subcommand_with_its_help_line() -> None:
    text = help_text("")
    for name, line in SUBCOMMANDS.items():
        assert re.search(rf"^  {re.escape(name)} +{re.escape(line)}$", text, re.M), name


def test_demo_help_says_what_it_does_and_runs_nothing() -> None:
    text = help_text("demo")
    assert "multus-shim" in text and "Needs root" in text  # more than its usage line
    done = multusd("demo", "unexpected")
    assert done.returncode == 2
    assert "unrecognized arguments: unexpected" in done.stderr


@pytest.mark.parametrize("first", ["bogus", "instal-shim"])
def test_an_unknown_subcommand_lists_the_valid_ones(first: str) -> None:
    done = multusd(first)
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"multusd: error: unknown subcommand {first!r} (choose from " in done.stderr
    for name in SUBCOMMANDS:
        assert name in done.stderr


@pytest.mark.parametrize("bundle", [[], ["--bundle"]], ids=["script", "bundle"])
def test_install_shim_into_a_missing_directory_says_so_and_creates_nothing(
    tmp_path: Path, bundle: list[str]
) -> None:
    dest = tmp_path / "host" / "opt" / "cni" / "bin"
    done = multusd("install-shim", *bundle, "--dest", str(dest))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == f"multusd install-shim: destination directory {dest} does not exist\n"
    assert list(tmp_path.iterdir()) == []


def test_install_shim_onto_a_file_says_it_is_not_a_directory(tmp_path: Path) -> None:
    dest = tmp_path / "bin"
    dest.write_text("")
    done = multusd("install-shim", "--dest", str(dest))
    assert done.returncode == 1
    assert done.stderr.endswith(f"destination directory {dest} is not a directory\n")


def test_install_shim_into_an_existing_directory_writes_the_shim(tmp_path: Path) -> None:
    done = multusd("install-shim", "--dest", str(tmp_path), "--name", "shim")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path / 'shim'}\n"
    assert (tmp_path / "shim").stat().st_mode & 0o777 == 0o755
