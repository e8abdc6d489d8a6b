//! The SLSA provenance v1 predicate (<https://slsa.dev/spec/v1.0/provenance>): `buildDefinition`
//! (the build type, its external and internal parameters, the resolved dependencies as in-toto
//! ResourceDescriptors) and `runDetails` (imagegen as the builder with its version, the
//! invocation and the build's start and finish). Which facts of a build go where is the
//! caller's choice (imagegen's `attest` module maps its image and index records); this module
//! owns the shape.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::{json, Map, Value};

use crate::digest::Digest;

pub const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";

/// What an imagegen build is, as SLSA's `buildType`; documented in docs/attestations.md.
pub const BUILD_TYPE: &str = "urn:imagegen:build-type:docker-build:v1";

/// What assembling an OCI image index is, as SLSA's `buildType`; documented in
/// docs/attestations.md.
pub const INDEX_BUILD_TYPE: &str = "urn:imagegen:build-type:oci-index:v1";

/// The builder's identity, as SLSA's `builder.id`.
pub const BUILDER_ID: &str = "urn:imagegen:builder";

/// A resolved dependency as an in-toto ResourceDescriptor: a name, where it is, its sha256 and
/// annotations, each written only when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceDescriptor {
    pub name: String,
    pub uri: Option<String>,
    pub digest: Option<Digest>,
    pub annotations: BTreeMap<String, String>,
}

impl ResourceDescriptor {
    /// A descriptor of `name`, located at `uri` and with `digest` when known.
    pub fn new(name: &str, uri: Option<String>, digest: Option<Digest>) -> ResourceDescriptor {
        ResourceDescriptor {
            name: name.to_string(),
            uri,
            digest,
            annotations: BTreeMap::new(),
        }
    }

    fn to_json(&self) -> Value {
        let mut entry = Map::new();
        entry.insert("name".into(), json!(self.name));
        if let Some(uri) = &self.uri {
            entry.insert("uri".into(), json!(uri));
        }
        if let Some(digest) = &self.digest {
            entry.insert("digest".into(), json!({ "sha256": digest.hex() }));
        }
        if !self.annotations.is_empty() {
            entry.insert("annotations".into(), json!(self.annotations));
        }
        Value::Object(entry)
    }
}

/// One build's provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct Provenance {
    /// [`BUILD_TYPE`] or [`INDEX_BUILD_TYPE`].
    pub build_type: &'static str,
    /// What the build was asked to make (the build type defines the fields).
    pub external_parameters: Map<String, Value>,
    /// What the builder chose itself; not written when `None`.
    pub internal_parameters: Option<Value>,
    pub resolved_dependencies: Vec<ResourceDescriptor>,
    /// `CARGO_PKG_VERSION` of the imagegen that built it.
    pub imagegen_version: String,
    /// Who ran the build: a CI run URL, when known.
    pub invocation_id: Option<String>,
    pub started_on: Option<Timestamp>,
    pub finished_on: Option<Timestamp>,
}

/// An instant as RFC 3339 UTC with seconds (`2026-11-30T10:25:21Z`).
fn rfc3339(instant: Timestamp) -> String {
    instant.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl Provenance {
    /// The predicate's JSON.
    pub fn predicate(&self) -> Value {
        let mut metadata = Map::new();
        if let Some(id) = &self.invocation_id {
            metadata.insert("invocationId".into(), json!(id));
        }
        if let Some(started) = self.started_on {
            metadata.insert("startedOn".into(), json!(rfc3339(started)));
        }
        if let Some(finished) = self.finished_on {
            metadata.insert("finishedOn".into(), json!(rfc3339(finished)));
        }
        let mut definition = Map::new();
        definition.insert("buildType".into(), json!(self.build_type));
        definition.insert(
            "externalParameters".into(),
            Value::Object(self.external_parameters.clone()),
        );
        if let Some(internal) = &self.internal_parameters {
            definition.insert("internalParameters".into(), internal.clone());
        }
        definition.insert(
            "resolvedDependencies".into(),
            self.resolved_dependencies
                .iter()
                .map(ResourceDescriptor::to_json)
                .collect(),
        );
        json!({
            "buildDefinition": definition,
            "runDetails": {
                "builder": {
                    "id": BUILDER_ID,
                    "version": { "imagegen": self.imagegen_version },
                },
                "metadata": metadata,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_and_times_are_written_only_when_known() {
        let mut with_tag =
            ResourceDescriptor::new("linux/amd64", Some("docker://r@x".into()), None);
        with_tag.annotations.insert("tag".into(), "t".into());
        let provenance = Provenance {
            build_type: INDEX_BUILD_TYPE,
            external_parameters: Map::new(),
            internal_parameters: None,
            resolved_dependencies: vec![
                ResourceDescriptor::new("lock", None, Some(Digest::of(b"lock"))),
                with_tag,
            ],
            imagegen_version: "0.1.0".into(),
            invocation_id: None,
            started_on: None,
            finished_on: Some(Timestamp::from_second(1_800_000_000).unwrap()),
        };
        let predicate = provenance.predicate();
        let dependencies = &predicate["buildDefinition"]["resolvedDependencies"];
        assert_eq!(
            dependencies[0],
            json!({"name": "lock", "digest": {"sha256": Digest::of(b"lock").hex()}})
        );
        assert_eq!(
            dependencies[1],
            json!({"name": "linux/amd64", "uri": "docker://r@x", "annotations": {"tag": "t"}})
        );
        assert!(predicate["buildDefinition"]
            .get("internalParameters")
            .is_none());
        assert_eq!(
            predicate["runDetails"]["metadata"],
            json!({"finishedOn": "2027-01-15T08:00:00Z"})
        );
        assert_eq!(predicate["runDetails"]["builder"]["id"], BUILDER_ID);
    }
}
