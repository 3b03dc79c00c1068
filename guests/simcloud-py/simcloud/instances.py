"""`InstancesV2`: find the instance behind a node (by provider ID, else by name) and describe
it. Also owns provider IDs (`simcloud://<instance-id>`) and the instance cache, as the Rust
simcloud does: lookups by id are cached for 5 s under `instance/<id>`, absence never is;
`instance-exists` and `instance-shutdown` always read fresh (refreshing the cache)."""

import json
from typing import Optional

from wasm_ccm_sdk import errors, host
from wit_world.imports import ccm_types

from .api import Api

SCHEME = "simcloud://"
# How long an instance read by id is served from the host cache, in seconds.
CACHE_TTL = 5.0
# Extra node label carrying the instance id.
INSTANCE_ID_LABEL = "simcloud.example/instance-id"

# Whether a lookup may be answered from the host cache.
CACHED = "cached"
FRESH = "fresh"


def instance_id_of(provider_id: str) -> Optional[str]:
    """The instance id inside a simcloud provider ID, or `None` for another scheme or no id."""
    if not provider_id.startswith(SCHEME):
        return None
    instance_id = provider_id[len(SCHEME):].lstrip("/")
    return instance_id or None


def find(node: ccm_types.Node, freshness: str) -> Optional[dict]:
    """The instance behind `node`; `None` only on definite absence."""
    api = Api.load()
    if node.provider_id:
        instance_id = instance_id_of(node.provider_id)
        if instance_id is None:
            raise errors.other(
                f"node {node.name} has provider ID {json.dumps(node.provider_id)}, not a "
                "simcloud:// one"
            )
        return _by_id(api, instance_id, freshness)
    return by_name(api, node.name)


def require(node: ccm_types.Node, freshness: str) -> dict:
    """The instance behind `node`; absence is a `not-found` error."""
    instance = find(node, freshness)
    if instance is None:
        described = node.provider_id if node.provider_id is not None else "no provider ID"
        raise errors.not_found(f"no simcloud instance for node {node.name} ({described})")
    return instance


def _by_id(api: Api, instance_id: str, freshness: str) -> Optional[dict]:
    key = _cache_key(instance_id)
    if freshness == CACHED:
        cached = host.cache_get_json(key)
        if isinstance(cached, dict):
            return cached
    instance = api.instance(instance_id)
    if instance is not None and instance["status"] == "deleted":
        instance = None
    if instance is None:
        host.cache_delete(key)
    else:
        _remember(instance)
    return instance


def by_name(api: Api, name: str) -> Optional[dict]:
    """The live instance named `name`; `None` if there is none."""
    live = [
        instance
        for instance in api.instances(name)
        if instance["name"] == name and instance["status"] != "deleted"
    ]
    if len(live) > 1:
        raise errors.other(f"{len(live)} live instances are named {name}")
    if not live:
        return None
    _remember(live[0])
    return live[0]


def _remember(instance: dict) -> None:
    host.cache_set_json(_cache_key(instance["id"]), instance, CACHE_TTL)


def _cache_key(instance_id: str) -> str:
    return f"instance/{instance_id}"


def metadata(instance: dict) -> ccm_types.InstanceMetadata:
    return ccm_types.InstanceMetadata(
        provider_id=SCHEME + instance["id"],
        instance_type=instance["instance_type"],
        node_addresses=_addresses(instance),
        zone=instance["zone"],
        region=instance["region"],
        additional_labels=[(INSTANCE_ID_LABEL, instance["id"])],
    )


def _addresses(instance: dict):
    """`InternalIP`, `ExternalIP` (v4 then v6) and `Hostname`, skipping empty values."""
    kinds = ccm_types.AddressKind
    candidates = [
        (kinds.INTERNAL_IP, instance.get("private_ip")),
        (kinds.EXTERNAL_IP, instance.get("public_ip")),
        (kinds.EXTERNAL_IP, instance.get("public_ipv6")),
        (kinds.HOSTNAME, instance.get("hostname")),
    ]
    return [ccm_types.NodeAddress(kind, address) for kind, address in candidates if address]
