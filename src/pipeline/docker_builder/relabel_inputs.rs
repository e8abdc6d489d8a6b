//! What decides a build but its labels (`pipeline::relabel`), read before the Docker build by
//! `relabelled`, and kept with the normalized image (`normalized`) so a later change of labels
//! alone can skip the build. Only the value: it imports nothing of the builder.

use std::collections::BTreeMap;

use crate::pipeline::relabel::{LabelSteps, Parent, Step};

/// What decides a build but its labels, read before the Docker build (`pipeline::relabel`).
pub(super) struct RelabelInputs {
    pub(super) steps: LabelSteps,
    pub(super) build_labels: BTreeMap<String, String>,
    pub(super) parent_config: serde_json::Value,
    pub(super) parent_history: Vec<Step>,
    pub(super) parent_layers: Vec<String>,
    pub(super) epoch: u64,
    pub(super) key: String,
}

impl RelabelInputs {
    pub(super) fn parent(&self) -> Parent<'_> {
        Parent {
            config: &self.parent_config,
            history: &self.parent_history,
            layers: &self.parent_layers,
        }
    }
}
