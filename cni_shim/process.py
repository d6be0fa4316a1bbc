"""A plugin process's life, shared by ``multus-shim`` and ``passthru``: the environment read as
text without ``os`` (importing it costs ~2 ms of every start, cni_shim/gopath.py), the plugin
run on the real streams, and an exit that skips interpreter teardown (module and GC
finalisation: ~3 ms per pod sandbox, with nothing left to clean up) once the output is flushed.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing's: the shim never imports typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import BinaryIO, NoReturn, TextIO, TypeAlias

    Out: TypeAlias = TextIO | BinaryIO
    Plugin: TypeAlias = Callable[[Mapping[str, str], bytes | BinaryIO, Out, Out], int]
    """``(environ, stdin, stdout, stderr) -> status``: ``shim.main``, ``passthru.run``."""


def run_plugin(plugin: Plugin, raw_environ: Mapping[bytes, bytes]) -> NoReturn:
    """Run ``plugin(environ, stdin, stdout, stderr)`` and end the process with its status."""
    import posix  # the caller's ``posix.environ`` already loaded it

    encoding = sys.getfilesystemencoding()  # how os.environ decodes it
    environ = {
        k.decode(encoding, "surrogateescape"): v.decode(encoding, "surrogateescape")
        for k, v in raw_environ.items()
    }
    stdin = sys.stdin.buffer if sys.stdin is not None else b""
    code = plugin(environ, stdin, sys.stdout.buffer, sys.stderr.buffer)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    posix._exit(code)
