"""Signature Version 4, verified: the canonical request, the string to sign and the signing key as
AWS clients compute them, so a request signed with an SQS credential's secret is recognised and any
change to its method, path, query, signed headers or body is not.

Two forms carry the signature, read by one verifier: the `Authorization` header (SDKs and the CLI
sign SQS requests that way) and the query string (`X-Amz-Algorithm`, `X-Amz-Credential`,
`X-Amz-Date`, `X-Amz-Expires`, `X-Amz-SignedHeaders`, `X-Amz-Signature`: a presigned URL, as
`generate_presigned_url` makes one). They differ in where the pieces come from, in the query string
signed (a presigned one leaves out its own `X-Amz-Signature`) and in the payload's hash (a presigner
signs `UNSIGNED-PAYLOAD`, taken only for an empty body, or the hash of the body as the SigV4 examples do).

A request is good for five minutes either side of its `X-Amz-Date`, as AWS has it; a presigned one
that names `X-Amz-Expires` (1 s to 7 days) until that long after its date, plus the same five minutes
(SQS's "more than 15 minutes after the request expiration date (such as for pre-signed URLs)", with
SQS's own window). There is no replay cache, as in AWS: the same signed request sent again within
that time is served again. Postbox's credentials have no session token: a request that carries one
is refused as AWS refuses a token it does not know.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, quote, unquote_plus

from . import errors, mac

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "sqs"
SKEW = timedelta(minutes=5)
MAX_EXPIRES = 604_800  # seven days, SigV4's longest presigned URL
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
SIGNATURE_PARAMETER = "X-Amz-Signature"
# A presigned request's pieces, in the order AWS names the missing ones.
QUERY_PIECES = ("X-Amz-Algorithm", "X-Amz-Credential", SIGNATURE_PARAMETER, "X-Amz-SignedHeaders", "X-Amz-Date")
QUERY_AUTH = frozenset((*QUERY_PIECES, "X-Amz-Expires", "X-Amz-Security-Token"))
_FIELD = re.compile(r"\s*(Credential|SignedHeaders|Signature)\s*=\s*([^,\s]*)\s*")


@dataclass(frozen=True)
class Authorization:
    access_key_id: str
    date: str  # YYYYMMDD of the scope
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str
    presigned: bool = False  # carried in the query string
    stamp: str | None = None  # a presigned request's X-Amz-Date
    expires: int | None = None  # a presigned request's X-Amz-Expires
    token: str | None = None  # a session token (X-Amz-Security-Token), which no credential of ours has

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


def read(request: Request) -> Authorization:
    """The request's signature, from its `Authorization` header or its query string (not both), or
    the error AWS answers for what is missing."""
    header = request.headers.get("authorization")
    # the usual case has no X-Amz-Algorithm anywhere in its query string: nothing to parse
    params = query_parameters(request.query) if "X-Amz-Algorithm" in request.query else {}
    if "X-Amz-Algorithm" not in params:
        return _with_token(parse(header), request.headers.get("x-amz-security-token"))
    if header:
        raise errors.bad_signature("Found both 'X-Amz-Algorithm' as a query-string param and 'Authorization' as "
                                   "HTTP header.")
    return parse_query(params)


def _with_token(auth: Authorization, token: str | None) -> Authorization:
    return auth if token is None else replace(auth, token=token)


def query_parameters(query: str) -> dict[str, str]:
    """The query string's parameters, each its first value (as AWS reads a presigned request's)."""
    out: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        out.setdefault(key, value)
    return out


def without_auth(query: str) -> str:
    """The query string less a presigned request's own parameters, for the action to read."""
    if "X-Amz-" not in query:
        return query
    return "&".join(pair for pair in query.split("&") if unquote_plus(pair.partition("=")[0]) not in QUERY_AUTH)


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
    return _authorization(fields["Credential"], fields["SignedHeaders"], fields["Signature"])


def parse_query(params: dict[str, str]) -> Authorization:
    """A presigned request's parts (`X-Amz-*` in its query string), or the error AWS answers."""
    algorithm = params.get("X-Amz-Algorithm")
    if algorithm and algorithm != ALGORITHM:
        raise errors.missing_token()
    missing = [name for name in QUERY_PIECES if not params.get(name)]
    if missing:
        raise errors.incomplete_signature(
            " ".join(f"AWS query-string parameters must include '{name}'." for name in missing)
            + " Re-examine the query-string parameters.")
    auth = _authorization(params["X-Amz-Credential"], params["X-Amz-SignedHeaders"], params[SIGNATURE_PARAMETER])
    return replace(auth, presigned=True, stamp=params["X-Amz-Date"], expires=_expires(params.get("X-Amz-Expires")),
                   token=params.get("X-Amz-Security-Token"))


def _authorization(credential: str, signed_headers: str, signature_hex: str) -> Authorization:
    scope = credential.split("/")
    if len(scope) != 5 or scope[4] != "aws4_request" or not all(scope):
        raise errors.incomplete_signature(
            "Credential should have 5 parts separated by '/' ending in 'aws4_request': "
            f"'{credential[:200]}'.")
    return Authorization(scope[0], scope[1], scope[2], scope[3], tuple(signed_headers.lower().split(";")),
                         signature_hex.lower())


