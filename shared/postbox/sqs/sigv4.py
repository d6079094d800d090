"""Signature Version 4, verified: the canonical request, the string to sign and the signing key as
AWS clients compute them, so a request signed with an SQS credential's secret is recognised and any
change to its method, path, query, signed headers or body is not.

Only the `Authorization` header form is read (SDKs and the CLI sign SQS requests that way); a
request is good for five minutes either side of its `X-Amz-Date`, as AWS has it. There is no replay
cache, as in AWS: the same signed request sent again within that window is served again.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, unquote

from . import errors

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "sqs"
SKEW = timedelta(minutes=5)
_FIELD = re.compile(r"\s*(Credential|SignedHeaders|Signature)\s*=\s*([^,\s]*)\s*")


@dataclass(frozen=True)
class Authorization:
    access_key_id: str
    date: str  # YYYYMMDD of the scope
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # as sent (percent-encoded)
    query: str  # the raw query string
    headers: dict[str, str]  # lower-case names
    body: bytes


def parse(header: str | None) -> Authorization:
    """The `Authorization` header's parts, or the error AWS answers for what is missing."""
    if not header:
        raise errors.missing_token()
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise errors.incomplete_signature(f"Unsupported AWS 'algorithm': '{algorithm[:40]}'.")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        m = _FIELD.fullmatch(part)
        if m:
            fields[m.group(1)] = m.group(2)
    missing = [f for f in ("Credential", "SignedHeaders", "Signature") if not fields.get(f)]
    if missing:
        raise errors.incomplete_signature(
            " ".join(f"Authorization header requires '{f}' parameter." for f in missing)
            + f" Authorization={header[:200]}")
    scope = fields["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request" or not all(scope):
        raise errors.incomplete_signature(
            "Credential should have 5 parts separated by '/' ending in 'aws4_request': "
            f"'{fields['Credential'][:200]}'.")
    return Authorization(scope[0], scope[1], scope[2], scope[3],
                         tuple(fields["SignedHeaders"].lower().split(";")), fields["Signature"].lower())


_BASIC_TIME = re.compile(r"\d{8}T\d{6}Z", re.ASCII)


def request_time(headers: dict[str, str]) -> datetime:
    stamp = headers.get("x-amz-date")
    if stamp is None:
        if headers.get("date"):
            return _http_date(headers["date"])
        raise errors.incomplete_signature(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
    try:
        if not _BASIC_TIME.fullmatch(stamp):  # strptime takes more (a 1-digit month); and is slow
            raise ValueError(stamp)
        return datetime(int(stamp[0:4]), int(stamp[4:6]), int(stamp[6:8]), int(stamp[9:11]), int(stamp[11:13]),
                        int(stamp[13:15]), tzinfo=UTC)
    except ValueError:
        raise errors.incomplete_signature(f"Date must be in ISO-8601 'basic format'. Got '{stamp[:40]}'.") from None


def _http_date(value: str) -> datetime:
    try:
        return datetime.strptime(value, "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
    except ValueError:
        raise errors.incomplete_signature(f"Invalid Date header: '{value[:60]}'.") from None


def check_scope(auth: Authorization, at: datetime, region: str) -> None:
    """The scope names this service, this region and the request's own day."""
    if auth.service != SERVICE:
        raise errors.bad_signature(f"Credential should be scoped to correct service: '{SERVICE}'.")
    if auth.region != region:
        raise errors.bad_signature(f"Credential should be scoped to a valid region, not '{auth.region[:40]}'.")
    day = f"{at.year:04d}{at.month:02d}{at.day:02d}"  # 0.6 us where strftime takes 1.6, on every request
    if auth.date != day:
        raise errors.bad_signature(
            f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
            f"'{auth.date[:20]}' != '{day}'")


def check_time(at: datetime, now: datetime) -> None:
    """Within SKEW of `now`; the answer's times are written only for a request refused."""
    fmt = "%Y%m%dT%H%M%SZ"
    if at < now - SKEW:
        raise errors.expired(f"Signature expired: {at.strftime(fmt)} is now earlier than "
                             f"{(now - SKEW).strftime(fmt)} ({now.strftime(fmt)} - 5 min.)")
    if at > now + SKEW:
        raise errors.expired(f"Signature not yet current: {at.strftime(fmt)} is still later than "
                             f"{(now + SKEW).strftime(fmt)} ({now.strftime(fmt)} + 5 min.)")


def _remove_dot_segments(path: str) -> str:
    out: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
        else:
            out.append(part)
    joined = "/" + "/".join(out)
    return joined + "/" if path.endswith("/") and joined != "/" else joined


def canonical_query(query: str) -> str:
    pairs = []
    for pair in query.split("&") if query else []:
        if not pair:
            continue
        key, _, value = pair.partition("=")
        pairs.append((quote(unquote(key), safe="-_.~"), quote(unquote(value), safe="-_.~")))
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def canonical_request(request: Request, signed_headers: tuple[str, ...]) -> str:
    lines = [request.method.upper(), quote(_remove_dot_segments(request.path or "/"), safe="/~"),
             canonical_query(request.query)]
    for name in sorted(set(signed_headers)):
        value = request.headers.get(name)
        if value is None:
            raise errors.bad_signature()
        lines.append(f"{name}:{' '.join(value.split())}")
    lines.append("")
    lines.append(";".join(sorted(set(signed_headers))))
    lines.append(request.headers.get("x-amz-content-sha256") or hashlib.sha256(request.body).hexdigest())
    return "\n".join(lines)


def signing_key(secret: str, auth: Authorization) -> bytes:
    return _derived_key(secret, auth.date, auth.region, auth.service)


@functools.lru_cache(maxsize=1024)
def _derived_key(secret: str, date: str, region: str, service: str) -> bytes:
    """SigV4's key for a day, region and service: four HMACs, the same for every request a
    credential signs that day, so a warm function derives it once (as SDKs cache it too)."""
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def signature(request: Request, auth: Authorization, secret: str, stamp: str) -> str:
    canonical = canonical_request(request, auth.signed_headers)
    hashed = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    to_sign = "\n".join((ALGORITHM, stamp, auth.scope, hashed))
    return hmac.new(signing_key(secret, auth), to_sign.encode(), hashlib.sha256).hexdigest()


def verify(request: Request, auth: Authorization, secret: str, region: str, now: datetime) -> None:
    """Raise what AWS answers unless `request` carries a good signature made with `secret`, for this
    service and region, within five minutes of `now`."""
    at = request_time(request.headers)
    check_scope(auth, at, region)
    if "host" not in auth.signed_headers:
        raise errors.bad_signature("'Host' must be a 'SignedHeader' in the AWS Authorization.")
    stamp = request.headers.get("x-amz-date") or at.strftime("%Y%m%dT%H%M%SZ")
    body_hash = request.headers.get("x-amz-content-sha256")
    if body_hash and body_hash != hashlib.sha256(request.body).hexdigest():
        raise errors.bad_signature("The provided 'x-amz-content-sha256' header does not match what was computed.")
    if not hmac.compare_digest(signature(request, auth, secret, stamp), auth.signature):
        raise errors.bad_signature()
    check_time(at, now)
