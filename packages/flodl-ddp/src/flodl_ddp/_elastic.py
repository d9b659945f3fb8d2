"""Elastic training's options, its optional dependency (torchft, ``pip install flodl-ddp[ft]``,
Linux x86_64, imported only when asked for) and its exposure rules.

Every elastic server (lighthouse, managers, heal servers, store, gloo) binds one address:
``127.0.0.1``, or that of an interface named trusted (``trusted_interface="eth1"``); a
non-loopback ``host``, ``GLOO_SOCKET_IFNAME`` or ``MASTER_ADDR`` is refused without one. The
quorum protocol is not authenticated: name a trusted interface only on a network that is all
yours (ARCHITECTURE-NOTES.md, ``_elastic``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from flodl_core import ConfigError, check_finite, check_int

EXTRA_HINT = "pip install flodl-ddp[ft]"
TORCHFT_VERSION = "0.2.0"


@dataclass(frozen=True)
class ElasticOptions:
    """Options of elastic training (see :meth:`TrainerBuilder.elastic`).

    Attributes:
        min_ranks: fewer living ranks than this fail the run (>= 1).
        heartbeat_timeout: seconds without a heartbeat before the lighthouse drops a rank.
        hang_timeout: seconds a rank may spend in a training step without finishing a batch
            before the watchdog kills it (a rank hung in Python still heartbeats).
        max_restarts: how many dead ranks the launcher restarts (0: none; see ``restart_rank``).
        trusted_interface: an interface (``"eth1"``) whose address every server binds (needed
            for any non-loopback setup).
        host: the address to bind when no interface is named (loopback only without one).
    """

    min_ranks: int = 1
    heartbeat_timeout: float = 1.0
    hang_timeout: float = 60.0
    max_restarts: int = 0
    trusted_interface: str | None = None
    host: str = "127.0.0.1"


def check_elastic(opts: ElasticOptions, world_size: int) -> None:
    """Validate ``opts`` against the number of ranks; raises :class:`ConfigError`."""
    m = check_int(opts.min_ranks, "elastic min_ranks", ge=1)
    if m > world_size:
        raise ConfigError(
            f"elastic min_ranks={m} is more than the {world_size} ranks: lower it or add devices"
        )
    for name, low in (("heartbeat_timeout", 0.1), ("hang_timeout", 0.5)):
        expected = f"a number of seconds >= {low}"
        check_finite(getattr(opts, name), f"elastic {name}", ge=low, expected=expected)
    check_int(opts.max_restarts, "elastic max_restarts", ge=0)
    iface = opts.trusted_interface
    if iface is not None and (not isinstance(iface, str) or not iface):
        raise ConfigError(f"elastic trusted_interface must name an interface, got {iface!r}")


def require_torchft() -> Any:
    """Import torchft, or raise :class:`ConfigError` naming the extra to install."""
    if not sys.platform.startswith("linux"):
        raise ConfigError(
            f"elastic training needs torchft, which ships wheels for Linux x86_64 only (this is "
            f"{sys.platform}); use the portable fallback instead: checkpoint_every(n, path) and "
            "restart with torchrun --max-restarts, resuming with .resume(path)"
        )
    os.environ.setdefault("RUST_LOG", "error")
    try:
        import torchft
    except ImportError as e:
        raise ConfigError(
            f"elastic training needs torchft=={TORCHFT_VERSION}, which is not installed ({e}); "
            f"install the extra: {EXTRA_HINT}"
        ) from None
    try:
        version = getattr(torchft, "__version__", None) or metadata.version("torchft")
    except metadata.PackageNotFoundError:
        version = "unknown"
    if version != TORCHFT_VERSION:
        raise ConfigError(
            f"elastic training is built for torchft=={TORCHFT_VERSION}, found {version} (its "
            f"process-group API changes between releases); install the extra: {EXTRA_HINT}"
        )
    return torchft


def is_loopback(host: str) -> bool:
    """``127.0.0.0/8``, ``::1`` and ``localhost`` are loopback; anything else is not."""
    with contextlib.suppress(ValueError):
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    return False


def interface_names() -> list[str]:
    """The machine's network interfaces (``lo``, ``eth0``, ...)."""
    with contextlib.suppress(OSError):
        return [name for _, name in socket.if_nameindex()]
    return []


def ipv4_address(name: str) -> str:
    """The IPv4 address of interface ``name`` (Linux ``SIOCGIFADDR``); ``OSError`` without one."""
    import fcntl  # POSIX only

    packed = struct.pack("256s", name.encode()[:15])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, packed)[20:24])  # SIOCGIFADDR


def interface_address(name: str, option: str = "elastic trusted_interface") -> str:
    """The IPv4 address of interface ``name`` (the value of ``option``); a :class:`ConfigError`
    naming the machine's interfaces when it is missing or has none."""
    names, here = interface_names(), socket.gethostname()
    if name not in names:
        raise ConfigError(
            f"{option} {name!r} does not exist on this machine ({here}); interfaces: "
            f"{', '.join(names) or 'none found'}"
        )
    try:
        return ipv4_address(name)
    except OSError as e:
        raise ConfigError(
            f"{option} {name!r} has no IPv4 address on {here} ({e}); bring it up with an address "
            "or name another interface"
        ) from None


@dataclass(frozen=True)
class Exposure:
    """Where an elastic run listens: the bind/advertised address and the gloo interface."""

    host: str
    gloo_ifname: str
    trusted: bool  # False: loopback only


def resolve_exposure(opts: ElasticOptions, env: dict[str, str] | None = None) -> Exposure:
    """The address every elastic server binds, after the rules of the module doc: a
    :class:`ConfigError` for a non-loopback setup without ``trusted_interface``, an unknown
    interface, or a ``host`` that is not the trusted interface's address."""
    env = dict(os.environ) if env is None else env
    iface = opts.trusted_interface
    if iface is not None:
        address = interface_address(iface)
        if opts.host not in ("127.0.0.1", address):
            raise ConfigError(
                f"elastic host {opts.host!r} is not the address of trusted_interface {iface!r} "
                f"({address}); leave host unset or give {address}"
            )
        return Exposure(address, iface, trusted=not is_loopback(address))
    gloo, master = env.get("GLOO_SOCKET_IFNAME"), env.get("MASTER_ADDR")
    reasons = [f"host={opts.host!r}"] if not is_loopback(opts.host) else []
    reasons += [f"GLOO_SOCKET_IFNAME={gloo!r}"] if gloo and gloo != "lo" else []
    reasons += [f"MASTER_ADDR={master!r}"] if master and not is_loopback(master) else []
    if reasons:
        raise ConfigError(
            "elastic training refuses a non-loopback setup (" + ", ".join(reasons) + "): "
            "torchft's quorum servers are unauthenticated and would be reachable from that "
            "network. Name the interface of a network you trust, e.g. "
            ".elastic(trusted_interface='eth1'), or stay on loopback"
        )
    return Exposure("127.0.0.1", "lo", trusted=False)
