//! The three statements of a multi-platform image: an OCI image index whose digest is what a
//! node resolves an alias to, and so what an admission controller checks. Each is made from the
//! per-platform images' own predicates, so nothing is claimed for the index that is not claimed,
//! and signed, for every platform image:
//! - provenance: the index as the build (`buildType` `INDEX_BUILD_TYPE`), its tag and platforms
//!   as external parameters, each platform image (`docker://repository@digest`) as a resolved
//!   dependency;
//! - SBOM: the index as the `metadata.component`, each platform image a nested `container`
//!   component holding its own SBOM's components (`imagegen_attest::sbom::index_sbom`);
//! - gpu-selftest: `pass` only when every platform's result is `pass`
//!   (`imagegen_attest::selftest::index_selftest`).

use std::collections::BTreeMap;

use imagegen_attest::provenance::{Provenance, ResourceDescriptor, INDEX_BUILD_TYPE};
use imagegen_attest::sbom::PlatformSbom;
use imagegen_attest::selftest::PlatformSelftest;
use serde_json::{json, Map, Value};

use super::provenance::instant;
use super::to_attest;
use crate::history::manifest::{parse_rfc3339, IndexRecord};
use crate::model::digest::Digest;

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
    let dependencies = index
        .platforms
        .iter()
        .map(|(platform, image)| {
            let mut descriptor = ResourceDescriptor::new(
                platform,
                Some(format!("docker://{}@{}", index.repository, image.digest)),
                Some(to_attest(&image.digest)),
            );
            descriptor
                .annotations
                .insert("tag".into(), image.tag.clone());
            descriptor
        })
        .collect();
    let mut external = Map::new();
    external.insert(
        "tag".into(),
        json!(format!("{}:{}", index.repository, index.tag)),
    );
    external.insert(
        "platforms".into(),
        json!(index.platforms.keys().collect::<Vec<_>>()),
    );
    external.insert("mediaType".into(), json!(index.media_type));
    Provenance {
        build_type: INDEX_BUILD_TYPE,
        external_parameters: external,
        internal_parameters: None,
        resolved_dependencies: dependencies,
        imagegen_version: imagegen_version.to_string(),
        invocation_id: None,
        started_on: None,
        finished_on: parse_rfc3339(&index.published_at).and_then(instant),
    }
    .predicate()
}

/// The SBOM predicate of `index`, pushed as `digest`.
pub(crate) fn index_sbom(
    index: &IndexRecord,
    digest: &Digest,
    platforms: &[PlatformPredicates],
    imagegen_version: &str,
) -> Value {
    let digests: Vec<imagegen_attest::Digest> =
        platforms.iter().map(|p| to_attest(&p.digest)).collect();
    let platforms: Vec<PlatformSbom<'_>> = platforms
        .iter()
        .zip(&digests)
        .map(|(platform, digest)| PlatformSbom {
            platform: &platform.platform,
            digest,
            sbom: &platform.sbom,
        })
        .collect();
    imagegen_attest::sbom::index_sbom(
        &index.repository,
        &to_attest(digest),
        parse_rfc3339(&index.published_at).and_then(instant),
        &platforms,
        imagegen_version,
    )
}

/// The gpu-selftest predicate of an index of `platforms`: its verdict is `pass` only when every
/// platform's is.
pub(crate) fn index_selftest(platforms: &[PlatformPredicates]) -> Value {
    let digests: Vec<imagegen_attest::Digest> =
        platforms.iter().map(|p| to_attest(&p.digest)).collect();
    let platforms: Vec<PlatformSelftest<'_>> = platforms
        .iter()
        .zip(&digests)
        .map(|(platform, digest)| PlatformSelftest {
            platform: &platform.platform,
            digest,
            selftest: &platform.selftest,
        })
        .collect();
    imagegen_attest::selftest::index_selftest(&platforms)
}

/// Which platform images of `index` a caller must find predicates for, by platform.
pub(crate) fn platform_digests(index: &IndexRecord) -> BTreeMap<String, Digest> {
    index
        .platforms
        .iter()
        .map(|(platform, image)| (platform.clone(), image.digest.clone()))
        .collect()
}
