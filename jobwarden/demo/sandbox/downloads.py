"""Download conventions of the sandbox's result, each named after the public doc it models.

- Presigned, expiring URLs (Amazon S3 User Guide, "Download and upload objects with
  presigned URLs"; Signature Version 4 query parameters ``X-Amz-Algorithm``,
  ``X-Amz-Credential``, ``X-Amz-Date`` as ``YYYYMMDDTHHMMSSZ``, ``X-Amz-Expires`` in whole
  seconds, ``X-Amz-SignedHeaders``, ``X-Amz-Signature``): "you can use the presigned URL
  multiple times, up to the expiration date and time"; afterwards S3 answers ``403`` with
  an XML ``AccessDenied`` error, "Request has expired", and a tampered signature answers
  ``403`` ``SignatureDoesNotMatch``. As on S3 the signature is the request's only
  authentication: a presigned GET needs no bearer token, and one that also carries an
  ``Authorization`` header is refused ``400 InvalidArgument`` ("Only one auth mechanism
  allowed"), so a client that sends the provider's credential along is caught.
- One-time download links: no standard names one; the common application-level pattern
  (a token invalidated by its first use, later uses answering ``410 Gone``) is modelled:
  the first GET consumes the link, even if its body never arrives whole.

Pure functions: the caller passes the clock and the job's secret.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlencode

from jobwarden.demo.sandbox.replies import Reply, iso_utc

__all__ = [
    "AMZ_DATE",
    "expired_or_forged",
    "link_used",
    "no_such_file",
    "one_auth_mechanism",
    "presign",
]

AMZ_DATE = "%Y%m%dT%H%M%SZ"
_CREDENTIAL = "AKIASANDBOXEXAMPLE/{day}/us-east-1/s3/aws4_request"
_XML = "application/xml"


def _signature(secret: bytes, path: str, amz_date: str, expires: int) -> str:
    signed = f"GET\n{path}\n{amz_date}\n{expires}".encode()
    return hmac.new(secret, signed, hashlib.sha256).hexdigest()


def presign(
    path: str, secret: bytes, expires_in: int, *, now: datetime, stale: bool = False
) -> tuple[str, datetime]:
    """``path`` with its presigned query, and when it expires.

    Signed at ``now`` truncated to the second (X-Amz-Date has no fraction), or, ``stale``,
    ``expires_in`` seconds before that: a URL whose end has already come.
    """
    signed = now.astimezone(UTC).replace(microsecond=0)
    if stale:
        signed -= timedelta(seconds=expires_in)
    amz_date = signed.strftime(AMZ_DATE)
    query = {
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Credential": _CREDENTIAL.format(day=signed.strftime("%Y%m%d")),
        "X-Amz-Date": amz_date,
        "X-Amz-Expires": str(expires_in),
        "X-Amz-SignedHeaders": "host",
        "X-Amz-Signature": _signature(secret, path, amz_date, expires_in),
    }
    return f"{path}?{urlencode(query, quote_via=quote)}", signed + timedelta(seconds=expires_in)


def _s3_error(code: str, message: str, status: int = 403, **extra: str) -> Reply:
    fields = "".join(f"<{name}>{value}</{name}>" for name, value in extra.items())
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>{fields}"
        "<RequestId>SANDBOX</RequestId></Error>"
    )
    return Reply(status=status, body=body.encode(), headers={"Content-Type": _XML})


def one_auth_mechanism() -> Reply:
    """S3's answer to a presigned URL sent with an Authorization header as well."""
    return _s3_error(
        "InvalidArgument",
        "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
        "Signature query string parameter or the Authorization header should be specified",
        status=400,
        ArgumentName="Authorization",
    )


def expired_or_forged(
    path: str, query: dict[str, list[str]], secret: bytes, now: datetime
) -> Reply | None:
    """S3's answer to a presigned GET that may not be served (None: serve it)."""
    given = {name: values[0] for name, values in query.items() if values}
    amz_date, expires = given.get("X-Amz-Date"), given.get("X-Amz-Expires")
    signature = given.get("X-Amz-Signature")
    if amz_date is None or expires is None or signature is None:
        return _s3_error(
            "AccessDenied",
            "Query-string authentication requires the "
            "X-Amz-Date, X-Amz-Expires and X-Amz-Signature parameters",
        )
    try:
        seconds = int(expires)
        signed = datetime.strptime(amz_date, AMZ_DATE).replace(tzinfo=UTC)
    except ValueError:
        return _s3_error("AuthorizationQueryParametersError", "X-Amz-Date or X-Amz-Expires")
    if not hmac.compare_digest(signature, _signature(secret, path, amz_date, seconds)):
        return _s3_error(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided.",
        )
    ends = signed + timedelta(seconds=seconds)
    if now >= ends:
        return _s3_error(
            "AccessDenied", "Request has expired", Expires=iso_utc(ends), ServerTime=iso_utc(now)
        )
    return None


def link_used(job_id: str) -> Reply:
    """A one-time link asked for again: 410 Gone (it existed, and never will again)."""
    body = {"error": "link_used", "message": f"the one-time link of {job_id} was used"}
    return Reply(
        status=410, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )


def no_such_file() -> Reply:
    """The OpenAI Files API's answer for a file id it does not know."""
    error = {
        "message": "No such File object",
        "type": "invalid_request_error",
        "param": "id",
        "code": None,
    }
    body = json.dumps({"error": error}).encode()
    return Reply(status=404, body=body, headers={"Content-Type": "application/json"})
