"""The per-node certificate on disk, laid out as client-go's certificate file store lays it out.

Upstream keeps the pair with ``certificate.NewFileStore("multus-client", certDir, certDir, "",
"")``: every issued pair is a file of its own, ``multus-client-<YYYY-MM-DD-HH-MM-SS>.pem``
(certificates, then the key; mode 0600), and ``multus-client-current.pem`` is a symbolic link to
the one in use. We keep the same names, so a node can go from upstream's daemon to ours and back
with the certificate it has: upstream refuses to rotate when ``-current.pem`` is a plain file.

What we do differently, and why:

* the dated file is written to a temporary name, fsynced and renamed (``multusd.fsutil``), where
  client-go truncates and writes it in place, so a crash never leaves half a key behind;
* the link is replaced by one ``rename`` of a new link (``-updated.pem``) over the old one, where
  client-go removes ``-current.pem`` first: its readers must then retry "no such file" errors
  (``isTransientCertError`` upstream), ours never see the name missing. A crash between the two
  steps leaves ``-updated.pem``, which :meth:`CertificateStore.recover` renames into place, as
  client-go's ``recover`` does;
* dated files older than the previous one are removed: client-go keeps every one (a 10-minute
  certificate leaves some 200 files a day behind).

A current pair is looked for where client-go looks: ``-current.pem``, then (with no cert/key file
configured, as upstream configures it) ``multus-client.crt`` with ``multus-client.key``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import stat
import time
from pathlib import Path

from cni_shim.goquote import go_quote
from multusd.fileread import read_bytes_if_exists
from multusd.fsutil import atomic_write
from multusd.k8s.certs.keys import CertificateError, IssuedPair, join_pair, parse_pair

__all__ = ["PAIR_PREFIX", "CertificateStore", "NoCertificateError"]

log = logging.getLogger(__name__)

PAIR_PREFIX = "multus-client"
"""Upstream's ``certNamePrefix``."""
_DATED = re.compile(rf"^{PAIR_PREFIX}-\d{{4}}(-\d{{2}}){{5}}\.pem$")
_KEEP_DATED = 2
"""Dated files kept: the current pair's and the one before (still named by a retired client
while its connections drain)."""


class NoCertificateError(Exception):
    """No pair on disk yet (client-go's ``NoCertKeyError``, with its text)."""


class CertificateStore:
    """``<cert_dir>/multus-client-*.pem``: the current pair, and writing a new one."""

    def __init__(self, cert_dir: str) -> None:
        self.cert_dir = Path(cert_dir)
        self.current_path = self.cert_dir / f"{PAIR_PREFIX}-current.pem"
        self.updated_path = self.cert_dir / f"{PAIR_PREFIX}-updated.pem"

    async def recover(self) -> None:
        """Finish a rotation that a crash interrupted: ``-updated.pem`` renamed over a missing
        ``-current.pem`` (client-go's ``fileStore.recover``, at start)."""
        await asyncio.to_thread(self._recover)

    def _recover(self) -> None:
        if self.current_path.exists():
            return
        try:
            updated = self.updated_path.lstat()
        except FileNotFoundError:
            return
        if not stat.S_ISLNK(updated.st_mode):
            raise CertificateError(f"expected {go_quote(str(self.updated_path))} to be a symlink "
                                   "but it is a file")  # fmt: skip
        os.replace(self.updated_path, self.current_path)

    async def current(self) -> IssuedPair:
        """The pair in use; :class:`NoCertificateError` when there is none yet, and
        :class:`~multusd.k8s.certs.keys.CertificateError` when the file is not a pair."""
        data = await read_bytes_if_exists(self.current_path)
        source = str(self.current_path)
        if data is None:
            crt = await read_bytes_if_exists(self.cert_dir / f"{PAIR_PREFIX}.crt")
            key = await read_bytes_if_exists(self.cert_dir / f"{PAIR_PREFIX}.key")
            if crt is None or key is None:
                raise NoCertificateError(
                    f"no cert/key files read at {go_quote(source)}, "
                    f'("", "") or ({go_quote(str(self.cert_dir))}, {go_quote(str(self.cert_dir))})'
                )
            data, source = crt + b"\n" + key, f"{self.cert_dir}/{PAIR_PREFIX}.crt"
        try:
            return await asyncio.to_thread(parse_pair, data)
        except CertificateError as exc:
            raise CertificateError(
                f"could not convert data from {go_quote(source)} into cert/key pair: {exc}"
            ) from exc

    async def update(self, certificate_pem: bytes, key_pem: bytes) -> IssuedPair:
        """Write a newly issued pair and make it the current one (in one worker-thread hop:
        the file, the link, the pruning)."""
        return await asyncio.to_thread(self._update, certificate_pem, key_pem)

    def _update(self, certificate_pem: bytes, key_pem: bytes) -> IssuedPair:
        data = join_pair(certificate_pem, key_pem)
        pair = parse_pair(data)  # refuse a pair that would not load before it is current
        stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.localtime())  # Go: time.Now(), local
        dated = self.cert_dir / f"{PAIR_PREFIX}-{stamp}.pem"
        self.cert_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        try:
            current = self.current_path.lstat()
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISLNK(current.st_mode):
                raise CertificateError(f"expected {go_quote(str(self.current_path))} to be a "
                                       "symlink but it is a file")  # fmt: skip
        atomic_write(dated, data, mode=0o600, dir_mode=0o755)
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISLNK(self.updated_path.lstat().st_mode):
                raise CertificateError(f"expected {go_quote(str(self.updated_path))} to be a "
                                       "symlink but it is a file")  # fmt: skip
            self.updated_path.unlink()
        os.symlink(dated.absolute(), self.updated_path)
        os.replace(self.updated_path, self.current_path)
        _fsync_dir(self.cert_dir)
        self._prune(dated.name)
        return pair

    def _prune(self, keep: str) -> None:
        """Remove the dated pairs older than the last :data:`_KEEP_DATED` (names sort by time)."""
        names = sorted(n for n in os.listdir(self.cert_dir) if _DATED.match(n))
        for name in names[:-_KEEP_DATED]:
            if name == keep:
                continue
            try:
                (self.cert_dir / name).unlink()
            except OSError as exc:
                log.warning("cannot remove the old certificate %s: %s", self.cert_dir / name, exc)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
