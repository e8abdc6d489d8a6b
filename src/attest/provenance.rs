//! The SLSA provenance of one image record (the predicate's shape is
//! `imagegen_attest::provenance`'s): the matrix cell as external parameters (with the source
//! repository and commit when known), the resolved dependencies the fingerprint covers (base
//! image, lock, templates, CA bundle, the exact build context, which holds the gpu-selftest
//! binary), imagegen as the builder with its version, and the build's start and finish times.

use std::collections::BTreeMap;

use imagegen_attest::provenance::{Provenance, ResourceDescriptor, BUILD_TYPE};
use serde_json::{json, Map, Value};

use super::to_attest;
use crate::history::manifest::{parse_rfc3339, ImageRecord};
use crate::model::digest::Digest;

/// Facts about the run that the image record does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BuildContext {
    /// `CARGO_PKG_VERSION` of the imagegen that built the image.
    pub(crate) imagegen_version: String,
    /// The source repository (a git remote URL), when known.
    pub(crate) source_repository: Option<String>,
    /// Who ran the build: a CI run URL or a user@host, when known.
    pub(crate) invocation_id: Option<String>,
    /// sha256 of the gpu-selftest binaries this run put into build contexts, by name; empty
    /// when signing after the fact (`attest sign`), when the bytes are no longer at hand.
    pub(crate) selftest_binaries: BTreeMap<String, Digest>,
}

/// An input digest of the record: `sha256:<hex>` or the bare 64 hex digits.
fn input_digest(text: &str) -> Option<imagegen_attest::Digest> {
    let text = text.trim();
    imagegen_attest::Digest::parse(text)
        .or_else(|_| imagegen_attest::Digest::parse_hex(text))
        .ok()
}

/// Seconds since the Unix epoch as an instant.
pub(super) fn instant(seconds: u64) -> Option<jiff::Timestamp> {
    jiff::Timestamp::from_second(i64::try_from(seconds).ok()?).ok()
}

/// The provenance predicate of `record`.
pub(crate) fn provenance(record: &ImageRecord, context: &BuildContext) -> Value {
    let input = |name: &str| record.inputs.get(name).map(String::as_str);
    let mut external = Map::new();
    let mut cell = BTreeMap::new();
    cell.insert("variant", record.variant.to_string());
    cell.insert("torch", record.torch.to_string());
    cell.insert("torchvision", record.torchvision.to_string());
    cell.insert(
        "torchaudio",
        record
            .torchaudio
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
    );
    cell.insert("cuda", record.cuda.to_string());
    cell.insert("cudnn", record.cudnn.to_string());
    cell.insert("python", record.python.to_string());
    cell.insert("os", record.os.to_string());
    if let Some(platform) = input("platform") {
        cell.insert("platform", platform.to_string());
    }
    external.insert("cell".into(), json!(cell));
    external.insert(
        "tag".into(),
        json!(format!("{}:{}", record.repository, record.tag)),
    );
    external.insert("fingerprint".into(), json!(record.fingerprint));
    let mut source = Map::new();
    if let Some(repository) = &context.source_repository {
        source.insert("repository".into(), json!(repository));
    }
    if let Some(commit) = &record.source_commit {
        source.insert("commit".into(), json!(commit));
    }
    if !source.is_empty() {
        external.insert("source".into(), Value::Object(source));
    }

    let mut dependencies = Vec::new();
    let base = record.base_image.as_str();
    let base_digest = base
        .parse::<imagegen_oci::Reference>()
        .ok()
        .and_then(|reference| reference.digest().and_then(input_digest));
    dependencies.push(ResourceDescriptor::new(
        "base-image",
        Some(format!("docker://{base}")),
        base_digest,
    ));
    for (input_name, name) in [
        ("lock", "requirements.lock"),
        ("templates", "templates"),
        ("ca_bundle", "ca-bundle"),
    ] {
        if let Some(digest) = input(input_name).and_then(input_digest) {
            dependencies.push(ResourceDescriptor::new(name, None, Some(digest)));
        }
    }
    if let Some(selftest) = input("selftest") {
        // The binary's bytes are also in the build context, whose digest follows.
        dependencies.push(ResourceDescriptor::new(
            "gpu-selftest",
            Some(format!("urn:imagegen:gpu-selftest:{selftest}")),
            context
                .selftest_binaries
                .get(selftest)
                // Signed after the build (`attest sign`, `imagegen test`): the sha256 the record's
                // package record read from the binary in the image.
                .or_else(|| recorded_selftest_sha256(record))
                .map(to_attest),
        ));
    }
    dependencies.push(ResourceDescriptor::new(
        "build-context",
        None,
        Some(to_attest(&record.build_key)),
    ));

    let finished = parse_rfc3339(&record.built_at);
    let started = finished
        .map(|finished| finished.saturating_sub(record.build_seconds.max(0.0).round() as u64));
    Provenance {
        build_type: BUILD_TYPE,
        external_parameters: external,
        internal_parameters: Some(json!({ "inputs": record.inputs })),
        resolved_dependencies: dependencies,
        imagegen_version: context.imagegen_version.clone(),
        invocation_id: context.invocation_id.clone(),
        started_on: started.and_then(instant),
        finished_on: finished.and_then(instant),
    }
    .predicate()
}

/// The sha256 of the gpu-selftest binary the record's package record found in the image.
fn recorded_selftest_sha256(record: &ImageRecord) -> Option<&Digest> {
    record
        .packages
        .as_ref()?
        .binaries
        .iter()
        .find(|binary| binary.path.ends_with("/gpu-selftest"))
        .map(|binary| &binary.sha256)
}
