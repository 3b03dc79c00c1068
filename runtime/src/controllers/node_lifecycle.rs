//! cloud-node-lifecycle: every `--node-monitor-period`, looks at nodes that are not Ready and
//! asks the provider about their instances: a node whose instance is definitely gone
//! (`instance-exists` answered `false`) is deleted; one whose instance is shut down gets
//! the `node.cloudprovider.kubernetes.io/shutdown` taint, removed again once it is Ready.
//! Only this provider's nodes are looked at ([`crate::controllers::fleet::Scope::owns`]).
//!
//! A node is never deleted on an error, whatever its kind: a provider that traps, times out,
//! is denied egress, or answers `not-found` *as an error* has not said the instance is gone.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use tokio_util::sync::CancellationToken;

use super::events::EventSink;
use super::views::node_view;
use super::{
    Context, Controller, SyncError, conflict_pause, every_period, has_taint, is_conflict,
    is_not_found, name_of, taints,
};

pub const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";

pub async fn run(context: Arc<Context>, stop: CancellationToken) {
    let events = context.events(Controller::CloudNodeLifecycle);
    let period = context.settings.node_monitor_period;
    every_period(&context, period, &stop, || {
        monitor_nodes(&context, &events, &stop)
    })
    .await;
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|ready| ready.status == "True")
}

/// One pass over every node. A pass after a mass instance loss deletes many nodes, each
/// waiting for a token of this controller's budget, so it ends early once `stop` is
/// cancelled (leadership lost): the node in hand is finished, the rest left to the next
/// leader.
async fn monitor_nodes(context: &Context, events: &EventSink, stop: &CancellationToken) {
    for node in context.nodes.store().state() {
        if stop.is_cancelled() {
            return;
        }
        if !context.scope.owns(&node) {
            continue;
        }
        let name = name_of(&node).to_string();
        if let Err(error) = monitor_node(context, events, &node).await {
            tracing::warn!(node = %name, %error, "checking the node's instance failed; the node is left as it is");
        }
    }
}

async fn monitor_node(context: &Context, events: &EventSink, node: &Node) -> Result<(), SyncError> {
    if is_ready(node) {
        if has_taint(node, SHUTDOWN_TAINT) {
            patch_taints(context, node, |taints| {
                taints.retain(|t| t.key != SHUTDOWN_TAINT)
            })
            .await?;
        }
        return Ok(());
    }
    let view = node_view(node);
    let provider = context.provider.current();
    if !provider.instance_exists(&view).await? {
        delete_node(context, events, node).await;
        return Ok(());
    }
    let shutdown = match provider.instance_shutdown(&view).await {
        Ok(shutdown) => shutdown,
        Err(error) if error.is_not_implemented() => false,
        Err(error) => return Err(error.into()),
    };
    if shutdown && !has_taint(node, SHUTDOWN_TAINT) {
        patch_taints(context, node, |taints| {
            taints.push(Taint {
                key: SHUTDOWN_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            })
        })
        .await?;
        tracing::info!(node = %name_of(node), "instance is shut down; tainted the node");
    }
    Ok(())
}

async fn delete_node(context: &Context, events: &EventSink, node: &Node) {
    let name = name_of(node);
    // The cache's copy now, not the pass's: a node given to another provider while its
    // instance was looked up is that provider's to judge.
    if context
        .nodes
        .get(name)
        .is_some_and(|now| !context.scope.owns(&now))
    {
        return;
    }
    let reference = node.object_ref(&());
    events.normal(
        reference.clone(),
        "DeletingNode",
        format!("Deleting node {name} because it does not exist in the cloud provider"),
    );
    // The UID precondition keeps a node re-registered under the same name safe.
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: node.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match Api::<Node>::all(context.client(Controller::CloudNodeLifecycle).clone())
        .delete(name, &params)
        .await
    {
        Ok(_) => tracing::info!(node = %name, "deleted node: its instance no longer exists"),
        Err(error) if is_not_found(&error) => {}
        Err(error) => {
            tracing::warn!(node = %name, %error, "deleting node failed");
            events.warning(
                reference,
                "DeletingNodeFailed",
                format!("Error deleting node {name}: {error}"),
            );
        }
    }
}

/// Replace the node's taints (the list has no merge key, so the whole list is sent), guarded
/// by resourceVersion and retried on conflict as upstream's `PatchNodeTaints`.
async fn patch_taints(
    context: &Context,
    node: &Node,
    change: impl Fn(&mut Vec<Taint>),
) -> Result<(), SyncError> {
    let api: Api<Node> = Api::all(context.client(Controller::CloudNodeLifecycle).clone());
    let name = name_of(node).to_string();
    let mut current = node.clone();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut wanted = taints(&current).to_vec();
        change(&mut wanted);
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": current.metadata.resource_version },
            "spec": { "taints": wanted },
        });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(error) if is_conflict(&error) && attempt < 5 => {
                conflict_pause(Duration::from_millis(100)).await;
                current = api
                    .get(&name)
                    .await
                    .map_err(SyncError::kube(format!("reading node {name}")))?;
            }
            Err(error) => {
                return Err(SyncError::kube(format!("patching taints of node {name}"))(
                    error,
                ));
            }
        }
    }
}
