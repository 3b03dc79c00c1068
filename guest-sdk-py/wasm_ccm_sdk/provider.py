"""Base classes for the interfaces a provider exports (`cloud-provider-node-sets` world). Every
function answers `not-implemented` until a subclass overrides it, and an overriding
function that raises anything but the contract's `Err` answers `other` with the exception
named (see `errors.from_exception`) instead of trapping.

A provider module defines classes named `Provider`, `Instances`, `LoadBalancer` and
`Routes` that subclass these, and re-exports `LoadBalancerNodeSets` from here;
componentize-py calls their methods. The load-balancer nodes reach `ensure_load_balancer`
and `update_load_balancer` as `Nodes`: lent by the host as a node set (the provider copies
only the fields it reads), or, from a host without node sets, as a list.
"""

import functools
from typing import List, Optional

from wit_world import exports
from wit_world.imports import ccm_types, node_sets

from . import errors

# The functions whose result carries a `provider-error`; the others cannot fail.
_FALLIBLE = frozenset(
    {
        "init",
        "instance_exists",
        "instance_shutdown",
        "instance_metadata",
        "get_load_balancer",
        "ensure_load_balancer",
        "update_load_balancer",
        "ensure_load_balancer_deleted",
        "list_routes",
        "create_route",
        "delete_route",
    }
)


class Nodes:
    """The nodes a load balancer should send traffic to, in node-name order. Read the field
    you need: `names()`, `provider_ids()`, or `all()` for whole nodes (labels and annotations
    as `init` declares them), each a list in that order. Lent by the host for one call: keep
    what you read, never the `Nodes`."""

    # Whole nodes read from a node set per host call (as the Rust SDK).
    BATCH = 1024

    def __init__(self, lent: Optional[node_sets.NodeSet] = None, listed=None):
        self._lent = lent
        self._listed = listed

    def __len__(self) -> int:
        return len(self._listed) if self._lent is None else self._lent.len()

    def names(self) -> List[str]:
        if self._lent is None:
            return [node.name for node in self._listed]
        return self._lent.names()

    def provider_ids(self) -> List[Optional[str]]:
        if self._lent is None:
            return [node.provider_id for node in self._listed]
        return self._lent.provider_ids()

    def all(self) -> List[ccm_types.Node]:
        if self._lent is None:
            return list(self._listed)
        nodes: List[ccm_types.Node] = []
        total = self._lent.len()
        while len(nodes) < total:
            batch = self._lent.nodes(len(nodes), self.BATCH)
            if not batch:
                break
            nodes.extend(batch)
        return nodes


# The functions that take load-balancer nodes as their fourth argument (after self).
_TAKE_NODES = frozenset({"ensure_load_balancer", "update_load_balancer"})


def _contained(name: str, function):
    @functools.wraps(function)
    def call(*args, **kwargs):
        if name in _TAKE_NODES and len(args) == 4 and isinstance(args[3], list):
            # From the plain `load-balancer` export: the host passed a list.
            args = (*args[:3], Nodes(listed=args[3]))
        try:
            return function(*args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - every failure becomes a contract error
            raise errors.from_exception(name, err) from None

    call.__wasm_ccm_contained__ = True
    return call


class _Contained:
    """Wraps the fallible contract functions a subclass defines (see the module doc)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in _FALLIBLE:
            function = cls.__dict__.get(name)
            if callable(function) and not getattr(function, "__wasm_ccm_contained__", False):
                setattr(cls, name, _contained(name, function))


class Provider(_Contained, exports.Provider):
    """`provider`: set-up and capabilities."""

    def init(self, config: Optional[bytes]) -> ccm_types.Capabilities:
        raise errors.not_implemented()


class Instances(_Contained, exports.Instances):
    """`instances`: `cloudprovider.InstancesV2`."""

    def instance_exists(self, node: ccm_types.Node) -> bool:
        raise errors.not_implemented()

    def instance_shutdown(self, node: ccm_types.Node) -> bool:
        raise errors.not_implemented()

    def instance_metadata(self, node: ccm_types.Node) -> ccm_types.InstanceMetadata:
        raise errors.not_implemented()


# The provider's `LoadBalancer` subclass, which `LoadBalancerNodeSets` calls.
_load_balancer: Optional[type] = None


class LoadBalancer(_Contained, exports.LoadBalancer):
    """`load-balancer`: `cloudprovider.LoadBalancer`."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        global _load_balancer
        _load_balancer = cls

    def get_load_balancer(
        self, cluster_name: str, svc: ccm_types.Service
    ) -> Optional[ccm_types.LbStatus]:
        raise errors.not_implemented()

    def get_load_balancer_name(self, cluster_name: str, svc: ccm_types.Service) -> str:
        """Upstream's `DefaultLoadBalancerName`: "a" + the Service UID without dashes, cut
        to 32 characters."""
        return ("a" + svc.uid.replace("-", ""))[:32]

    def ensure_load_balancer(
        self, cluster_name: str, svc: ccm_types.Service, nodes: Nodes
    ) -> ccm_types.LbStatus:
        raise errors.not_implemented()

    def update_load_balancer(
        self, cluster_name: str, svc: ccm_types.Service, nodes: Nodes
    ) -> None:
        raise errors.not_implemented()

    def ensure_load_balancer_deleted(self, cluster_name: str, svc: ccm_types.Service) -> None:
        raise errors.not_implemented()


class Routes(_Contained, exports.Routes):
    """`routes`: `cloudprovider.Routes`."""

    def list_routes(self, cluster_name: str) -> List[ccm_types.Route]:
        raise errors.not_implemented()

    def create_route(self, cluster_name: str, name_hint: str, route: ccm_types.Route) -> None:
        raise errors.not_implemented()

    def delete_route(self, cluster_name: str, route: ccm_types.Route) -> None:
        raise errors.not_implemented()


class LoadBalancerNodeSets(exports.LoadBalancerNodeSets):
    """`load-balancer-node-sets`: the node-carrying calls with the nodes lent as a node set,
    passed on to the provider's `LoadBalancer` as `Nodes`. A provider re-exports this class
    as it is; without a `LoadBalancer` subclass the calls answer `not-implemented`."""

    def ensure_load_balancer(
        self, cluster_name: str, svc: ccm_types.Service, nodes: node_sets.NodeSet
    ) -> ccm_types.LbStatus:
        return self._balancer().ensure_load_balancer(cluster_name, svc, Nodes(lent=nodes))

    def update_load_balancer(
        self, cluster_name: str, svc: ccm_types.Service, nodes: node_sets.NodeSet
    ) -> None:
        self._balancer().update_load_balancer(cluster_name, svc, Nodes(lent=nodes))

    @staticmethod
    def _balancer() -> LoadBalancer:
        if _load_balancer is None:
            raise errors.not_implemented()
        return _load_balancer()
