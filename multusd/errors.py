"""The daemon's error tree.

Two families, deliberately separate:

* ``CNIError`` (shared with the shim; imported from ``cni_shim.errors`` only, the one path to
  it and to the spec codes) is what a CNI request fails with. It is a value with a spec code
  that travels to the runtime unchanged.
* ``StartupError`` and its subclasses end the daemon process; each carries the exit code that
  upstream's ``multus-daemon`` uses for the same failure, so supervisors and operators see the
  same numbers.
"""

from __future__ import annotations

from cni_shim.errors import INTERNAL, CNIError

__all__ = [
    "EXIT_CONFIG",
    "EXIT_READINESS_LOST",
    "EXIT_SERVER",
    "ConfigError",
    "StartupError",
    "internal",
]

# Exit codes, as upstream multus-daemon (docs/upstream.md, "Exit codes").
EXIT_CONFIG = 1  # unreadable/invalid daemon config, readiness wait timed out
EXIT_READINESS_LOST = 2  # config generation failed, or the readiness file was removed
EXIT_SERVER = 3  # the server could not start (socket, root check, connection limit, ...)


class StartupError(Exception):
    """The daemon cannot start; ``exit_code`` is what the process exits with."""

    def __init__(self, message: str, exit_code: int = EXIT_SERVER) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ConfigError(StartupError):
    """The daemon config file is unreadable or invalid (one line naming the key)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_CONFIG)


def internal(msg: str, details: str = "") -> CNIError:
    """A generic CNI error (code 999) for failures that have no more specific spec code."""
    return CNIError(INTERNAL, msg, details)
