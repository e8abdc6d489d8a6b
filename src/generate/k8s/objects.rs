//! The Kubernetes API objects `imagegen k8s` emits, as the `k8s-openapi` crate types them (a
//! `batch/v1` Job with its pod template, and a `v1` Service), so fields, enums and defaults cannot
//! drift from Kubernetes. This module re-exports the types the generator uses, holds the set of
//! documents of one run ([`Manifests`]) and turns it into YAML and back.
//!
//! The API version: `k8s-openapi` is built with its `v1_33` feature, Kubernetes 1.33, where the
//! NVIDIA GPU Operator's supported range starts. Its platform-support page for GPU Operator 26.7,
//! the supported release (26.3.x is deprecated),
//! <https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html#supported-operating-systems-and-kubernetes-platforms>
//! (source `gpu-operator/platform-support.rst` in NVIDIA/cloud-native-docs at 52dcb7b8), lists
//! Kubernetes 1.33–1.36 for every operating system, with one cell left at 1.32 (upstream
//! Kubernetes on Ubuntu 24.04; 26.3 started at 1.32 everywhere). Every field emitted here is GA
//! since 1.24 (Indexed Jobs) or earlier, so the objects also apply on that 1.32.
//!
//! `k8s-openapi` serializes fields in its own order (`apiVersion`, `kind`, then alphabetical),
//! skips every unset optional field, and its maps are `BTreeMap`s: the YAML is deterministic.
//! Its deserializers ignore unknown fields, so [`Manifests::from_yaml`] re-serializes what it read
//! and refuses any document that does not come back the same: a misspelt field is an error, not
//! silently dropped.

use std::collections::BTreeMap;

pub use k8s_openapi::api::batch::v1::{Job, JobSpec};
pub use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, NodeAffinity,
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector, PodSpec,
    PodTemplateSpec, ResourceRequirements, Service, ServicePort, ServiceSpec, Toleration, Volume,
    VolumeMount,
};
pub(crate) use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
pub(crate) use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_yaml::Value;

/// The documents for one run: the headless Service (multi-node only) and the Job.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifests {
    pub service: Option<Service>,
    pub(crate) job: Job,
}

/// Why YAML could not be read back as the documents `imagegen k8s` emits.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReadBackError {
    #[error("document {index}: {message}")]
    Malformed { index: usize, message: String },
    #[error("document {index} is a {kind}, expected {expected}")]
    UnexpectedKind {
        index: usize,
        kind: String,
        expected: &'static str,
    },
    #[error("document {index} ({kind}): {path} is not read back as written (a field the Kubernetes API does not have, or a value of the wrong type)")]
    NotRoundTripped {
        index: usize,
        kind: &'static str,
        path: String,
    },
    #[error("expected a Job, or a Service and a Job; found {count} documents")]
    DocumentCount { count: usize },
}

impl Manifests {
    /// Deterministic multi-document YAML (the Service first: the Job's pods resolve through it).
    pub fn to_yaml(&self) -> String {
        let mut documents = Vec::new();
        if let Some(service) = &self.service {
            documents.push(serde_yaml::to_string(service).expect("a Service serializes"));
        }
        documents.push(serde_yaml::to_string(&self.job).expect("a Job serializes"));
        documents
            .iter()
            .map(|document| format!("---\n{document}"))
            .collect()
    }

    /// Reads what [`Manifests::to_yaml`] writes: a Job, or a Service then a Job. Every document
    /// must come back unchanged through the `k8s-openapi` types (which otherwise drop fields they
    /// do not know), and each `apiVersion`/`kind` must be the type's.
    pub fn from_yaml(text: &str) -> Result<Manifests, ReadBackError> {
        let documents: Vec<&str> = text
            .split("---\n")
            .filter(|document| !document.trim().is_empty())
            .collect();
        match documents.as_slice() {
            [job] => Ok(Manifests {
                service: None,
                job: read_document(0, job)?,
            }),
            [service, job] => Ok(Manifests {
                service: Some(read_document(0, service)?),
                job: read_document(1, job)?,
            }),
            other => Err(ReadBackError::DocumentCount { count: other.len() }),
        }
    }
}

/// One document as `T`, refused unless it re-serializes to the same YAML value.
fn read_document<T: Resource + Serialize + DeserializeOwned>(
    index: usize,
    text: &str,
) -> Result<T, ReadBackError> {
    let malformed = |error: serde_yaml::Error| ReadBackError::Malformed {
        index,
        message: error.to_string(),
    };
    let written: Value = serde_yaml::from_str(text).map_err(malformed)?;
    let kind = written
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("document without a kind");
    if kind != T::KIND {
        return Err(ReadBackError::UnexpectedKind {
            index,
            kind: kind.to_string(),
            expected: T::KIND,
        });
    }
    let typed: T = serde_yaml::from_value(written.clone()).map_err(malformed)?;
    let read_back = serde_yaml::to_value(&typed).map_err(malformed)?;
    match first_difference(&written, &read_back, "") {
        None => Ok(typed),
        Some(path) => Err(ReadBackError::NotRoundTripped {
            index,
            kind: T::KIND,
            path,
        }),
    }
}

/// The path (`spec.template.spec.volumes[0].emptyDir.sizelimit`) of the first place where
/// `written` and `read_back` differ, mappings compared by key.
fn first_difference(written: &Value, read_back: &Value, path: &str) -> Option<String> {
    let here = || {
        if path.is_empty() {
            "the document".to_string()
        } else {
            path.to_string()
        }
    };
    match (written, read_back) {
        (Value::Mapping(written), Value::Mapping(read_back)) => {
            let keys: BTreeMap<String, ()> = written
                .keys()
                .chain(read_back.keys())
                .map(|key| (key_text(key), ()))
                .collect();
            for key in keys.keys() {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match (written.get(key.as_str()), read_back.get(key.as_str())) {
                    (Some(a), Some(b)) => {
                        if let Some(found) = first_difference(a, b, &child) {
                            return Some(found);
                        }
                    }
                    _ => return Some(child),
                }
            }
            None
        }
        (Value::Sequence(written), Value::Sequence(read_back)) => {
            if written.len() != read_back.len() {
                return Some(here());
            }
            written
                .iter()
                .zip(read_back)
                .enumerate()
                .find_map(|(index, (a, b))| first_difference(a, b, &format!("{path}[{index}]")))
        }
        (written, read_back) if written == read_back => None,
        _ => Some(here()),
    }
}

fn key_text(key: &Value) -> String {
    match key {
        Value::String(text) => text.clone(),
        other => serde_yaml::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}
