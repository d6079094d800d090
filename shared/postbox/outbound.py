"""Outbound HTTP to an address a tenant names (the work surface's push deliveries): the one way out.

A call checks the URL (http or https, a host, a numeric port, no user info, printable ASCII),
resolves the host once, refuses it unless every address is public, and connects to the address it
checked: the Host header, TLS SNI and the certificate check name the URL's host, so a second
lookup (DNS rebinding) has nothing to change. One deadline covers resolving, connecting, TLS,
sending and the answer: each step gets only the time left. Only the status line and headers are
read, at most MAX_ANSWER bytes; the body is never read. Every failure is the call's answer
(`Answer.failure`), never an exception, so one bad endpoint fails only its own call.

Not public: loopback, private, shared (100.64.0.0/10), link-local (169.254.0.0/16 with the
metadata address 169.254.169.254, fe80::/10), the EC2 IPv6 metadata address fd00:ec2::254,
multicast, unspecified, reserved, benchmarking and documentation ranges; and an IPv6 address
embedding a refused IPv4 one (IPv4-mapped, IPv4-compatible, 6to4 2002::/16, NAT64 64:ff9b::/96),
Teredo (2001::/32) and local-use NAT64 (64:ff9b:1::/48) whatever they embed.
POSTBOX_WORK_PUSH_ALLOW_PRIVATE, an operator's switch for local development and tests (never a
tenant's), lets loopback and private networks through; link-local, metadata, multicast,
unspecified and reserved addresses stay refused even then.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import config

if TYPE_CHECKING:
    import ssl

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_ANSWER = 16 * 1024  # the status line and headers; a longer head is a failure
_CHUNK = 64 * 1024


def _nets(*cidrs: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# Refused even under the operator's switch: never a place a delivery may go.
_NEVER = _nets(
    "0.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
    "::/128", "fe80::/10", "fec0::/10", "ff00::/8", "fd00:ec2::254/128",
    "2001::/32", "64:ff9b:1::/48",
)
# Not public (besides whatever `is_global` says is not, on every Python version we run).
_NOT_PUBLIC = _nets(
    "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24",
    "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "::1/128", "100::/64", "2001::/23", "2001:db8::/32", "fc00::/7",
)
_COMPATIBLE = ipaddress.ip_network("::/96")  # IPv4-compatible (deprecated): ::a.b.c.d
_SIXTOFOUR = ipaddress.ip_network("2002::/16")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]+")
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?:[ \t][^\r\n]*)?\r?\n")
_HEAD_END = re.compile(rb"\r?\n\r?\n")


class Refused(ValueError):
    """A URL or an address no outbound call may use."""


class _Late(Exception):
    """The call's deadline passed."""


