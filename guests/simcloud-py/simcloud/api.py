"""The simulator's REST API as calls, for what this port implements. It owns URLs,
query encoding, the shape check of the resources the simulator returns, and the one judgement
only a provider can make: a 404 carrying the simulator's `not_found` error body is definite
absence (`None`, `False`); every other failure is an `HttpError` for the caller to propagate."""

import json
from typing import List, Optional
from urllib.parse import quote

from wasm_ccm_sdk import http
from wasm_ccm_sdk.http import HttpError

from . import config

# Fields every instance carries, as strings.
_REQUIRED = ("id", "name", "instance_type", "zone", "region", "status", "private_ip")
_OPTIONAL = ("public_ip", "public_ipv6", "hostname")
# Fields every route carries, as strings.
_ROUTE_REQUIRED = ("id", "name", "destination_cidr", "target_instance")


class Api:
    """A client for one simulator."""

    def __init__(self, base: str):
        self.base = base

    @staticmethod
    def load() -> "Api":
        """A client for the simulator of this provider version's configuration."""
        return Api(config.load().api_url)

    def _url(self, path: str) -> str:
        return f"{self.base}/v1/{path}"

    def instance(self, instance_id: str) -> Optional[dict]:
        """`GET /v1/instances/{id}`; `None` if the id is unknown (deleted instances are
        returned)."""
        response = http.get(self._url(f"instances/{_encode(instance_id)}"))
        if _is_not_found(response):
            return None
        return _instance(response.url, response.json())

    def instances(self, name: Optional[str]) -> List[dict]:
        """`GET /v1/instances[?name=NAME]`: the live instances, all or those named `name`."""
        query = "" if name is None else f"?name={_encode(name)}"
        response = http.get(self._url(f"instances{query}"))
        listing = response.json()
        items = listing.get("instances") if isinstance(listing, dict) else None
        if not isinstance(items, list):
            raise HttpError(
                "decode", response.url, f"unexpected response from {response.url}: no instance list"
            )
        return [_instance(response.url, item) for item in items]

    def load_balancer_named(self, name: str, cluster: str) -> Optional[dict]:
        """The load balancer named `name` in `cluster`, if any."""
        path = f"load-balancers?name={_encode(name)}&cluster={_encode(cluster)}"
        response = http.get(self._url(path))
        listing = response.json()
        items = listing.get("load_balancers") if isinstance(listing, dict) else None
        if not isinstance(items, list):
            raise HttpError(
                "decode",
                response.url,
                f"unexpected response from {response.url}: no load balancer list",
            )
        found = [_load_balancer(response.url, item) for item in items]
        return next((lb for lb in found if lb["name"] == name), None)

    def create_load_balancer(self, new: dict) -> dict:
        """`POST /v1/load-balancers`: the new load balancer, still provisioning."""
        response = http.post_json(self._url("load-balancers"), new)
        return _load_balancer(response.url, response.json())

    def update_load_balancer(self, lb_id: str, spec: dict) -> dict:
        """`PUT /v1/load-balancers/{id}`: replace listeners, targets, source ranges and
        protocol."""
        response = http.put_json(self._url(f"load-balancers/{_encode(lb_id)}"), spec)
        return _load_balancer(response.url, response.json())

    def set_targets(self, lb_id: str, targets: List[str]) -> dict:
        """`PUT /v1/load-balancers/{id}/targets`."""
        url = self._url(f"load-balancers/{_encode(lb_id)}/targets")
        response = http.put_json(url, {"targets": targets})
        return _load_balancer(response.url, response.json())

    def delete_load_balancer(self, lb_id: str) -> bool:
        """`DELETE /v1/load-balancers/{id}`: true if deleted now, false if already gone."""
        response = http.delete(self._url(f"load-balancers/{_encode(lb_id)}"))
        if _is_not_found(response):
            return False
        response.success()
        return True

    def routes(self, cluster: str) -> List[dict]:
        """`GET /v1/routes?cluster=C`: the routes of `cluster`."""
        response = http.get(self._url(f"routes?cluster={_encode(cluster)}"))
        listing = response.json()
        items = listing.get("routes") if isinstance(listing, dict) else None
        if not isinstance(items, list):
            raise HttpError(
                "decode", response.url, f"unexpected response from {response.url}: no route list"
            )
        return [_route(response.url, item) for item in items]

    def create_route(self, new: dict) -> dict:
        """`POST /v1/routes`; a 409 means the cluster already routes the CIDR."""
        response = http.post_json(self._url("routes"), new)
        return _route(response.url, response.json())

    def delete_route(self, route_id: str) -> bool:
        """`DELETE /v1/routes/{id}`: true if deleted now, false if already gone."""
        response = http.delete(self._url(f"routes/{_encode(route_id)}"))
        if _is_not_found(response):
            return False
        response.success()
        return True



