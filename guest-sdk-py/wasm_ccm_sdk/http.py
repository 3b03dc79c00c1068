"""A blocking HTTP client over `wasi:http/outgoing-handler`, as the Rust SDK's.

It writes and finishes the whole request body before handing the request to the host and
reads every error from the response future (the order that is reliable on wasmtime), and it
drops every stream, pollable and response it opens (`with` blocks): a resource left open when
the call ends makes the call trap.

The host decides where a request may go. A request to a host the operator did not grant, or
to an address inside the cluster network, fails with `HttpError` of kind `denied`. Headers
that carry credentials (`authorization`, `proxy-authorization`, `cookie`) are the host's to
set: setting one fails with kind `forbidden-header`, before anything is sent. An `HttpError`
raised from a provider function becomes the contract's error: `retry-after` for 429 (the
server's `Retry-After` seconds, else 1 s) and for 503 with `Retry-After`, `other` for the rest.
"""

import json
from typing import Any, List, Optional, Tuple
from urllib.parse import urlsplit

from componentize_py_types import Err
from wit_world.imports import outgoing_handler, streams, types

from . import errors

# Header names only the host may set.
_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")
_METHODS = {
    "GET": types.Method_Get,
    "HEAD": types.Method_Head,
    "POST": types.Method_Post,
    "PUT": types.Method_Put,
    "DELETE": types.Method_Delete,
    "PATCH": types.Method_Patch,
}
# How much of a response body an error message quotes.
_QUOTED = 200


class HttpError(Exception):
    """Why a request failed. `kind` is one of `invalid-url`, `denied`, `forbidden-header`,
    `transport`, `status` and `decode`; `status`, `body` and `retry_after` (seconds, from
    the `Retry-After` header) are set for `status` only."""

    def __init__(
        self,
        kind: str,
        url: str,
        message: str,
        status: Optional[int] = None,
        body: str = "",
        retry_after: Optional[float] = None,
    ):
        super().__init__(message)
        self.kind = kind
        self.url = url
        self.status = status
        self.body = body
        self.retry_after = retry_after

    def throttled_for(self) -> Optional[float]:
        """The delay a throttling server asked for: 429 (1 s when it named none), or 503
        with `Retry-After`."""
        if self.kind != "status":
            return None
        if self.status == 429:
            return self.retry_after if self.retry_after is not None else 1.0
        if self.status == 503:
            return self.retry_after
        return None

    def to_provider_error(self) -> Err:
        """The contract's error: `retry-after` when throttled, else `other`. A 404 is not
        turned into `not-found`: only the provider knows whether it means absence."""
        delay = self.throttled_for()
        if delay is not None:
            return errors.retry_after(delay, str(self))
        return errors.other(str(self))


class Response:
    """A received response with its whole body."""

    def __init__(self, url: str, status: int, headers: List[Tuple[str, str]], body: bytes):
        self.url = url
        self.status = status
        self.headers = headers
        self.body = body

    def header(self, name: str) -> Optional[str]:
        """The value of header `name` (case-insensitive), if present."""
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def success(self) -> "Response":
        """This response if its status is 2xx, else an `HttpError` of kind `status`."""
        if 200 <= self.status < 300:
            return self
        retry_after = None
        value = self.header("retry-after")
        if value is not None and value.strip().isdigit():
            retry_after = float(int(value.strip()))
        body = self.body.decode("utf-8", "replace")
        raise HttpError(
            "status",
            self.url,
            f"{self.url} answered {self.status}: {body[:_QUOTED]}",
            status=self.status,
            body=body,
            retry_after=retry_after,
        )

    def json(self) -> Any:
        """The body of a 2xx response as JSON."""
        self.success()
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise HttpError("decode", self.url, f"unexpected response from {self.url}: {err}")


def get(url: str) -> Response:
    """`GET url`."""
    return request("GET", url)


def post_json(url: str, body: Any) -> Response:
    """`POST url` with `body` as JSON."""
    return request("POST", url, json_body=body)


def put_json(url: str, body: Any) -> Response:
    """`PUT url` with `body` as JSON."""
    return request("PUT", url, json_body=body)


def delete(url: str) -> Response:
    """`DELETE url`."""
    return request("DELETE", url)


