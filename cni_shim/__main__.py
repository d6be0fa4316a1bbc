"""``multus-shim`` entry point: flags, the VERSION fast path, then :func:`cni_shim.shim.main`.

The runtime calls VERSION often and it must cost no more than the interpreter's own start, so
it is answered from a constant before anything else is imported (a test keeps the constant
equal to :func:`cni_shim.skel.version_output`).
"""

from __future__ import annotations

import sys

# Upstream's defaults when the build does not stamp them (``multus.PrintVersionString``).
VERSION = "master@git"
GIT_TREE_STATE = ""
RELEASE_STATUS = ""
COMMIT = "unknown commit"
DATE = "unknown date"

VERSION_OUTPUT = (
    '{"cniVersion":"1.1.0","supportedVersions":'
    '["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}\n'
)
_FLAG_USAGE = "Show application version"
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def version_string() -> str:
    """What ``-version`` / ``-v`` print (without the trailing newline)."""
    return (
        f"multus-shim: version:{VERSION}({GIT_TREE_STATE}{RELEASE_STATUS}), "
        f"commit:{COMMIT}, date:{DATE}"
    )


def usage(prog: str) -> str:
    """Go ``flag.PrintDefaults`` for the shim's two flags."""
    return f"Usage of {prog}:\n  -v\t{_FLAG_USAGE}\n  -version\n    \t{_FLAG_USAGE}\n"


def parse_flags(argv: list[str]) -> tuple[int | None, str, str]:
    """Go ``flag.Parse`` for ``-v``/``-version``: returns (exit code or None, stdout, stderr).

    ``None`` means "no flag asked to exit: run the CNI plugin". Parsing stops at the first
    non-flag argument or ``--``, as Go's does.
    """
    prog = argv[0] if argv else "multus-shim"
    show = False
    for arg in argv[1:]:
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        name, sep, value = arg.lstrip("-").partition("=")
        if arg.startswith("---") or not name:
            return 2, "", f"bad flag syntax: {arg}\n{usage(prog)}"
        if name in ("h", "help"):
            return 0, "", usage(prog)
        if name not in ("v", "version"):
            return 2, "", f"flag provided but not defined: -{name}\n{usage(prog)}"
        if not sep or value in _TRUE:
            show = True
        elif value in _FALSE:
            show = False
        else:
            return 2, "", f'invalid boolean value "{value}" for -{name}: parse error\n{usage(prog)}'
    if show:
        return 0, version_string() + "\n", ""
    return None, "", ""


def main() -> None:
    """Console entry: exits the process with the plugin's status."""
    if len(sys.argv) > 1:
        code, out, err = parse_flags(sys.argv)
        if code is not None:
            sys.stdout.write(out)
            sys.stderr.write(err)
            sys.exit(code)
    import posix  # not os: ~2 ms of every start (cni_shim/gopath.py)

    if posix.environ.get(b"CNI_COMMAND") == b"VERSION":
        sys.stdout.write(VERSION_OUTPUT)
        sys.exit(0)

    from cni_shim import shim
    from cni_shim.process import run_plugin

    run_plugin(shim.main, posix.environ)


if __name__ == "__main__":
    main()
