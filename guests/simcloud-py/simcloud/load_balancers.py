"""`LoadBalancer`, as the Rust simcloud does it: one simulator load balancer per Service,
named with upstream's `DefaultLoadBalancerName` and looked up by that name within the cluster.
Owns the mapping from a Service and its nodes to listeners, targets (the nodes `targets`
chooses) and source ranges, and from a load balancer to the Service's status."""

from typing import List, Optional

from wasm_ccm_sdk import errors, host
from wasm_ccm_sdk.provider import Nodes
from wit_world.imports import ccm_types

from . import config
from .api import Api
from .targets import node_selector, target_ids

# How long the host waits before asking again about a provisioning load balancer, in s.
PROVISIONING_RETRY = 2.0
# Host-cache key and lifetime (s) of the ids of live instances.
LIVE_IDS = "live-instance-ids"
LIVE_IDS_TTL = 10.0

_PROTOCOLS = {
    ccm_types.Protocol.TCP: "tcp",
    ccm_types.Protocol.UDP: "udp",
    ccm_types.Protocol.SCTP: "sctp",
}
_CONTRACT_PROTOCOLS = {name: protocol for protocol, name in _PROTOCOLS.items()}


def lb_name(svc: ccm_types.Service) -> str:
    """Upstream's `DefaultLoadBalancerName`."""
    return ("a" + svc.uid.replace("-", ""))[:32]


def get_load_balancer(cluster_name: str, svc: ccm_types.Service) -> Optional[ccm_types.LbStatus]:
    lb = Api.load().load_balancer_named(lb_name(svc), cluster_name)
    if lb is None:
        return None
    point = _ingress(lb)
    return ccm_types.LbStatus(ingress=[] if point is None else [point])


def ensure_load_balancer(
    cluster_name: str, svc: ccm_types.Service, nodes: Nodes
) -> ccm_types.LbStatus:
    settings = config.load()
    api = Api(settings.api_url)
    name = lb_name(svc)
    spec = _desired(svc, nodes, settings)
    lb = api.load_balancer_named(name, cluster_name)
    if lb is None:
        spec["targets"] = _live(api, spec["targets"])
        lb = _unless_stale(lambda: _create(api, name, cluster_name, svc, spec))
    elif not _matches(spec, lb):
        spec["targets"] = _live(api, spec["targets"])
        if not _matches(spec, lb):
            lb = _unless_stale(lambda: _update(api, lb, spec))
    return _ready_status(lb)


def update_load_balancer(cluster_name: str, svc: ccm_types.Service, nodes: Nodes) -> None:
    settings = config.load()
    targets = target_ids(nodes, node_selector(svc, settings))
    api = Api(settings.api_url)
    lb = _existing(api, cluster_name, svc)
    if set(targets) == set(lb["targets"]):
        return
    targets = _live(api, targets)
    if set(targets) != set(lb["targets"]):
        _unless_stale(lambda: api.set_targets(lb["id"], targets))
        host.info(f"load balancer {lb['name']} ({lb['id']}) now targets {targets}")


def ensure_load_balancer_deleted(cluster_name: str, svc: ccm_types.Service) -> None:
    api = Api.load()
    name = lb_name(svc)
    lb = api.load_balancer_named(name, cluster_name)
    if lb is None:
        return
    if api.delete_load_balancer(lb["id"]):
        host.info(
            f"deleted load balancer {name} ({lb['id']}) of service {svc.namespace}/{svc.name}"
        )


def _existing(api: Api, cluster: str, svc: ccm_types.Service) -> dict:
    """The load balancer of `svc`; absence is a `not-found` error."""
    name = lb_name(svc)
    lb = api.load_balancer_named(name, cluster)
    if lb is None:
        raise errors.not_found(
            f"load balancer {name} of service {svc.namespace}/{svc.name} does not exist"
        )
    return lb


