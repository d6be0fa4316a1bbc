"""Non-auto mode (``multusConfigFile`` is a path): the user's ready-made config, installed as is.

Nothing is generated or watched: the file is copied once, at start-up, into ``cniConfigDir``
under its own name, where the runtime (and our shim) read it. Upstream's copy is neither
atomic nor reported; ours is atomic, and a failure is logged, not fatal, as there.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from multusd.config.daemon import DaemonConfig
from multusd.fsutil import atomic_write

log = logging.getLogger(__name__)


async def install_static_config(config: DaemonConfig) -> None:
    """Non-auto mode: copy ``multusConfigFile`` to ``<cniConfigDir>/<basename>`` atomically.

    Failures are logged, not fatal, as upstream (whose copy is not atomic and silent).
    """
    source = config.multus_config_file
    try:
        target = await asyncio.to_thread(_copy_atomically, source, config.cni_config_dir)
    except OSError as exc:
        log.error("failed to copy the user provided configuration %s: %s", source, exc)
        return
    log.info("installed %s as %s", source, target)


def _copy_atomically(source: str, target_dir: str) -> str:
    target = f"{target_dir}/{os.path.basename(source.rstrip('/'))}"
    data = Path(os.path.abspath(source)).read_bytes()
    atomic_write(target, data, mode=0o644, dir_mode=0o755)
    return target