def _expires(value: str | None) -> int | None:
    """X-Amz-Expires: whole seconds from 1 to seven days (SigV4's bounds for a presigned URL)."""
    if value is None:
        return None
    if not value.isascii() or not value.lstrip("-").isdigit() or len(value) > 12:
        raise errors.incomplete_signature(f"X-Amz-Expires should be a number. Got '{value[:40]}'.")
    seconds = int(value)
    if seconds < 1:
        raise errors.incomplete_signature(f"X-Amz-Expires must be at least 1 second. Got '{value[:40]}'.")
    if seconds > MAX_EXPIRES:
        raise errors.incomplete_signature(
            f"X-Amz-Expires must be less than a week (in seconds) that is {MAX_EXPIRES}. Got '{value[:40]}'.")
    return seconds


_BASIC_TIME = re.compile(r"\d{8}T\d{6}Z", re.ASCII)


def request_time(request: Request, auth: Authorization) -> datetime:
    """When the request says it was signed: a presigned request's X-Amz-Date, else its X-Amz-Date
    header or its Date header."""
    if auth.presigned:
        return _basic_time(auth.stamp or "")
    headers = request.headers
    stamp = headers.get("x-amz-date")
    if stamp is None:
        if headers.get("date"):
            return _http_date(headers["date"])
        raise errors.incomplete_signature(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
    return _basic_time(stamp)


def _basic_time(stamp: str) -> datetime:
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


def check_time(at: datetime, now: datetime, expires: int | None = None) -> None:
    """Within SKEW of `now` (a presigned request with X-Amz-Expires: until SKEW after it expires);
    the answer's times are written only for a request refused."""
    fmt = "%Y%m%dT%H%M%SZ"
    end = at if expires is None else at + timedelta(seconds=expires)
    if end < now - SKEW:
        raise errors.expired(f"Signature expired: {end.strftime(fmt)} is now earlier than "
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


def canonical_query(query: str, leave_out: str | None = None) -> str:
    """The query string as SigV4 signs it; `leave_out` names a parameter left out (a presigned
    request's own signature). Each name and value is decoded as the action reads it (form encoding:
    a `+` is a space), so the signature covers what the action acts on: a `%2B` turned into `+`
    changes the request, and is refused."""
    pairs = []
    for pair in query.split("&") if query else []:
        if not pair:
            continue
        key, _, value = pair.partition("=")
        key = unquote_plus(key)
        if key == leave_out:
            continue
        pairs.append((quote(key, safe="-_.~"), quote(unquote_plus(value), safe="-_.~")))
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def canonical_request(request: Request, auth: Authorization, payload_hash: str) -> str:
    signed_headers = auth.signed_headers
    lines = [request.method.upper(), quote(_remove_dot_segments(request.path or "/"), safe="/~"),
             canonical_query(request.query, SIGNATURE_PARAMETER if auth.presigned else None)]
    for name in sorted(set(signed_headers)):
        value = request.headers.get(name)
        if value is None:
            raise errors.bad_signature()
        lines.append(f"{name}:{' '.join(value.split())}")
    lines.append("")
    lines.append(";".join(sorted(set(signed_headers))))
    lines.append(payload_hash)
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


def signature(request: Request, auth: Authorization, secret: str, stamp: str, payload_hash: str) -> str:
    canonical = canonical_request(request, auth, payload_hash)
    hashed = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    to_sign = "\n".join((ALGORITHM, stamp, auth.scope, hashed))
    return mac.keyed(signing_key(secret, auth)).hexdigest(to_sign.encode())


def _payload_hashes(request: Request, auth: Authorization) -> tuple[str, ...]:
    """The payload hashes the signer may have signed: a presigner's UNSIGNED-PAYLOAD (for an empty body
    alone: the action reads a body's parameters too, and a signature that covers none of them must not
    let a holder of the URL add any) or the body's; a header signer's x-amz-content-sha256, which must
    be the body's, else the body's."""
    body_hash = hashlib.sha256(request.body).hexdigest()
    if auth.presigned:
        return (UNSIGNED_PAYLOAD, body_hash) if not request.body else (body_hash,)
    given = request.headers.get("x-amz-content-sha256")
    if given and given != body_hash:
        raise errors.bad_signature("The provided 'x-amz-content-sha256' header does not match what was computed.")
    return (body_hash,)


def verify(request: Request, auth: Authorization, secret: str, region: str, now: datetime) -> None:
    """Raise what AWS answers unless `request` carries a good signature made with `secret`, for this
    service and region, within its time of `now`."""
    at = request_time(request, auth)
    check_scope(auth, at, region)
    if "host" not in auth.signed_headers:
        raise errors.bad_signature("'Host' must be a 'SignedHeader' in the AWS Authorization.")
    stamp = auth.stamp or request.headers.get("x-amz-date") or at.strftime("%Y%m%dT%H%M%SZ")
    if not any(hmac.compare_digest(signature(request, auth, secret, stamp, payload_hash), auth.signature)
               for payload_hash in _payload_hashes(request, auth)):
        raise errors.bad_signature()
    check_time(at, now, auth.expires)
    if auth.token is not None:
        raise errors.unknown_key()