def _create(api: Api, name: str, cluster: str, svc: ccm_types.Service, spec: dict) -> dict:
    new = {"name": name, "cluster": cluster, "service_uid": svc.uid, **spec}
    lb = api.create_load_balancer(new)
    host.info(f"created load balancer {name} ({lb['id']}) for service {svc.namespace}/{svc.name}")
    return lb


def _update(api: Api, lb: dict, spec: dict) -> dict:
    updated = api.update_load_balancer(lb["id"], spec)
    host.info(f"updated load balancer {lb['name']} ({lb['id']})")
    return updated


def _desired(svc: ccm_types.Service, nodes: Nodes, settings: config.Config) -> dict:
    """What the load balancer of `svc` should look like for `nodes`, in the order of the
    simulator's request body."""
    listeners = [_listener(port) for port in svc.ports]
    return {
        "listeners": listeners,
        "targets": target_ids(nodes, node_selector(svc, settings)),
        "source_ranges": list(svc.load_balancer_source_ranges),
        "proxy_protocol": settings.proxy_protocol,
    }


def _listener(port: ccm_types.ServicePort) -> dict:
    if port.node_port is None:
        name = port.name if port.name is not None else "(unnamed)"
        raise errors.other(f"service port {name} ({port.port}) has no node port")
    return {"port": port.port, "protocol": _PROTOCOLS[port.protocol], "node_port": port.node_port}


def _matches(spec: dict, lb: dict) -> bool:
    """Whether `lb` already has `spec` (order and duplicates aside)."""

    def listeners(items):
        return {(item["port"], item["protocol"], item["node_port"]) for item in items}

    return (
        listeners(spec["listeners"]) == listeners(lb["listeners"])
        and set(spec["targets"]) == set(lb["targets"])
        and set(spec["source_ranges"]) == set(lb["source_ranges"])
        and spec["proxy_protocol"] == lb["proxy_protocol"]
    )


def _live(api: Api, targets: List[str]) -> List[str]:
    """The `targets` whose instances exist, from a listing of live instance ids kept in the
    host cache for a few seconds and fetched again only when a target is not in it."""
    cached = host.cache_get_json(LIVE_IDS)
    if isinstance(cached, list) and all(target in cached for target in targets):
        existing = set(cached)
    else:
        existing = {i["id"] for i in api.instances(None) if i["status"] != "deleted"}
        host.cache_set_json(LIVE_IDS, sorted(existing), LIVE_IDS_TTL)
    live = [target for target in targets if target in existing]
    gone = [target for target in targets if target not in existing]
    if gone:
        host.info(f"not targeting instances that no longer exist: {gone}")
    return live


def _unless_stale(write):
    """A failed write may have named an instance the cached list still had: the next attempt
    lists instances afresh."""
    try:
        return write()
    except BaseException:
        host.cache_delete(LIVE_IDS)
        raise


def _ready_status(lb: dict) -> ccm_types.LbStatus:
    """The status of an active load balancer; a `retry-after` while it is provisioning."""
    point = _ingress(lb)
    if point is None:
        raise errors.retry_after(
            PROVISIONING_RETRY, f"load balancer {lb['name']} is being provisioned"
        )
    return ccm_types.LbStatus(ingress=[point])


def _ingress(lb: dict) -> Optional[ccm_types.LbIngress]:
    """The ingress point of `lb`, once it is active and has an address."""
    ip, hostname = lb.get("ip"), lb.get("hostname")
    if lb["status"] != "active" or (ip is None and hostname is None):
        return None
    mode = ccm_types.IpMode.PROXY if lb["proxy_protocol"] else ccm_types.IpMode.VIP
    return ccm_types.LbIngress(
        ip=ip,
        hostname=hostname,
        # Kubernetes accepts an ip-mode only next to an IP.
        ip_mode=mode if ip is not None else None,
        ports=[
            ccm_types.PortStatus(
                port=listener["port"],
                protocol=_CONTRACT_PROTOCOLS[listener["protocol"]],
                error=None,
            )
            for listener in lb["listeners"]
        ],
    )
