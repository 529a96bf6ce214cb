"""This machine's network addresses, for LAN exposure: what to show the user and which Host headers to accept."""

from __future__ import annotations

import ipaddress
import socket

import psutil

from app.service.http.asgi import LOOPBACK_HOSTS


def lan_addresses() -> list[str]:
    """Addresses other machines may reach this one at: IPv4 and global IPv6, no loopback, no link-local."""
    found: list[str] = []
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                address = ipaddress.ip_address(entry.address.split("%", 1)[0])
            except ValueError:
                continue
            if not (address.is_loopback or address.is_link_local or address.is_unspecified):
                found.append(str(address))
    return sorted(dict.fromkeys(found), key=lambda a: (":" in a, a))


def local_addresses() -> set[str]:
    """Every address of this machine's interfaces, loopback included."""
    return {
        entry.address.split("%", 1)[0]
        for entries in psutil.net_if_addrs().values()
        for entry in entries
        if entry.family in (socket.AF_INET, socket.AF_INET6)
    }


def is_unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def allowed_hosts(bind: str) -> frozenset[str]:
    """Host header names the endpoint accepts when bound to `bind` (DNS rebinding defence): loopback names, the
    bound address, and for 0.0.0.0 / :: every LAN address and this machine's name."""
    names = set(LOOPBACK_HOSTS)
    addresses = [bind]
    if is_unspecified(bind):
        addresses += lan_addresses()
        hostname = socket.gethostname().lower()
        names |= {hostname, f"{hostname}.local"}
    for address in addresses:
        names.add(f"[{address}]" if ":" in address else address)
    return frozenset(names)
