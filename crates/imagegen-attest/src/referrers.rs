//! The attestations and signature as OCI 1.1 referrers (distribution spec v1.1, "Listing
//! Referrers"), beside cosign's `.att`/`.sig` tags: each is also an image manifest with an
//! `artifactType`, the empty config and a `subject` naming the image's manifest. A registry that
//! serves the referrers API indexes it on upload (it answers `OCI-Subject`); for one that does not
//! (Debian's registry 2.8), the spec's fallback is the referrers tag schema: an image index tagged
//! `sha256-<hex>` (the subject's digest) listing the referrers, which clients update by
//! read-change-write. Pure: the caller talks to the registry.

use serde_json::{json, Value};

use crate::cosign::Artifact;
use crate::digest::Digest;

/// The `artifactType` of the in-toto attestations (DSSE envelopes, one layer per statement).
pub const ATTESTATION_ARTIFACT_TYPE: &str = "application/vnd.in-toto+json";
/// The `artifactType` of cosign's simple-signing signature.
pub const SIGNATURE_ARTIFACT_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The OCI empty descriptor's media type and content (`{}`), the config of an artifact manifest.
pub const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
pub const EMPTY_CONFIG: &[u8] = b"{}";
use crate::cosign::OCI_MANIFEST;
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// The subject of a referrer: the image manifest it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectManifest {
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
}

/// The referrer manifest of `artifact` (whose blobs are pushed already) about `subject`.
pub fn referrer_manifest(
    artifact: &Artifact,
    artifact_type: &str,
    subject: &SubjectManifest,
) -> Vec<u8> {
    let layers: Vec<Value> = artifact
        .layers
        .iter()
        .map(|layer| {
            json!({
                "mediaType": layer.media_type,
                "size": layer.bytes.len(),
                "digest": layer.digest().to_string(),
                "annotations": layer.annotations,
            })
        })
        .collect();
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {
            "mediaType": EMPTY_MEDIA_TYPE,
            "size": EMPTY_CONFIG.len(),
            "digest": Digest::of(EMPTY_CONFIG).to_string(),
        },
        "layers": layers,
        "subject": {
            "mediaType": subject.media_type,
            "size": subject.size,
            "digest": subject.digest.to_string(),
        },
    }))
    .expect("JSON always serializes")
}

/// The fallback tag of the referrers of `subject`: `sha256-<hex>`.
pub fn fallback_tag(subject: &Digest) -> String {
    format!("sha256-{}", subject.hex())
}

/// The fallback index with the referrer `manifest` (of `artifact_type`) added: an entry of the
/// same artifact type is replaced (signing again supersedes, as cosign's `.att` tag is replaced);
/// entries of other types (another tool's referrers) are kept. `existing`: the index the tag
/// serves now, if any; one that is not an index is an error.
pub fn updated_fallback_index(
    existing: Option<&[u8]>,
    manifest: &[u8],
    artifact_type: &str,
) -> Result<Vec<u8>, String> {
    let mut entries: Vec<Value> = match existing {
        None => Vec::new(),
        Some(bytes) => {
            let index: Value = serde_json::from_slice(bytes)
                .map_err(|error| format!("the referrers fallback tag holds no JSON: {error}"))?;
            index["manifests"]
                .as_array()
                .cloned()
                .ok_or("the referrers fallback tag holds no image index")?
        }
    };
    entries.retain(|entry| entry["artifactType"] != artifact_type);
    entries.push(json!({
        "mediaType": OCI_MANIFEST,
        "size": manifest.len(),
        "digest": Digest::of(manifest).to_string(),
        "artifactType": artifact_type,
    }));
    Ok(serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": entries,
    }))
    .expect("JSON always serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosign::{artifact, signature_layer};

    fn subject() -> SubjectManifest {
        SubjectManifest {
            media_type: OCI_MANIFEST.into(),
            digest: Digest::of(b"image"),
            size: 1234,
        }
    }

    #[test]
    fn a_referrer_names_its_subject_and_type_over_the_empty_config() {
        let signed = artifact(vec![signature_layer(b"payload".to_vec(), "c2ln".into())]);
        let manifest = referrer_manifest(&signed, SIGNATURE_ARTIFACT_TYPE, &subject());
        let value: Value = serde_json::from_slice(&manifest).unwrap();
        assert_eq!(value["subject"]["digest"], Digest::of(b"image").to_string());
        assert_eq!(value["subject"]["size"], 1234);
        assert_eq!(value["artifactType"], SIGNATURE_ARTIFACT_TYPE);
        assert_eq!(value["config"]["mediaType"], EMPTY_MEDIA_TYPE);
        assert_eq!(
            value["config"]["digest"],
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_eq!(value["layers"].as_array().unwrap().len(), 1);
        assert_eq!(
            fallback_tag(&Digest::of(b"image")),
            format!("sha256-{}", Digest::of(b"image").hex())
        );
    }

    #[test]
    fn the_fallback_index_keeps_other_referrers_and_replaces_its_own_kind() {
        let first = updated_fallback_index(None, b"att-1", ATTESTATION_ARTIFACT_TYPE).unwrap();
        let other_tool = {
            let mut index: Value = serde_json::from_slice(&first).unwrap();
            index["manifests"].as_array_mut().unwrap().push(json!({
                "mediaType": OCI_MANIFEST, "size": 3, "digest": Digest::of(b"sbom").to_string(),
                "artifactType": "application/spdx+json"
            }));
            serde_json::to_vec(&index).unwrap()
        };
        let with_sig =
            updated_fallback_index(Some(&other_tool), b"sig-1", SIGNATURE_ARTIFACT_TYPE).unwrap();
        let again =
            updated_fallback_index(Some(&with_sig), b"att-2", ATTESTATION_ARTIFACT_TYPE).unwrap();
        let index: Value = serde_json::from_slice(&again).unwrap();
        assert_eq!(index["mediaType"], OCI_INDEX);
        let digests: Vec<&str> = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["digest"].as_str().unwrap())
            .collect();
        assert_eq!(
            digests,
            vec![
                Digest::of(b"sbom").to_string(),
                Digest::of(b"sig-1").to_string(),
                Digest::of(b"att-2").to_string()
            ]
        );
        assert!(updated_fallback_index(Some(b"{}"), b"x", SIGNATURE_ARTIFACT_TYPE).is_err());
        assert!(updated_fallback_index(Some(b"not json"), b"x", SIGNATURE_ARTIFACT_TYPE).is_err());
    }
}
