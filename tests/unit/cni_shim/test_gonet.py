"""Go's IP parsing and printing (``net.ParseIP``, ``net.ParseCIDR``, ``String()``), which decides
what every address in a result, a route plan and network-status reads like."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cni_shim import gonet


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("10.0.0.1", "10.0.0.1"),
        ("010.0.0.1", None),
        ("1.2.3", None),
        ("::ffff:1.2.3.4", "1.2.3.4"),
        ("::1.2.3.4", "::102:304"),
        ("2001:DB8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
        ("1:0:2:0:3:0:4:0", "1:0:2:0:3:0:4:0"),
        ("00000001::", "1::"),
        ("1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0"),
        ("1:2:3:4:5:6:7:8::", None),
        ("1:2:3:4:5:1.2.3.4", None),
        ("fe80::1%eth0", None),
        ("", None),
    ],
)
def test_go_ip_parsing(text: str, canonical: str | None) -> None:
    assert gonet.canonical_ip(text) == canonical


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("10.1.2.3/24", "10.1.2.3/24"),
        ("10.1.2.3/024", "10.1.2.3/24"),
        ("10.1.2.3/33", None),
        ("10.1.2.3/", None),
        ("::ffff:10.1.2.3/120", "10.1.2.3/24"),
        ("::ffff:10.1.2.3/90", "10.1.2.3/0"),
        ("FD00::1/64", "fd00::1/64"),
        ("fd00::1/129", None),
    ],
)
def test_go_cidr_parsing(text: str, canonical: str | None) -> None:
    assert gonet.canonical_cidr(text) == canonical


@given(st.binary(min_size=16, max_size=16), st.booleans())
def test_ipv6_printing_matches_rfc5952(raw: bytes, sparse: bool) -> None:
    if sparse:  # make zero runs likely
        raw = bytes(b if b % 3 == 0 else 0 for b in raw)
    address = ipaddress.IPv6Address(raw)
    expected = str(address.ipv4_mapped) if address.ipv4_mapped else address.compressed
    assert gonet.canonical_ip(address.exploded) == expected
    assert gonet.canonical_ip(address.compressed) == expected
