//! The three statements of a multi-platform image: an OCI image index whose digest is what a
//! node resolves an alias to, and so what an admission controller checks. Each is made from the
//! per-platform images' own predicates, so nothing is claimed for the index that is not claimed,
//! and signed, for every platform image:
//! - provenance: the index as the build (`buildType` [`INDEX_BUILD_TYPE`]), its tag and platforms
//!   as external parameters, each platform image (`docker://repository@digest`) as a resolved
//!   dependency;
//! - SBOM: the index as the `metadata.component`, each platform image a nested `container`
//!   component holding its own SBOM's components (bom-refs prefixed with the platform, so they
//!   stay unique);
//! - gpu-selftest: `pass` only when every platform's result is `pass`; otherwise the worst of
//!   them (`fail` before `error` before `skipped` before `not-run`); each platform's predicate
//!   under `platforms`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::provenance::BUILDER_ID;
use super::sbom::serial_number;
use crate::history::manifest::IndexRecord;
use crate::model::digest::Digest;

/// What assembling an index is, as SLSA's `buildType`; documented in docs/attestations.md.
pub(crate) const INDEX_BUILD_TYPE: &str = "urn:imagegen:build-type:oci-index:v1";

/// One platform image of an index with the predicates of its own statements.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlatformPredicates {
    /// `linux/amd64`.
    pub(crate) platform: String,
    pub(crate) digest: Digest,
    pub(crate) sbom: Value,
    pub(crate) selftest: Value,
}

/// The provenance predicate of `index`.
pub(crate) fn index_provenance(index: &IndexRecord, imagegen_version: &str) -> Value {
    let dependencies: Vec<Value> = index
        .platforms
        .iter()
        .map(|(platform, image)| {
            json!({
                "name": platform,
                "uri": format!("docker://{}@{}", index.repository, image.digest),
                "digest": { "sha256": image.digest.hex() },
                "annotations": { "tag": image.tag },
            })
        })
        .collect();
    json!({
        "buildDefinition": {
            "buildType": INDEX_BUILD_TYPE,
            "externalParameters": {
                "tag": format!("{}:{}", index.repository, index.tag),
                "platforms": index.platforms.keys().collect::<Vec<_>>(),
                "mediaType": index.media_type,
            },
            "resolvedDependencies": dependencies,
        },
        "runDetails": {
            "builder": {
                "id": BUILDER_ID,
                "version": { "imagegen": imagegen_version },
            },
            "metadata": { "finishedOn": index.published_at },
        },
    })
}

/// Prefixes every `bom-ref` (and nested component's) with `prefix`.
fn prefixed(component: &Value, prefix: &str) -> Value {
    let mut component = component.clone();
    if let Some(reference) = component["bom-ref"].as_str() {
        component["bom-ref"] = json!(format!("{prefix}/{reference}"));
    }
    if let Some(nested) = component["components"].as_array() {
        component["components"] = nested.iter().map(|child| prefixed(child, prefix)).collect();
    }
    component
}

/// The SBOM predicate of `index`.
pub(crate) fn index_sbom(
    index: &IndexRecord,
    digest: &Digest,
    platforms: &[PlatformPredicates],
    imagegen_version: &str,
) -> Value {
    let components: Vec<Value> = platforms
        .iter()
        .map(|platform| {
            let nested: Vec<Value> = platform.sbom["components"]
                .as_array()
                .map(|components| {
                    components
                        .iter()
                        .map(|component| prefixed(component, &platform.platform))
                        .collect()
                })
                .unwrap_or_default();
            json!({
                "type": "container",
                "bom-ref": format!("{}@{}", index.repository, platform.digest),
                "name": index.repository,
                "version": platform.digest.to_string(),
                "hashes": [{ "alg": "SHA-256", "content": platform.digest.hex() }],
                "properties": [{ "name": "imagegen:platform", "value": platform.platform }],
                "components": nested,
            })
        })
        .collect();
    json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": serial_number(digest),
        "version": 1,
        "metadata": {
            "timestamp": index.published_at,
            "tools": { "components": [{
                "type": "application",
                "name": "imagegen",
                "version": imagegen_version,
            }]},
            "component": {
                "type": "container",
                "bom-ref": format!("{}@{}", index.repository, digest),
                "name": index.repository,
                "version": digest.to_string(),
                "hashes": [{ "alg": "SHA-256", "content": digest.hex() }],
            },
        },
        "components": components,
    })
}

/// How bad a verdict is, for the index's: the worst platform's.
fn badness(result: &str) -> u8 {
    match result {
        "pass" => 0,
        "not-run" => 1,
        "skipped" => 2,
        "error" => 3,
        _ => 4,
    }
}

/// The gpu-selftest predicate of `index`: its verdict is `pass` only when every platform's is.
pub(crate) fn index_selftest(index: &IndexRecord, platforms: &[PlatformPredicates]) -> Value {
    let results: Vec<(&str, &str)> = platforms
        .iter()
        .map(|p| {
            (
                p.platform.as_str(),
                p.selftest["result"].as_str().unwrap_or("not-run"),
            )
        })
        .collect();
    let result = results
        .iter()
        .map(|(_, result)| *result)
        .max_by_key(|result| badness(result))
        .unwrap_or("not-run");
    let summary = if platforms.is_empty() {
        "the index has no platform images".to_string()
    } else if result == "pass" {
        format!(
            "every platform passed: {}",
            index
                .platforms
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        results
            .iter()
            .filter(|(_, verdict)| *verdict != "pass")
            .map(|(platform, verdict)| format!("{platform}: {verdict}"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let mut gpus: Vec<String> = platforms
        .iter()
        .flat_map(|p| p.selftest["gpus"].as_array().cloned().unwrap_or_default())
        .filter_map(|gpu| gpu.as_str().map(str::to_string))
        .collect();
    gpus.sort();
    gpus.dedup();
    let tested_at = platforms
        .iter()
        .filter_map(|p| p.selftest["testedAt"].as_str())
        .max()
        .map(str::to_string);
    let image_cuda = platforms
        .first()
        .and_then(|p| p.selftest["imageCuda"].as_str())
        .unwrap_or_default();
    let per_platform: Map<String, Value> = platforms
        .iter()
        .map(|p| {
            (
                p.platform.clone(),
                json!({ "digest": p.digest.to_string(), "predicate": p.selftest }),
            )
        })
        .collect();
    json!({
        "result": result,
        "summary": summary,
        "imageCuda": image_cuda,
        "node": null,
        "testedAt": tested_at,
        "baseline": null,
        "gpus": gpus,
        "driver": null,
        "cuda": null,
        "checks": [],
        "platforms": per_platform,
    })
}

/// Which platform images of `index` a caller must find predicates for, by platform.
pub(crate) fn platform_digests(index: &IndexRecord) -> BTreeMap<String, Digest> {
    index
        .platforms
        .iter()
        .map(|(platform, image)| (platform.clone(), image.digest.clone()))
        .collect()
}
