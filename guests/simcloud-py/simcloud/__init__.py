"""`simcloud` in Python: the reference provider (`guests/simcloud`) ported with the Python
SDK (`guest-sdk-py`), for the bundled cloud simulator (`tests/cloud-sim`). This module owns
the provider's identity (`init` and its capabilities) and the classes componentize-py calls;
each interface lives in its own module.

It reads the same cloud config (`{"api_url": ..., "proxy_protocol": false,
"target_node_label_keys": []}`, see `config.py`) and annotations (see `targets.py`), answers
the same provider IDs (`simcloud://<instance-id>`) and makes the same requests to the
simulator as the Rust simcloud for every function of the `cloud-provider` world (`init`,
instances, load balancers, routes). Load-balancer calls get the nodes lent as a node set
(`cloud-provider-node-sets`), of which it reads the provider IDs, and the names only of
nodes it skips; whole nodes only for a Service choosing its targets by node labels
(`simcloud.wasm-ccm.io/load-balancer-target-node-labels`). It has no build stamp.
"""

from typing import List, Optional

from wasm_ccm_sdk import host, provider
from wasm_ccm_sdk.provider import LoadBalancerNodeSets  # noqa: F401 - exported as it is
from wit_world.imports import ccm_types

from . import config, instances, load_balancers, routes


class Provider(provider.Provider):
    def init(self, raw: Optional[bytes]) -> ccm_types.Capabilities:
        parsed = config.parse(raw)
        host.info(f"simcloud provider (python) for {parsed.api_url}")
        return ccm_types.Capabilities(
            name="simcloud",
            instances=True,
            load_balancer=True,
            routes=True,
            has_cluster_id=True,
            # Nodes are found by provider ID and name; only the labels Services may choose
            # their targets by are read, and no annotation.
            node_metadata=ccm_types.NodeMetadataKeys(
                labels=parsed.target_node_label_keys, annotations=[]
            ),
        )


class Instances(provider.Instances):
    def instance_exists(self, node: ccm_types.Node) -> bool:
        return instances.find(node, instances.FRESH) is not None

    def instance_shutdown(self, node: ccm_types.Node) -> bool:
        return instances.require(node, instances.FRESH)["status"] == "stopped"

    def instance_metadata(self, node: ccm_types.Node) -> ccm_types.InstanceMetadata:
        return instances.metadata(instances.require(node, instances.CACHED))


class LoadBalancer(provider.LoadBalancer):
    def get_load_balancer(
        self, cluster_name: str, svc: ccm_types.Service
    ) -> Optional[ccm_types.LbStatus]:
        return load_balancers.get_load_balancer(cluster_name, svc)

    def ensure_load_balancer(
        self, cluster_name: str, svc: ccm_types.Service, nodes: provider.Nodes
    ) -> ccm_types.LbStatus:
        return load_balancers.ensure_load_balancer(cluster_name, svc, nodes)

    def update_load_balancer(
        self, cluster_name: str, svc: ccm_types.Service, nodes: provider.Nodes
    ) -> None:
        load_balancers.update_load_balancer(cluster_name, svc, nodes)

    def ensure_load_balancer_deleted(self, cluster_name: str, svc: ccm_types.Service) -> None:
        load_balancers.ensure_load_balancer_deleted(cluster_name, svc)


class Routes(provider.Routes):
    def list_routes(self, cluster_name: str) -> List[ccm_types.Route]:
        return routes.list_routes(cluster_name)

    def create_route(self, cluster_name: str, name_hint: str, route: ccm_types.Route) -> None:
        routes.create_route(cluster_name, name_hint, route)

    def delete_route(self, cluster_name: str, route: ccm_types.Route) -> None:
        routes.delete_route(cluster_name, route)