def request(
    method: str,
    url: str,
    headers: Optional[List[Tuple[str, str]]] = None,
    body: bytes = b"",
    json_body: Any = None,
) -> Response:
    """Send a request and read the whole response, whatever its status (see
    `Response.success`). Requests accept `application/json` unless `headers` name what they
    accept; a `json_body` is sent with `content-type: application/json`."""
    scheme, authority, path = _parse(url)
    entries = [(name.lower(), value.encode("utf-8")) for name, value in headers or []]
    if json_body is not None:
        body = json.dumps(json_body, separators=(",", ":")).encode("utf-8")
        entries.append(("content-type", b"application/json"))
    if not any(name == "accept" for name, _ in entries):
        entries.insert(0, ("accept", b"application/json"))
    # A body of known length goes with `content-length`, not chunked.
    if body and not any(name == "content-length" for name, _ in entries):
        entries.append(("content-length", str(len(body)).encode("ascii")))
    for name, _ in entries:
        if name in _CREDENTIAL_HEADERS:
            raise _forbidden(url, name)
    try:
        fields = types.Fields.from_list(entries)
    except Err as err:
        if isinstance(err.value, types.HeaderError_Forbidden):
            raise _forbidden(url, _first_forbidden(entries))
        raise HttpError("transport", url, f"request to {url} failed: invalid header: {err.value}")
    if method.upper() in _METHODS:
        wasi_method = _METHODS[method.upper()]()
    else:
        wasi_method = types.Method_Other(method)

    outgoing = types.OutgoingRequest(fields)
    _set(url, outgoing.set_method, wasi_method, "method")
    _set(url, outgoing.set_scheme, scheme, "scheme")
    _set(url, outgoing.set_authority, authority, "authority")
    _set(url, outgoing.set_path_with_query, path, "path")
    outgoing_body = outgoing.body()
    with outgoing_body.write() as stream:
        # Nothing drains the host's buffer before `handle`: write as much as it allows,
        # never blocking.
        rest = body
        while rest:
            permit = stream.check_write()
            if permit == 0:
                raise HttpError(
                    "transport",
                    url,
                    f"request to {url} failed: a body of {len(body)} bytes is larger than "
                    "the host buffers before sending",
                )
            stream.write(rest[:permit])
            rest = rest[permit:]
    try:
        types.OutgoingBody.finish(outgoing_body, None)
        future = outgoing_handler.handle(outgoing, None)
    except Err as err:
        raise _error_code(method, url, err.value)

    with future:
        with future.subscribe() as pollable:
            pollable.block()
        answer = future.get()
    if answer is None:
        raise HttpError("transport", url, f"request to {url} failed: response not ready")
    if isinstance(answer, Err):
        raise HttpError("transport", url, f"request to {url} failed: response already taken")
    inner = answer.value
    if isinstance(inner, Err):
        raise _error_code(method, url, inner.value)
    with inner.value as response:
        status = response.status()
        with response.headers() as fields:
            received = [
                (name, value.decode("utf-8", "replace")) for name, value in fields.entries()
            ]
        incoming = response.consume()
        with incoming:
            received_body = _read_body(method, url, incoming)
    return Response(url, status, received, received_body)


def _read_body(method: str, url: str, incoming: types.IncomingBody) -> bytes:
    chunks = []
    size = 0
    with incoming.stream() as stream:
        while True:
            try:
                chunk = stream.blocking_read(64 * 1024)
            except Err as err:
                if isinstance(err.value, streams.StreamError_Closed):
                    return b"".join(chunks)
                with err.value.value as failure:
                    code = types.http_error_code(failure)
                    if code is not None:
                        raise _error_code(method, url, code)
                    raise HttpError(
                        "transport",
                        url,
                        f"request to {url} failed: reading the response body failed after "
                        f"{size} bytes: {failure.to_debug_string()}",
                    )
            chunks.append(chunk)
            size += len(chunk)


def _set(url: str, setter, value, what: str) -> None:
    try:
        setter(value)
    except Err:
        raise HttpError("transport", url, f"request to {url} failed: invalid {what}")


def _first_forbidden(entries: List[Tuple[str, bytes]]) -> str:
    """The name of the first header in `entries` the host refuses on its own."""
    for entry in entries:
        try:
            with types.Fields.from_list([entry]):
                pass
        except Err as err:
            if isinstance(err.value, types.HeaderError_Forbidden):
                return entry[0]
    return "a header"


def _forbidden(url: str, name: str) -> HttpError:
    return HttpError(
        "forbidden-header", url, f"header {name!r} is set by the host, not by providers"
    )


def _error_code(method: str, url: str, code) -> HttpError:
    if isinstance(code, types.ErrorCode_HttpRequestDenied):
        return HttpError(
            "denied", url, f"request {method.upper()} {url} refused: egress denied by the host"
        )
    return HttpError("transport", url, f"request to {url} failed: {code}")


def _parse(url: str):
    """The scheme, authority and path-with-query of an absolute http(s) URL."""
    invalid = HttpError("invalid-url", url, f"invalid URL {url!r}")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise invalid
    if parts.scheme.lower() == "http":
        scheme = types.Scheme_Http()
    elif parts.scheme.lower() == "https":
        scheme = types.Scheme_Https()
    else:
        raise invalid
    if not parts.netloc or "@" in parts.netloc or parts.fragment:
        raise invalid
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return scheme, parts.netloc, path
