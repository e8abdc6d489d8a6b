//! The registry layout cosign reads and writes (cosign's `specs/ATTESTATION_SPEC.md` and
//! `SIGNATURE_SPEC.md`), with no referrers API needed: the attestations of digest
//! `sha256:<hex>` are the layers of an OCI manifest tagged `sha256-<hex>.att` in the image's
//! repository, one DSSE envelope each (`application/vnd.dsse.envelope.v1+json`, annotated with
//! its `predicateType`); the image signature is the layer of `sha256-<hex>.sig`, a
//! simple-signing payload whose base64 DER signature is its
//! `dev.cosignproject.cosign/signature` annotation. Pure: bytes to push, and bytes read back.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::digest::Digest;

pub const DSSE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
pub const PREDICATE_TYPE_ANNOTATION: &str = "predicateType";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// The tag holding the attestations of `digest`.
pub fn attestation_tag(digest: &Digest) -> String {
    format!("sha256-{}.att", digest.hex())
}

/// The tag holding the signature of `digest`.
pub fn signature_tag(digest: &Digest) -> String {
    format!("sha256-{}.sig", digest.hex())
}

/// One layer: its bytes and how the manifest describes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub media_type: String,
    pub annotations: BTreeMap<String, String>,
    pub bytes: Vec<u8>,
}

impl Layer {
    pub fn digest(&self) -> Digest {
        Digest::of(&self.bytes)
    }
}

/// An OCI artifact to push: blobs first (config, layers), then the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub config: Vec<u8>,
    pub layers: Vec<Layer>,
    pub manifest: Vec<u8>,
}

/// A DSSE envelope as an attestation layer.
pub fn attestation_layer(envelope: Vec<u8>, predicate_type: &str) -> Layer {
    let mut annotations = BTreeMap::new();
    annotations.insert(SIGNATURE_ANNOTATION.to_string(), String::new());
    annotations.insert(
        PREDICATE_TYPE_ANNOTATION.to_string(),
        predicate_type.to_string(),
    );
    Layer {
        media_type: DSSE_MEDIA_TYPE.to_string(),
        annotations,
        bytes: envelope,
    }
}

/// cosign's simple-signing payload for `repository@digest`.
pub fn simple_signing_payload(repository: &str, digest: &Digest) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "critical": {
            "identity": { "docker-reference": repository },
            "image": { "docker-manifest-digest": digest.to_string() },
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .expect("JSON always serializes")
}

/// The signature layer: the payload, its base64 DER signature as the annotation.
pub fn signature_layer(payload: Vec<u8>, signature_base64: String) -> Layer {
    let mut annotations = BTreeMap::new();
    annotations.insert(SIGNATURE_ANNOTATION.to_string(), signature_base64);
    Layer {
        media_type: SIMPLE_SIGNING_MEDIA_TYPE.to_string(),
        annotations,
        bytes: payload,
    }
}

/// The manifest and config (as go-containerregistry writes cosign's) around `layers`.
pub fn artifact(layers: Vec<Layer>) -> Artifact {
    let diff_ids: Vec<String> = layers.iter().map(|l| l.digest().to_string()).collect();
    let config = serde_json::to_vec(&json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{ "created": "0001-01-01T00:00:00Z" }],
        "os": "",
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
        "config": {},
    }))
    .expect("JSON always serializes");
    let descriptors: Vec<Value> = layers
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
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": OCI_CONFIG,
            "size": config.len(),
            "digest": Digest::of(&config).to_string(),
        },
        "layers": descriptors,
    }))
    .expect("JSON always serializes");
    Artifact {
        config,
        layers,
        manifest,
    }
}

/// A layer as a manifest describes it, before its bytes are fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerRef {
    pub media_type: String,
    pub digest: Digest,
    pub annotations: BTreeMap<String, String>,
}

/// The layers a manifest lists.
pub fn layer_refs(manifest: &[u8]) -> Result<Vec<LayerRef>, String> {
    let value: Value =
        serde_json::from_slice(manifest).map_err(|error| format!("not JSON: {error}"))?;
    let layers = value["layers"]
        .as_array()
        .ok_or_else(|| "the manifest has no `layers`".to_string())?;
    layers
        .iter()
        .map(|layer| {
            let digest = Digest::parse(layer["digest"].as_str().unwrap_or_default())
                .map_err(|error| error.to_string())?;
            let annotations = layer["annotations"]
                .as_object()
                .map(|map| {
                    map.iter()
                        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            Ok(LayerRef {
                media_type: layer["mediaType"].as_str().unwrap_or_default().to_string(),
                digest,
                annotations,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_layers_are_as_cosign_names_them() {
        let digest = Digest::of(b"image");
        assert_eq!(
            attestation_tag(&digest),
            format!("sha256-{}.att", digest.hex())
        );
        assert!(signature_tag(&digest).ends_with(".sig"));
        let built = artifact(vec![attestation_layer(b"{}".to_vec(), "urn:p")]);
        let refs = layer_refs(&built.manifest).unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].media_type, DSSE_MEDIA_TYPE);
        assert_eq!(refs[0].digest, Digest::of(b"{}"));
        assert_eq!(refs[0].annotations[PREDICATE_TYPE_ANNOTATION], "urn:p");
        assert_eq!(refs[0].annotations[SIGNATURE_ANNOTATION], "");
        let payload: Value = serde_json::from_slice(&simple_signing_payload("r", &digest)).unwrap();
        assert_eq!(
            payload["critical"]["image"]["docker-manifest-digest"],
            digest.to_string()
        );
    }
}
