"""Base classes for the interfaces a provider exports (`cloud-provider` world). Every
function answers `not-implemented` until a subclass overrides it, and an overriding
function that raises anything but the contract's `Err` answers `other` with the exception
named (see `errors.from_exception`) instead of trapping.

A provider module defines classes named `Provider`, `Instances`, `LoadBalancer` and
`Routes` that subclass these; componentize-py calls their methods.
"""

import functools
from typing import List, Optional

from wit_world import exports
from wit_world.imports import ccm_types

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


def _contained(name: str, function):
    @functools.wraps(function)
    def call(*args, **kwargs):
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


class LoadBalancer(_Contained, exports.LoadBalancer):
    """`load-balancer`: `cloudprovider.LoadBalancer`."""

    def get_load_balancer(
        self, cluster_name: str, svc: ccm_types.Service
    ) -> Optional[ccm_types.LbStatus]:
        raise errors.not_implemented()

    def get_load_balancer_name(self, cluster_name: str, svc: ccm_types.Service) -> str:
        """Upstream's `DefaultLoadBalancerName`: "a" + the Service UID without dashes, cut
        to 32 characters."""
        return ("a" + svc.uid.replace("-", ""))[:32]

    def ensure_load_balancer(
        self, cluster_name: str, svc: ccm_types.Service, nodes: List[ccm_types.Node]
    ) -> ccm_types.LbStatus:
        raise errors.not_implemented()

    def update_load_balancer(
        self, cluster_name: str, svc: ccm_types.Service, nodes: List[ccm_types.Node]
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