class _Failed(Exception):
    """The endpoint could not be reached or did not answer in HTTP."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as the URL names it (an IPv6 literal without brackets)
    port: int
    path: str  # path and query, as sent in the request line

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


@dataclass(frozen=True)
class Answer:
    status: int | None
    failure: str | None  # None when the endpoint answered 2xx

    @property
    def ok(self) -> bool:
        return self.failure is None


def target(url: str) -> Target:
    """The parts of an outbound URL; Refused saying what is wrong with it."""
    if not isinstance(url, str) or not _PRINTABLE_ASCII.fullmatch(url):
        raise Refused("the URL must be printable ASCII without spaces (percent-encode the rest)")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise Refused(f"the URL does not parse: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise Refused("the URL must be http or https")
    if parts.username is not None or parts.password is not None:
        raise Refused("the URL must not carry credentials")
    if not parts.hostname:
        raise Refused("the URL has no host")
    if port == 0:
        raise Refused("the URL's port must be 1-65535")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _SIXTOFOUR:
        return ip.sixtofour
    if ip in _NAT64 or (ip in _COMPATIBLE and int(ip) > 1):  # :: and ::1 are themselves
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal(ip: IPAddress, allow_private: bool = False) -> str | None:
    """Why a call may not go to `ip` (None: it may)."""
    if any(ip in net for net in _NEVER if net.version == ip.version) or ip.is_multicast or ip.is_link_local:
        return f"{ip} is not a public address"
    if ip.version == 6:
        embedded = _embedded_ipv4(ip)  # type: ignore[arg-type]
        if embedded is not None:
            return f"{ip} embeds {embedded}, not a public address" if refusal(embedded, allow_private) else None
    if allow_private and (ip.is_loopback or ip.is_private):
        return None
    if (not ip.is_global or ip.is_reserved or ip.is_loopback or ip.is_private
            or any(ip in net for net in _NOT_PUBLIC if net.version == ip.version)):
        return f"{ip} is not a public address"
    return None


def _allow_private() -> bool:
    return config.settings().work_push_allow_private


def check_url(url: str) -> Target:
    """What a tenant's URL is checked against when it is stored: its shape, and an address given
    literally (a name is resolved, and checked, at each call). Refused says why not."""
    found = target(url)
    try:
        literal = ipaddress.ip_address(found.host)
    except ValueError:
        return found
    why = refusal(literal, _allow_private())
    if why:
        raise Refused(why)
    return found


# ---- one call ---------------------------------------------------------------------------------


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Late
    return left


def _resolve(host: str, port: int, deadline: float) -> list[IPAddress]:
    """The host's addresses, looked up once (in a helper thread, so the lookup too keeps the deadline)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    found: dict[str, object] = {}

    def look_up() -> None:
        try:
            found["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except Exception as e:  # noqa: BLE001 - the caller reports it
            found["error"] = e

    helper = threading.Thread(target=look_up, name="outbound-resolve", daemon=True)
    helper.start()
    helper.join(_left(deadline))
    if helper.is_alive():
        raise _Late
    if "error" in found:
        raise _Failed(f"cannot resolve {host}: {found['error']}")
    addresses: list[IPAddress] = []
    for info in found["infos"]:  # type: ignore[attr-defined]
        ip = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise _Failed(f"cannot resolve {host}")
    return addresses


def _connect(addresses: list[IPAddress], port: int, deadline: float) -> socket.socket:
    """A connection to the first of the checked addresses that takes one."""
    error: OSError | None = None
    for ip in addresses:
        try:
            return socket.create_connection((str(ip), port), timeout=_left(deadline))
        except OSError as e:
            error = e
    assert error is not None
    raise error


_tls: ssl.SSLContext | None = None


def _tls_context() -> ssl.SSLContext:
    """Made at the first https call (ssl is a slow import the work surface's cold start skips)."""
    global _tls
    if _tls is None:
        import ssl

        _tls = ssl.create_default_context()  # verifies the certificate and the host name
    return _tls


def _send(sock: socket.socket, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        sock.settimeout(_left(deadline))
        view = view[sock.send(view[:_CHUNK]):]


def _status(sock: socket.socket, deadline: float) -> int:
    """The final status of the answer, from its head alone (informational 1xx heads are skipped)."""
    head, closed = b"", False
    while True:
        status, end = _STATUS_LINE.match(head), _HEAD_END.search(head)
        if status is None and (b"\n" in head or closed):
            raise _Failed("the answer is not HTTP" if head else "the connection closed without an answer")
        if status is not None and end is not None and int(status.group(1)) < 200:
            head = head[end.end():]  # informational: the final head follows
            continue
        if status is not None and (end is not None or closed):
            return int(status.group(1))
        if len(head) > MAX_ANSWER:
            raise _Failed(f"the answer's head is over {MAX_ANSWER} bytes")
        sock.settimeout(_left(deadline))
        chunk = sock.recv(4096)
        head, closed = head + chunk, not chunk


def _request(found: Target, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {found.path} HTTP/1.1", f"Host: {found.host_header}", f"Content-Length: {len(body)}",
             "Connection: close", *(f"{name}: {value}" for name, value in headers.items())]
    if any("\r" in line or "\n" in line for line in lines):
        raise Refused("a header holds a line break")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _post(url: str, body: bytes, headers: dict[str, str], deadline: float) -> int:
    found = target(url)
    addresses = _resolve(found.host, found.port, deadline)
    allow = _allow_private()
    for ip in addresses:
        why = refusal(ip, allow)
        if why:
            raise Refused(why if found.host == str(ip) else f"{why} ({found.host} resolves to it)")
    sock = _connect(addresses, found.port, deadline)
    try:
        if found.scheme == "https":
            sock.settimeout(_left(deadline))
            sock = _tls_context().wrap_socket(sock, server_hostname=found.host)
        _send(sock, _request(found, body, headers), deadline)
        return _status(sock, deadline)
    finally:
        sock.close()


def post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> Answer:
    """POST `body` to `url` within `timeout_s` in all; redirects are not followed (a 3xx is not 2xx)."""
    try:
        status = _post(url, body, headers, time.monotonic() + timeout_s)
    except Refused as e:
        return Answer(None, f"refused: {e}"[:500])
    except _Failed as e:
        return Answer(None, str(e)[:500])
    except (_Late, TimeoutError):
        return Answer(None, f"no answer within {timeout_s:g} s")
    except Exception as e:  # noqa: BLE001 - whatever goes wrong is this call's failure, never its caller's
        return Answer(None, f"{type(e).__name__}: {e}"[:500])
    return Answer(status, None if 200 <= status < 300 else f"HTTP {status}")
