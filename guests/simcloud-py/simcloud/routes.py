"""`Routes`: pod-CIDR routes in the simulator's network, owned per cluster, as the Rust
simcloud makes them. Owns route naming (`<cluster>-<node-uid>-<sanitised cidr>`) and the
mapping between simulator routes (which target instance ids) and contract routes (which target
node names)."""

from typing import List

from wasm_ccm_sdk import errors, host
from wasm_ccm_sdk.http import HttpError
from wit_world.imports import ccm_types

from . import instances
from .api import Api


def list_routes(cluster_name: str) -> List[ccm_types.Route]:
    api = Api.load()
    routes = api.routes(cluster_name)
    # Names of the live instances by id: one listing instead of one lookup per route.
    names = {instance["id"]: instance["name"] for instance in api.instances(None)}
    return [_contract_route(route, names) for route in routes]


def create_route(cluster_name: str, name_hint: str, route: ccm_types.Route) -> None:
    api = Api.load()
    instance = instances.by_name(api, route.target_node)
    if instance is None:
        raise errors.not_found(f"no simcloud instance named {route.target_node}")
    name = _route_name(cluster_name, name_hint, route.destination_cidr)
    new = {
        "name": name,
        "cluster": cluster_name,
        "destination_cidr": route.destination_cidr,
        "target_instance": instance["id"],
    }
    try:
        created = api.create_route(new)
    except HttpError as err:
        if err.status != 409:
            raise
        _already_routed(api, new, err)
        return
    host.info(
        f"created route {name} ({created['id']}): {created['destination_cidr']} via "
        f"{route.target_node} ({instance['id']})"
    )


def delete_route(cluster_name: str, route: ccm_types.Route) -> None:
    api = Api.load()
    existing = _find(api.routes(cluster_name), route)
    if existing is None:
        return
    if api.delete_route(existing["id"]):
        host.info(
            f"deleted route {existing['id']} ({existing['destination_cidr']}) of cluster "
            f"{cluster_name}"
        )


def _route_name(cluster: str, name_hint: str, cidr: str) -> str:
    """`<cluster>-<name_hint>-<cidr>` with every non-alphanumeric character of the CIDR as
    `-`."""
    sanitised = "".join(c if c.isascii() and c.isalnum() else "-" for c in cidr)
    return f"{cluster}-{name_hint}-{sanitised}"


def _contract_route(route: dict, names: dict) -> ccm_types.Route:
    """The contract view of `route`; a route to a gone instance targets the instance id."""
    return ccm_types.Route(
        name=route["id"],
        target_node=names.get(route["target_instance"], route["target_instance"]),
        enable_node_addresses=False,
        target_node_addresses=[],
        destination_cidr=route["destination_cidr"],
        blackhole=route.get("blackhole", False),
    )


def _find(routes: List[dict], route: ccm_types.Route):
    """The simulator route `route` stands for: by id (its name from `list-routes`) or the
    simulator's name; a route without a name by destination CIDR."""
    for existing in routes:
        if route.name == "":
            if existing["destination_cidr"] == route.destination_cidr:
                return existing
        elif existing["id"] == route.name or existing["name"] == route.name:
            return existing
    return None


def _already_routed(api: Api, new: dict, conflict: HttpError) -> None:
    """A 409 on create: fine if the existing route for the CIDR targets the same instance."""
    existing = next(
        (r for r in api.routes(new["cluster"]) if r["destination_cidr"] == new["destination_cidr"]),
        None,
    )
    if existing is None:
        raise conflict
    if existing["target_instance"] != new["target_instance"]:
        raise errors.other(
            f"cluster {new['cluster']} already routes {new['destination_cidr']} to "
            f"{existing['target_instance']}, not {new['target_instance']}"
        )
