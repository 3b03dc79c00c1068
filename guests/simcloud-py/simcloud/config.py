"""The cloud configuration (`--cloud-config`), as the Rust simcloud reads it: JSON with
`api_url` (required: the simulator's base URL, `http://` or `https://`, optionally with a
path prefix, no query) and `proxy_protocol` (a boolean, default false). Unknown fields are
refused. Parsed by `init`, re-read by every call."""

import json
from dataclasses import dataclass
from typing import Optional

from wasm_ccm_sdk import errors, host

_FIELDS = ("api_url", "proxy_protocol")


@dataclass
class Config:
    # Base URL of the simulator, without a trailing slash.
    api_url: str
    # Whether load balancers send the PROXY protocol to their targets.
    proxy_protocol: bool


def load() -> Config:
    """The configuration given to this provider version."""
    return parse(host.cloud_config())


def parse(raw: Optional[bytes]) -> Config:
    """Parse and validate configuration bytes; no configuration at all lacks `api_url`."""
    fields = host.parse_json_config(raw)
    for name in fields:
        if name not in _FIELDS:
            raise errors.other(
                f"invalid cloud config: unknown field {json.dumps(name)}, expected one of "
                + ", ".join(repr(field) for field in _FIELDS)
            )
    api_url = fields.get("api_url")
    if api_url is None:
        raise errors.other('simcloud cloud config: "api_url" is required (set --cloud-config)')
    if not isinstance(api_url, str):
        raise errors.other(
            f'simcloud cloud config: "api_url" must be a string, got {type(api_url).__name__}'
        )
    proxy_protocol = fields.get("proxy_protocol", False)
    if not isinstance(proxy_protocol, bool):
        raise errors.other(
            'simcloud cloud config: "proxy_protocol" must be true or false, got '
            f"{proxy_protocol!r}"
        )
    return Config(api_url=_validated_url(api_url), proxy_protocol=proxy_protocol)


def _validated_url(url: str) -> str:
    """`url` without trailing slashes if it is an absolute `http(s)://host[...]` URL."""
    invalid = errors.other(
        'simcloud cloud config: "api_url" must be an http:// or https:// URL without query, '
        f"got {url!r}"
    )
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise invalid
    if not rest or rest.startswith("/") or any(c in rest for c in "?#@"):
        raise invalid
    return url.rstrip("/")
