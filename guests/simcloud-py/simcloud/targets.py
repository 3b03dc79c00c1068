"""Which instances a Service's load balancer targets, as the Rust simcloud's `targets.rs`:
those of every node, or, with the annotation
`simcloud.wasm-ccm.io/load-balancer-target-node-labels` (`key=value,key2`, after AWS's
`service.beta.kubernetes.io/aws-load-balancer-target-node-labels`), those of the nodes with
every label it names.

Without the annotation only the nodes' provider IDs are read (and the names of nodes
skipped); whole nodes (`Nodes.all()`, with the labels `init` declared) only for a Service
with it."""

import json
from typing import List, Optional, Tuple

from componentize_py_types import Err
from wasm_ccm_sdk import errors, host
from wasm_ccm_sdk.provider import Nodes
from wit_world.imports import ccm_types

from .config import TARGET_NODE_LABEL_KEYS, Config
from .instances import instance_id_of

# The Service annotation choosing target nodes by their labels.
TARGET_NODE_LABELS = "simcloud.wasm-ccm.io/load-balancer-target-node-labels"

# The labels a node needs to be a target, as upstream's `filterTargetNodes`: every label,
# with the value where one is given (None: any value).
NodeSelector = List[Tuple[str, Optional[str]]]


def node_selector(svc: ccm_types.Service, settings: Config) -> Optional[NodeSelector]:
    """The selector of `svc`: None without the annotation or with no entry in it (every
    node, as upstream). Each key must be one of the configured `target_node_label_keys`, the
    only labels the host passes this provider; an entry without a key, with two `=`, or a key
    given twice is refused."""
    value = next((v for k, v in svc.annotations if k == TARGET_NODE_LABELS), None)
    if value is None:
        return None
    wanted: NodeSelector = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        key, separator, after = entry.partition("=")
        key = key.strip()
        label_value = after.strip() if separator else None

        def bad(why: str, entry: str = entry) -> Err:
            return _refused(svc, f"entry {json.dumps(entry, ensure_ascii=False)} {why}")

        if not key:
            raise bad("has no label key")
        if label_value is not None and "=" in label_value:
            raise bad("has more than one '=': write key=value or key")
        if any(k == key for k, _ in wanted):
            raise bad("names a label key given before")
        if key not in settings.target_node_label_keys:
            now = ", ".join(
                json.dumps(k, ensure_ascii=False) for k in settings.target_node_label_keys
            )
            raise _refused(
                svc,
                f"names node label {json.dumps(key, ensure_ascii=False)}, which the provider "
                f'does not read: add it to "{TARGET_NODE_LABEL_KEYS}" in the cloud config '
                f"(now [{now}])",
            )
        wanted.append((key, label_value or None))
    return wanted or None


def _matches(selector: NodeSelector, labels: List[Tuple[str, str]]) -> bool:
    """Whether a node with `labels` is a target of `selector`."""
    for key, wanted in selector:
        value = next((v for k, v in labels if k == key), None)
        if value is None or (wanted is not None and wanted != value):
            return False
    return True


def _refused(svc: ccm_types.Service, problem: str) -> Err:
    """A refusal of the Service's annotation, naming the Service and the annotation."""
    return errors.other(f"service {svc.namespace}/{svc.name}: {TARGET_NODE_LABELS} {problem}")


def target_ids(nodes: Nodes, selector: Optional[NodeSelector]) -> List[str]:
    """The instance ids of `nodes` (only those `selector` matches, when there is one), in
    order and without duplicates; nodes without a simcloud provider ID are skipped (and
    logged)."""
    names: Optional[List[str]] = None
    if selector is None:
        # Only the provider IDs (and the names, to report a skipped node).
        provider_ids = nodes.provider_ids()
    else:
        everyone = nodes.all()
        targets = [node for node in everyone if _matches(selector, node.labels)]
        host.info(
            f"{len(targets)} of {len(everyone)} nodes have the labels of {TARGET_NODE_LABELS}"
        )
        provider_ids = [node.provider_id for node in targets]
        names = [node.name for node in targets]
    ids: List[str] = []
    seen = set()
    skipped = []
    for index, provider_id in enumerate(provider_ids):
        instance_id = instance_id_of(provider_id) if provider_id is not None else None
        if instance_id is None:
            skipped.append(index)
        elif instance_id not in seen:
            seen.add(instance_id)
            ids.append(instance_id)
    if skipped:
        if names is None:
            names = nodes.names()
        for index in skipped:
            host.info(
                f"node {names[index]} is not a load-balancer target: provider ID "
                f"{provider_ids[index]!r} is not simcloud://"
            )
    return ids
