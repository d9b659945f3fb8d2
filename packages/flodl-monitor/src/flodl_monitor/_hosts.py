"""Which ``Host`` headers the dashboard answers: a guard against DNS rebinding.

A page on ``http://evil.example:8080`` whose name the attacker then points at 127.0.0.1 can read
``http://evil.example:8080/api/history`` from a dashboard on 127.0.0.1:8080: the browser thinks
it talks to the attacker's own site. The browser still sends ``Host: evil.example:8080``, so
answering only the names the dashboard is served under defeats it (as Jupyter and Vite do).

Accepted, on the port the request came in on: the loopback names (``localhost``, any loopback
IP literal such as ``127.0.0.1`` or ``[::1]``), the address the connection was made to, the host
the server was bound to (and, when that is not loopback, this machine's own host name: an
attacker's page cannot be served under it), and the names the user allowed. An allowed
``"name:port"`` accepts that name on that port only (a reverse proxy on another port); ``"*"``
turns the check off.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from flodl_core import ConfigError

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_WILDCARDS = ("", "0.0.0.0", "::", "*")
LOOPBACK_NAMES = ("localhost",)


class BadHost(ValueError):
    """A ``Host`` header that is not ``name[:port]``."""


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _normal(name: str) -> str:
    # Names compare case-insensitively; "localhost." is the same name as "localhost".
    name = name.lower()
    name = name[:-1] if name.endswith(".") else name
    ip = _ip(name)
    return str(ip) if ip is not None else name


def parse_host(header: str, default_port: int = 80) -> tuple[str, int]:
    """``"localhost:8080"`` -> ``("localhost", 8080)``; ``"[::1]"`` -> ``("::1", 80)``."""
    text = header.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise BadHost(f"Host {header!r} opens '[' without closing it")
        name, rest = text[1:end], text[end + 1 :]
        if _ip(name) is None or ":" not in name:
            raise BadHost(f"Host {header!r}: [{name}] is not an IPv6 address")
        if rest and not rest.startswith(":"):
            raise BadHost(f"Host {header!r} has {rest!r} after the address")
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text_raw = text.partition(":")
        port_text = port_text_raw if sep else None
        if not _NAME.fullmatch(name):
            raise BadHost(f"Host {header!r} is not a host name or address")
    if port_text is None:
        return _normal(name), default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BadHost(f"Host {header!r} has port {port_text!r}; expected 1..65535")
    return _normal(name), int(port_text)


@dataclass(frozen=True)
class HostPolicy:
    """The names (any served port) and ``(name, port)`` pairs accepted besides loopback."""

    names: frozenset[str] = frozenset()
    pairs: frozenset[tuple[str, int]] = frozenset()
    any_host: bool = False

    @classmethod
    def of(cls, allowed: Iterable[str] = (), bound_host: str | None = None) -> HostPolicy:
        """The policy for ``allowed`` names (``"name"``, ``"name:port"``, ``"[v6]:port"``,
        ``"*"``) plus the host the server binds (unless it is a wildcard address)."""
        if isinstance(allowed, str):
            raise ConfigError(
                f"allowed_hosts must be a list of names, got the string {allowed!r}; "
                f"write [{allowed!r}]"
            )
        names: set[str] = set()
        pairs: set[tuple[str, int]] = set()
        any_host = False
        for entry in allowed:
            if not isinstance(entry, str) or not entry.strip():
                raise ConfigError(f"allowed_hosts entry {entry!r} is not a host name")
            if entry.strip() == "*":
                any_host = True
                continue
            try:
                name, port = parse_host(entry, default_port=0)
            except BadHost as e:
                raise ConfigError(f"allowed_hosts entry {entry!r}: {e}") from None
            if port:
                pairs.add((name, port))
            else:
                names.add(name)
        if bound_host is not None:
            bound = _normal(bound_host.strip("[]"))
            if bound_host not in _WILDCARDS:
                names.add(bound)
            ip = _ip(bound)
            if bound not in LOOPBACK_NAMES and not (ip is not None and ip.is_loopback):
                names.update(machine_names())  # reachable from other machines: by this name too
        return cls(frozenset(names), frozenset(pairs), any_host)

    def refusal(self, header: str | None, local_addr: str | None, local_port: int | None) -> str:
        """Why a request with this ``Host`` header is refused; ``""`` when it is accepted.

        ``local_addr`` / ``local_port``: where the connection arrived (the socket's own address).
        Raises :class:`BadHost` for a malformed or missing header.
        """
        if self.any_host:
            return ""
        if header is None:
            raise BadHost("the request has no Host header (HTTP/1.1 requires one)")
        name, port = parse_host(header)
        if (name, port) in self.pairs:
            return ""
        if local_port is not None and port != local_port:
            return f"port {port} is not the port this dashboard serves ({local_port})"
        ip = _ip(name)
        if name in LOOPBACK_NAMES or name in self.names:
            return ""
        if ip is not None and (ip.is_loopback or _same_ip(ip, local_addr)):
            return ""
        return f"{name!r} is not a name this dashboard is served under"


def machine_names() -> set[str]:
    """This machine's host name, full and short (``gpu1.lab.example``, ``gpu1``)."""
    name = _normal(socket.gethostname())
    return {name, name.split(".")[0]} if name and _NAME.fullmatch(name) else set()


def _same_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, local: str | None) -> bool:
    local_ip = _ip(local.split("%")[0]) if local else None
    if local_ip is None:
        return False
    mapped = getattr(local_ip, "ipv4_mapped", None)  # ::ffff:10.0.0.5 on a dual-stack socket
    return ip == local_ip or (mapped is not None and ip == mapped)
