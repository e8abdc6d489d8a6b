//! The SLSA provenance v1 predicate (<https://slsa.dev/spec/v1.0/provenance>) of one image record:
//! the matrix cell as external parameters (with the source repository and commit when known),
//! the resolved dependencies the fingerprint covers (base image, lock, templates, CA bundle, the
//! exact build context, which holds the gpu-selftest binary), imagegen as the builder with its
//! version, and the build's start and finish times.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::history::manifest::{parse_rfc3339, rfc3339, ImageRecord};
use crate::model::digest::Digest;

pub(crate) const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";

/// What an imagegen build is, as SLSA's `buildType`; documented in docs/attestations.md.
pub(crate) const BUILD_TYPE: &str = "urn:imagegen:build-type:docker-build:v1";

/// The builder's identity, as SLSA's `builder.id`.
pub(crate) const BUILDER_ID: &str = "urn:imagegen:builder";

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

/// A resolved dependency as an in-toto ResourceDescriptor.
fn descriptor(name: &str, uri: Option<&str>, digest: Option<&str>) -> Value {
    let mut entry = Map::new();
    entry.insert("name".into(), json!(name));
    if let Some(uri) = uri {
        entry.insert("uri".into(), json!(uri));
    }
    if let Some(hex) = digest {
        entry.insert("digest".into(), json!({ "sha256": hex }));
    }
    Value::Object(entry)
}

/// `sha256:<hex>` or a bare 64-hex digest, as the hex.
fn digest_hex(text: &str) -> Option<String> {
    let text = text.trim();
    let full = if text.starts_with("sha256:") {
        text.to_string()
    } else {
        format!("sha256:{text}")
    };
    Digest::parse(&full)
        .ok()
        .map(|digest| digest.hex().to_string())
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
        .and_then(|reference| reference.digest().and_then(digest_hex));
    dependencies.push(descriptor(
        "base-image",
        Some(&format!("docker://{base}")),
        base_digest.as_deref(),
    ));
    if let Some(lock) = input("lock").and_then(digest_hex) {
        dependencies.push(descriptor("requirements.lock", None, Some(&lock)));
    }
    if let Some(templates) = input("templates").and_then(digest_hex) {
        dependencies.push(descriptor("templates", None, Some(&templates)));
    }
    if let Some(bundle) = input("ca_bundle").and_then(digest_hex) {
        dependencies.push(descriptor("ca-bundle", None, Some(&bundle)));
    }
    if let Some(selftest) = input("selftest") {
        // The binary's bytes are also in the build context, whose digest follows.
        dependencies.push(descriptor(
            "gpu-selftest",
            Some(&format!("urn:imagegen:gpu-selftest:{selftest}")),
            context
                .selftest_binaries
                .get(selftest)
                .map(Digest::hex)
                // Signed after the build (`attest sign`, `imagegen test`): the sha256 the record's
                // package record read from the binary in the image.
                .or_else(|| recorded_selftest_sha256(record)),
        ));
    }
    dependencies.push(descriptor(
        "build-context",
        None,
        Some(record.build_key.hex()),
    ));

    let mut metadata = Map::new();
    if let Some(id) = &context.invocation_id {
        metadata.insert("invocationId".into(), json!(id));
    }
    if let Some(finished) = parse_rfc3339(&record.built_at) {
        let started = finished.saturating_sub(record.build_seconds.max(0.0).round() as u64);
        metadata.insert("startedOn".into(), json!(rfc3339(started)));
        metadata.insert("finishedOn".into(), json!(rfc3339(finished)));
    }

    json!({
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": external,
            "internalParameters": { "inputs": record.inputs },
            "resolvedDependencies": dependencies,
        },
        "runDetails": {
            "builder": {
                "id": BUILDER_ID,
                "version": { "imagegen": context.imagegen_version },
            },
            "metadata": metadata,
        },
    })
}

/// The sha256 of the gpu-selftest binary the record's package record found in the image.
fn recorded_selftest_sha256(record: &ImageRecord) -> Option<&str> {
    record
        .packages
        .as_ref()?
        .binaries
        .iter()
        .find(|binary| binary.path.ends_with("/gpu-selftest"))
        .map(|binary| binary.sha256.hex())
}
