//! `aws`: the wasm-ccm provider for Amazon Web Services (EC2 instances, network load balancers, VPC routes), after
//! `kubernetes/cloud-provider-aws`. This file owns the provider's identity (`init` and its
//! capabilities) and the component export; each contract interface lives in its own module.
//!
//! The provider holds no AWS keys. It sends Query API requests (form `POST`s) to the
//! endpoints of its configuration; the host's egress gate signs them (SigV4) with keys the
//! provider never sees.
//!
//! # Cloud config
//!
//! `--cloud-config` is JSON:
//!
//! ```json
//! {"region": "us-east-1", "cluster_id": "prod", "vpc_id": "vpc-0abc",
//!  "route_table_id": "rtb-0abc",
//!  "target_node_label_keys": ["node-role.example.com/lb"],
//!  "endpoints": {"ec2": "https://vpce-….ec2.us-east-1.vpce.amazonaws.com",
//!                "elasticloadbalancing": "https://…"}}
//! ```
//!
//! - `region` (required): the region every request goes to.
//! - `cluster_id` (required): the cluster's resources carry the tag
//!   `kubernetes.io/cluster/<cluster_id>`.
//! - `vpc_id`: the cluster's VPC.
//! - `route_table_id`: the route table for pod routes; without it, the one table carrying
//!   the cluster tag (in `vpc_id`, when set).
//! - `endpoints`: where each service's requests go instead of `https://SERVICE.REGION.amazonaws.com`
//!   (`.amazonaws.com.cn` in `cn-` regions): a VPC endpoint, a test server.
//! - `target_node_label_keys`: the node label keys a Service's
//!   `service.beta.kubernetes.io/aws-load-balancer-target-node-labels` may name. `init`
//!   declares them in `capabilities.node-metadata`, so the host passes these labels and no
//!   other (none without the field: the cheapest calls); a Service naming another key is
//!   refused, naming this field.
//!
//! Unknown fields are refused; every error names the field.

mod config;
mod ec2;
mod elbv2;
mod instances;
mod load_balancers;
mod query;
mod routes;
mod security_groups;
mod spec;
mod subnets;
mod xml;

use wasm_ccm_sdk::{Capabilities, Error, NodeMetadataKeys, export_provider};

use crate::config::Config;
use crate::query::Aws;

/// The provider: every contract interface is implemented on this type.
struct AwsProvider;

/// This provider version's configuration and a client for its endpoints.
fn load() -> Result<(Config, Aws), Error> {
    let config = Config::load()?;
    let aws = Aws::new(&config);
    Ok((config, aws))
}

impl wasm_ccm_sdk::Provider for AwsProvider {
    fn init(config: Option<Vec<u8>>) -> Result<Capabilities, Error> {
        let config = Config::parse(config)?;
        wasm_ccm_sdk::info!(
            "aws provider for cluster {} in {} (EC2 at {}, ELBv2 at {})",
            config.cluster_id,
            config.region,
            config.ec2_endpoint,
            config.elbv2_endpoint
        );
        Ok(Capabilities {
            name: "aws".into(),
            instances: true,
            load_balancer: true,
            routes: true,
            has_cluster_id: true,
            // Nodes are found by provider ID and name; only the labels Services may choose
            // their targets by are read, and no annotation.
            node_metadata: Some(NodeMetadataKeys {
                labels: config.target_node_label_keys,
                annotations: vec![],
            }),
        })
    }
}

export_provider!(AwsProvider);
