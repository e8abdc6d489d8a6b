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
pub(crate) struct AttestationRecord {
    /// The repository the image and its attestations live in.
    pub(crate) repository: String,
    /// The full tag the image was recorded under when it was signed.
    pub(crate) tag: String,
    /// sha256 (hex) of the signing key's public DER.
    pub(crate) key_id: String,
    /// The `sha256-<hex>.att` manifest: tag and digest.
    pub(crate) attestations: Artifact,
    /// The `sha256-<hex>.sig` manifest: tag and digest.
    pub(crate) signature: Artifact,
    /// Each statement's envelope (a layer of the `.att` manifest) by kind: `provenance`,
    /// `sbom`, `gpu-selftest`.
    pub(crate) statements: BTreeMap<String, Digest>,
    /// The gpu-selftest result the statement carries (`pass`, `fail`, ...).
    pub(crate) gpu_selftest: String,
    pub(crate) signed_at: String,
    /// The same attestations and signature as OCI 1.1 referrers (manifests whose `subject` is
    /// the image), by digest; see `attest::referrers`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) referrers: Vec<Digest>,
    /// The referrers fallback tag (`sha256-<hex>`) that lists them, where the registry has no
    /// referrers API; `None` where it indexed them itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) referrers_tag: Option<String>,
}

/// A tag and the manifest digest it was pushed as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Artifact {
    pub(crate) tag: String,
    pub(crate) digest: Digest,
}

/// `left` and `right`'s records, by digest; of two for one digest, the later signing.
pub(crate) fn merge(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::manifest::Manifest;

    fn record(signed_at: &str, key_id: &str) -> AttestationRecord {
        let artifact = |tag: &str| Artifact {
            tag: tag.into(),
            digest: Digest::of(tag.as_bytes()),
        };
        AttestationRecord {
            repository: "r/p".into(),
            tag: "t".into(),
            key_id: key_id.into(),
            attestations: artifact("a.att"),
            signature: artifact("a.sig"),
            statements: BTreeMap::new(),
            gpu_selftest: "pass".into(),
            signed_at: signed_at.into(),
            referrers: Vec::new(),
            referrers_tag: None,
        }
    }

    #[test]
    fn the_later_signing_wins_whatever_the_order() {
        let digest = Digest::of(b"image");
        let older: BTreeMap<_, _> = [(digest.clone(), record("2026-12-01T00:00:00Z", "k1"))].into();
        let newer: BTreeMap<_, _> = [(digest.clone(), record("2026-12-02T00:00:00Z", "k2"))].into();
        assert_eq!(merge(older.clone(), newer.clone())[&digest].key_id, "k2");
        assert_eq!(merge(newer.clone(), older.clone())[&digest].key_id, "k2");
        let tie_a: BTreeMap<_, _> = [(digest.clone(), record("2026-12-01T00:00:00Z", "a"))].into();
        let tie_b: BTreeMap<_, _> = [(digest.clone(), record("2026-12-01T00:00:00Z", "b"))].into();
        assert_eq!(
            merge(tie_a.clone(), tie_b.clone()),
            merge(tie_b, tie_a),
            "a tie is settled the same either way"
        );
    }

    #[test]
    fn a_digest_given_twice_or_not_a_digest_is_refused() {
        let entry = serde_json::to_string(&record("2026-12-01T00:00:00Z", "k")).unwrap();
        let digest = Digest::of(b"image");
        let twice = format!(
            r#"{{"schema_version":1,"attestations":{{"{digest}":{entry},"{digest}":{entry}}}}}"#
        );
        let error = Manifest::from_json(&twice, "m.json").unwrap_err();
        assert!(format!("{error:#}").contains("duplicate key"), "{error:#}");
        let bad = format!(r#"{{"schema_version":1,"attestations":{{"sha256:12":{entry}}}}}"#);
        let error = Manifest::from_json(&bad, "m.json").unwrap_err();
        assert!(
            format!("{error:#}").contains("is not a digest"),
            "{error:#}"
        );
        let good = format!(r#"{{"schema_version":1,"attestations":{{"{digest}":{entry}}}}}"#);
        let read = Manifest::from_json(&good, "m.json").unwrap();
        assert_eq!(read.attestations[&digest].key_id, "k");
    }
}
