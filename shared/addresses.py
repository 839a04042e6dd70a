"""Which addresses the farm may connect to on a tenant's behalf (webhooks): :func:`forbidden_reason`, the one
judgement of an address, for a literal in a URL and for every DNS answer alike.

An IPv6 address that carries an IPv4 one (IPv4-compatible and -mapped, SIIT, NAT64, 6to4, Teredo) is judged by
the IPv4 address it carries: where the network translates it, that is where a connection goes. Python's
``ipaddress`` calls most of these ranges global, which is why the check takes the IPv4 address out first.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# IPv6 ranges that carry an IPv4 address. Where a network translates them (NAT64/DNS64, SIIT, 6to4 relays, Teredo)
# a connection to the IPv6 address reaches the IPv4 one, so the IPv4 one is what is judged.
_LOW_32_PREFIXES = tuple(
    ipaddress.IPv6Network(prefix)
    for prefix in (
        "::/96",  # IPv4-compatible (deprecated; ``::`` and ``::1`` aside)
        "::ffff:0:0/96",  # IPv4-mapped
        "::ffff:0:0:0/96",  # SIIT's IPv4-translated (RFC 2765)
        "64:ff9b::/96",  # NAT64's well-known prefix (RFC 6052)
    )
)
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")  # the IPv4 address in bits 16-47
_TEREDO = ipaddress.IPv6Network("2001::/32")  # the server's IPv4 in bits 32-63, the client's inverted in the last 32
# NAT64 local-use (RFC 8215): the prefix length, and so where the IPv4 address sits, only the network's operator knows.
_UNJUDGEABLE = (ipaddress.IPv6Network("64:ff9b:1::/48"),)
_32_BITS = 0xFFFFFFFF


def embedded_ipv4(address: IPAddress) -> tuple[ipaddress.IPv4Address, ...] | None:
    """The IPv4 addresses an IPv6 address stands for: ``()`` when it embeds none, ``None`` when it embeds one
    that cannot be found.

    >>> embedded_ipv4(ipaddress.ip_address("64:ff9b::a9fe:a9fe"))
    (IPv4Address('169.254.169.254'),)
    >>> embedded_ipv4(ipaddress.ip_address("2001:0:4136:e378:8000:63bf:3fff:fdd2"))  # Teredo: server, client
    (IPv4Address('65.54.227.120'), IPv4Address('192.0.2.45'))
    """
    if not isinstance(address, ipaddress.IPv6Address):
        return ()
    value = int(address)
    if any(address in network for network in _UNJUDGEABLE):
        return None
    if value > 1 and any(address in network for network in _LOW_32_PREFIXES):
        return (ipaddress.IPv4Address(value & _32_BITS),)
    if address in _SIX_TO_FOUR:
        return (ipaddress.IPv4Address((value >> 80) & _32_BITS),)
    if address in _TEREDO:
        return ipaddress.IPv4Address((value >> 64) & _32_BITS), ipaddress.IPv4Address(~value & _32_BITS)
    return ()


def forbidden_reason(address: IPAddress, allowed: Sequence[IPNetwork] = ()) -> str | None:
    """Why a webhook may not connect to ``address`` (``None``: it may). The one judgement of an address, made
    at submission and before each delivery, for a literal in the URL and for every DNS answer alike.

    An address inside ``allowed`` may be connected to. An IPv6 address that embeds an IPv4 one is judged by the
    IPv4 one(s) it embeds; otherwise the address must be global unicast (not loopback, link-local, private,
    shared, reserved, documentation, multicast …).
    """
    if any(address.version == network.version and address in network for network in allowed):
        return None
    embedded = embedded_ipv4(address)
    if embedded is None:
        return f"{address} embeds an IPv4 address that cannot be checked"
    if embedded:
        for inner in embedded:
            if forbidden_reason(inner, allowed) is not None:
                return f"{address} stands for {inner}, which is not a public address"
        return None
    # not global: loopback, link-local (169.254.0.0/16, cloud metadata), private, shared (100.64/10), reserved …
    if not address.is_global or address.is_multicast:
        return f"{address} is not a public address"
    return None
