//! Metric families whose every series belongs to one provider version, so that all of a
//! version's series go when it is unloaded. prometheus-client's `Family` removes one label
//! set at a time and cannot list them; a [`VersionFamily`] keeps the label sets it made, by
//! version, and [`VersionFamily::remove_version`] removes them all.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Labels that name a provider version.
pub trait VersionLabel {
    /// The `version` label: `sha256:` and the first 12 hex digits of the digest.
    fn version(&self) -> &str;
}

/// A `Family` of one metric per label set, removable by provider version.
pub struct VersionFamily<L, M, C = fn() -> M> {
    family: Family<L, M, C>,
    /// The label sets made, by version.
    made: Arc<Mutex<HashMap<String, HashSet<L>>>>,
}

impl<L, M, C: Clone> Clone for VersionFamily<L, M, C> {
    fn clone(&self) -> Self {
        VersionFamily {
            family: self.family.clone(),
            made: self.made.clone(),
        }
    }
}

impl<L: std::fmt::Debug, M: std::fmt::Debug, C> std::fmt::Debug for VersionFamily<L, M, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.family.fmt(f)
    }
}

impl<L: Clone + Hash + Eq, M: Default> Default for VersionFamily<L, M> {
    fn default() -> Self {
        VersionFamily {
            family: Family::default(),
            made: Arc::default(),
        }
    }
}

impl<L: Clone + Hash + Eq + VersionLabel, M, C: MetricConstructor<M>> VersionFamily<L, M, C> {
    /// A family whose metrics `constructor` makes (a histogram's buckets).
    pub fn new_with_constructor(constructor: C) -> Self {
        VersionFamily {
            family: Family::new_with_constructor(constructor),
            made: Arc::default(),
        }
    }

    /// The metric of `labels`, made on first use.
    pub fn get_or_create(&self, labels: &L) -> impl Deref<Target = M> + '_ {
        if let Some(metric) = self.family.get(labels) {
            return metric;
        }
        self.made
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(labels.version().to_string())
            .or_default()
            .insert(labels.clone());
        self.family.get_or_create(labels)
    }

    /// Remove every series of `version`.
    pub fn remove_version(&self, version: &str) {
        let made = self
            .made
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(version);
        for labels in made.into_iter().flatten() {
            self.family.remove(&labels);
        }
    }
}

impl<L, M: TypedMetric, C> TypedMetric for VersionFamily<L, M, C> {
    const TYPE: MetricType = <M as TypedMetric>::TYPE;
}

impl<L, M, C> EncodeMetric for VersionFamily<L, M, C>
where
    L: Clone + Hash + Eq + EncodeLabelSet,
    M: EncodeMetric + TypedMetric,
    C: MetricConstructor<M>,
{
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.family.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.family.metric_type()
    }

    fn is_empty(&self) -> bool {
        EncodeMetric::is_empty(&self.family)
    }
}
