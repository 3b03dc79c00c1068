"""The cloud configuration (`--cloud-config`), as the Rust simcloud reads it: JSON with
`api_url` (required: the simulator's base URL, `http://` or `https://`, optionally with a
path prefix, no query), `proxy_protocol` (a boolean, default false) and
`target_node_label_keys` (the distinct node label keys a Service's target-node-labels
annotation may name, default none). Unknown fields are refused. Parsed by `init`, re-read by
every call."""

import json
import re
from dataclasses import dataclass
from typing import List, Optional

from wasm_ccm_sdk import errors, host

# The field listing the node label keys the target-node-labels annotation may name.
TARGET_NODE_LABEL_KEYS = "target_node_label_keys"

_FIELDS = ("api_url", "proxy_protocol", TARGET_NODE_LABEL_KEYS)

# A label key's name and each dot-separated part of its prefix.
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_PREFIX_PART = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


@dataclass
class Config:
    # Base URL of the simulator, without a trailing slash.
    api_url: str
    # Whether load balancers send the PROXY protocol to their targets.
    proxy_protocol: bool
    # The node label keys a Service's target-node-labels annotation may name: the labels
    # `init` declares in `node-metadata`, so the host passes them (and no other).
    target_node_label_keys: List[str]


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
    return Config(
        api_url=_validated_url(api_url),
        proxy_protocol=proxy_protocol,
        target_node_label_keys=_label_keys(fields.get(TARGET_NODE_LABEL_KEYS)),
    )


def _label_keys(value) -> List[str]:
    """`target_node_label_keys`: a list of distinct Kubernetes label keys, if given."""
    if value is None:
        return []

    def fail(detail: str):
        return errors.other(
            f'simcloud cloud config: "{TARGET_NODE_LABEL_KEYS}" must be a list of node label '
            f'keys such as ["node-role.example.com/lb"]: {detail}'
        )

    if not isinstance(value, list):
        raise fail(f"got {_json(value)}")
    keys: List[str] = []
    for item in value:
        if not isinstance(item, str):
            raise fail(f"{_json(item)} is not a string")
        if not _is_label_key(item):
            raise fail(f"{_json(item)} is not a label key")
        if item in keys:
            raise fail(f"{_json(item)} is listed twice")
        keys.append(item)
    return keys


def _is_label_key(key: str) -> bool:
    """A Kubernetes label key: an optional DNS-subdomain prefix and `/`, then a name of at
    most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit."""
    prefix, slash, name = key.rpartition("/")
    prefix_ok = not slash or (
        len(prefix) <= 253 and all(_PREFIX_PART.fullmatch(part) for part in prefix.split("."))
    )
    return prefix_ok and _LABEL_NAME.fullmatch(name) is not None


def _json(value) -> str:
    """`value` as compact JSON, as the Rust simcloud writes it in a message."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


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
