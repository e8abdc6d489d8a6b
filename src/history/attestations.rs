//! The manifest's record of the attestations pushed for each image digest (`attestations`,
//! keyed by digest): where cosign's layout holds them (the `.att` and `.sig` manifests and their
//! digests), the digest of each statement's envelope, the key that signed them and when. Kept
//! apart from the image records so the self-test and build records evolve on their own; merged
//! by digest, the later signing winning.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::digest::Digest;

/// The attestations of one image digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttestationRecord {
    /// The repository the image and its attestations live in.
    pub repository: String,
    /// The full tag the image was recorded under when it was signed.
    pub tag: String,
    /// sha256 (hex) of the signing key's public DER.
    pub key_id: String,
    /// The `sha256-<hex>.att` manifest: tag and digest.
    pub attestations: Artifact,
    /// The `sha256-<hex>.sig` manifest: tag and digest.
    pub signature: Artifact,
    /// Each statement's envelope (a layer of the `.att` manifest) by kind: `provenance`,
    /// `sbom`, `gpu-selftest`.
    pub statements: BTreeMap<String, Digest>,
    /// The gpu-selftest result the statement carries (`pass`, `fail`, ...).
    pub gpu_selftest: String,
    pub signed_at: String,
}

/// A tag and the manifest digest it was pushed as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub tag: String,
    pub digest: Digest,
}

/// `left` and `right`'s records, by digest; of two for one digest, the later signing.
pub fn merge(
    left: BTreeMap<Digest, AttestationRecord>,
    right: BTreeMap<Digest, AttestationRecord>,
) -> BTreeMap<Digest, AttestationRecord> {
    let mut merged = left;
    for (digest, record) in right {
        // A total order, so the merge does not depend on which side is which.
        let key = |record: &AttestationRecord| {
            (
                record.signed_at.clone(),
                serde_json::to_string(record).unwrap_or_default(),
            )
        };
        match merged.get(&digest) {
            Some(kept) if key(kept) >= key(&record) => {}
            _ => {
                merged.insert(digest, record);
            }
        }
    }
    merged
}