def _wrong(url: str, what: str) -> HttpError:
    """A decode error: the answer from `url` is not what the simulator sends, `what` says how."""
    return HttpError("decode", url, f"unexpected response from {url}: {what}")

def _instance(url: str, value) -> dict:
    """`value` if it is an instance as the simulator describes one, else a decode error
    naming the first field that is wrong."""

    if not isinstance(value, dict):
        raise _wrong(url, "an instance is not a JSON object")
    for field in _REQUIRED:
        if not isinstance(value.get(field), str):
            raise _wrong(url, f"instance field {field!r} is missing or not a string")
    for field in _OPTIONAL:
        if value.get(field) is not None and not isinstance(value[field], str):
            raise _wrong(url, f"instance field {field!r} is not a string")
    return value


def _load_balancer(url: str, value) -> dict:
    """`value` as a load balancer (absent optional fields filled in), else a decode error
    naming the first field that is wrong."""

    if not isinstance(value, dict):
        raise _wrong(url, "a load balancer is not a JSON object")
    for field in ("id", "name"):
        if not isinstance(value.get(field), str):
            raise _wrong(url, f"load balancer field {field!r} is missing or not a string")
    if value.get("status") not in ("provisioning", "active"):
        raise _wrong(url, f"load balancer status {value.get('status')!r} is unknown")
    for field in ("ip", "hostname"):
        if value.get(field) is not None and not isinstance(value[field], str):
            raise _wrong(url, f"load balancer field {field!r} is not a string")
    lb = dict(value)
    lb.setdefault("proxy_protocol", False)
    if not isinstance(lb["proxy_protocol"], bool):
        raise _wrong(url, "load balancer field 'proxy_protocol' is not a boolean")
    for field in ("listeners", "targets", "source_ranges"):
        if lb.get(field) is None:
            lb[field] = []
        if not isinstance(lb[field], list):
            raise _wrong(url, f"load balancer field {field!r} is not a list")
    for field in ("targets", "source_ranges"):
        if not all(isinstance(item, str) for item in lb[field]):
            raise _wrong(url, f"load balancer field {field!r} holds a non-string")
    for listener in lb["listeners"]:
        if (
            not isinstance(listener, dict)
            or not _is_int(listener.get("port"))
            or not _is_int(listener.get("node_port"))
            or listener.get("protocol") not in ("tcp", "udp", "sctp")
        ):
            raise _wrong(
                url, f"load balancer listener {listener!r} is not a port, protocol and node port"
            )
    return lb


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _route(url: str, value) -> dict:
    """`value` if it is a route as the simulator describes one, else a decode error naming
    the first field that is wrong."""
    if not isinstance(value, dict):
        raise _wrong(url, "a route is not an object")
    for field in _ROUTE_REQUIRED:
        if not isinstance(value.get(field), str):
            raise _wrong(url, f"route field {field!r} is missing or not a string")
    if not isinstance(value.get("blackhole", False), bool):
        raise _wrong(url, "route field 'blackhole' is not a boolean")
    return value


def _is_not_found(response: http.Response) -> bool:
    """A 404 with the simulator's own `not_found` error body. A bare 404 (a proxy, a wrong
    `api_url`) is not proof that a resource is gone."""
    if response.status != 404:
        return False
    try:
        body = json.loads(response.body.decode("utf-8"))
        return body["error"]["code"] == "not_found"
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        return False


def _encode(value: str) -> str:
    """Percent-encode `value` for a path segment or query value (RFC 3986 unreserved kept)."""
    return quote(value, safe="-._~")
