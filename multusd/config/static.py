"""Non-auto mode (``multusConfigFile`` is a path): the user's ready-made config, installed as is.

Nothing is generated or watched: the file is copied once, at start-up, into ``cniConfigDir``
under its own name, where the runtime (and our shim) read it. Upstream's copy is neither
atomic nor reported; ours is atomic, and a failure is logged, not fatal, as there.
"""

from __future__ import annotations

import asyncio
import logging
import os

from multusd.config.daemon import DaemonConfig
from multusd.fileread import read_bytes
from multusd.fsutil import atomic_write

log = logging.getLogger(__name__)


async def install_static_config(config: DaemonConfig) -> None:
    """Non-auto mode: copy ``multusConfigFile`` to ``<cniConfigDir>/<basename>`` atomically.

    Failures are logged, not fatal, as upstream (whose copy is not atomic and silent).
    """
    source = config.multus_config_file
    target = f"{config.cni_config_dir}/{os.path.basename(source.rstrip('/'))}"
    try:
        data = await read_bytes(os.path.abspath(source))  # noqa: ASYNC240 (getcwd, no disk I/O)
        await asyncio.to_thread(atomic_write, target, data, mode=0o644, dir_mode=0o755)
    except OSError as exc:
        log.error("failed to copy the user provided configuration %s: %s", source, exc)
        return
    log.info("installed %s as %s", source, target)
