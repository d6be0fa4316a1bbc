"""A throwaway CA and serving certificate, made with the ``openssl`` command.

Made before the ``cryptography`` package came in with per-node certificates (the CSR signer,
``multusd.kubesim.csrsigner``, signs with it), and kept: every machine the project runs on has
the ``openssl`` CLI, which runs as an asyncio subprocess, so the event loop is free while keys
are generated (P-256 keys: about 10 ms each, unlike seconds for RSA). The serving context asks
clients for a certificate from this CA (``multusd.kubesim.authn``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

_DAYS = "3650"
_CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


class TLSError(RuntimeError):
    """openssl failed; the message carries its stderr."""


@dataclass(frozen=True, slots=True)
class TLSMaterial:
    ca_file: Path
    cert_file: Path
    key_file: Path
    ca_pem: bytes

    @property
    def ca_key_file(self) -> Path:
        """The CA's key, beside its certificate: what the CSR signer signs with
        (``multusd.kubesim.csrsigner``)."""
        return self.ca_file.with_name("ca.key")

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        # Ask for a client certificate, as kube-apiserver does with --client-ca-file: one from
        # our CA authenticates its CN (multusd.kubesim.authn); none is fine (tokens).
        ctx.load_verify_locations(cafile=str(self.ca_file))
        ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


async def _openssl(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "openssl",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise TLSError(
            f"openssl {args[0]} failed ({proc.returncode}): {err.decode(errors='replace')}"
        )


def _san(hosts: list[str]) -> str:
    entries = []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            entries.append(f"DNS:{host}")
        else:
            entries.append(f"IP:{host}")
    return ",".join(entries)


async def generate(directory: Path, hosts: list[str]) -> TLSMaterial:
    """Write ``ca.crt``/``ca.key`` and ``server.crt``/``server.key`` for ``hosts`` into
    ``directory`` (which the caller keeps private)."""
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "server.key", directory / "server.csr", directory / "server.crt"
    ext = directory / "server.ext"
    await _openssl(
        "req", "-x509", *_CURVE, "-keyout", str(ca_key), "-out", str(ca_crt), "-days", _DAYS,
        "-subj", "/CN=kubesim-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    await _openssl(
        "req", *_CURVE, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=kubesim",
    )  # fmt: skip
    ext_text = (
        f"subjectAltName={_san(hosts)}\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    await asyncio.to_thread(ext.write_text, ext_text, encoding="ascii")
    await _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(crt), "-days", _DAYS, "-extfile", str(ext),
    )  # fmt: skip
    ca_pem = await asyncio.to_thread(ca_crt.read_bytes)
    return TLSMaterial(ca_file=ca_crt, cert_file=crt, key_file=key, ca_pem=ca_pem)
