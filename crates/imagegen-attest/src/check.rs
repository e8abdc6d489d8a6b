//! Whether one image's attestations, as the registry served them, are whole: its `.att`
//! manifest holds a statement of each [`PredicateKind`], each envelope verifies with the team's
//! key, each statement's subject is the digest the registry serves for the image, and its
//! `.sig` signature verifies and names that digest. Pure: the caller fetched the bytes.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use crate::cosign::{
    attestation_tag, signature_tag, LayerRef, DSSE_MEDIA_TYPE, PREDICATE_TYPE_ANNOTATION,
    SIGNATURE_ANNOTATION,
};
use crate::digest::Digest;
use crate::dsse::{parse_envelope, Verifier};
use crate::statement::{parse_statement, Statement};
use crate::PredicateKind;

/// A layer with its bytes, as fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub layer: LayerRef,
    pub bytes: Vec<u8>,
}

/// The verdict on one image.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageCheck {
    /// The statements that verified, by kind.
    pub statements: BTreeMap<PredicateKind, Statement>,
    /// What is missing or bad, each naming what; empty when the image is whole.
    pub problems: Vec<String>,
}

/// Checks the attestation layers (`None`: no `.att` tag) and signature layers (`None`: no
/// `.sig` tag) served for the image whose digest the registry serves as `served`.
pub fn check_image(
    served: &Digest,
    attestations: Option<&[Fetched]>,
    signatures: Option<&[Fetched]>,
    verifier: &Verifier,
) -> ImageCheck {
    let mut check = ImageCheck::default();
    match attestations {
        None => check.problems.push(format!(
            "no attestations: the registry has no tag {}",
            attestation_tag(served)
        )),
        Some(layers) => {
            for fetched in layers {
                check_attestation(served, fetched, verifier, &mut check);
            }
            for kind in PredicateKind::ALL {
                if !check.statements.contains_key(&kind)
                    && !check.problems.iter().any(|p| p.starts_with(kind.name()))
                {
                    check
                        .problems
                        .push(format!("{kind}: missing (no {} statement)", kind.uri()));
                }
            }
        }
    }
    match signatures {
        None => check.problems.push(format!(
            "signature: missing: the registry has no tag {}",
            signature_tag(served)
        )),
        Some(layers) => {
            let verified = layers.iter().any(|fetched| {
                let signature = fetched
                    .layer
                    .annotations
                    .get(SIGNATURE_ANNOTATION)
                    .and_then(|text| BASE64.decode(text).ok());
                let names_digest = serde_json::from_slice::<serde_json::Value>(&fetched.bytes)
                    .ok()
                    .is_some_and(|payload| {
                        payload["critical"]["image"]["docker-manifest-digest"] == served.as_str()
                    });
                names_digest
                    && signature.is_some_and(|sig| verifier.verify_bytes(&fetched.bytes, &sig))
            });
            if !verified {
                check.problems.push(format!(
                    "signature: none of {} signature(s) verifies with key {} for {served}",
                    layers.len(),
                    verifier.key_id()
                ));
            }
        }
    }
    check
}

fn check_attestation(
    served: &Digest,
    fetched: &Fetched,
    verifier: &Verifier,
    check: &mut ImageCheck,
) {
    let annotated = fetched
        .layer
        .annotations
        .get(PREDICATE_TYPE_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let label = PredicateKind::from_uri(&annotated)
        .map(|kind| kind.name().to_string())
        .unwrap_or_else(|| format!("layer {}", fetched.layer.digest.short()));
    if fetched.layer.media_type != DSSE_MEDIA_TYPE {
        check.problems.push(format!(
            "{label}: media type {:?}, not {DSSE_MEDIA_TYPE}",
            fetched.layer.media_type
        ));
        return;
    }
    let payload = match parse_envelope(&fetched.bytes).and_then(|e| verifier.open(&e)) {
        Ok(payload) => payload,
        Err(error) => {
            check.problems.push(format!("{label}: {error}"));
            return;
        }
    };
    let statement = match parse_statement(&payload) {
        Ok(statement) => statement,
        Err(error) => {
            check.problems.push(format!("{label}: {error}"));
            return;
        }
    };
    let Some(kind) = PredicateKind::from_uri(&statement.predicate_type) else {
        // Another tool's attestation in the same tag: not ours to judge.
        return;
    };
    if !statement.subjects.iter().any(|s| s.digest == *served) {
        let named: Vec<String> = statement
            .subjects
            .iter()
            .map(|s| s.digest.to_string())
            .collect();
        check.problems.push(format!(
            "{kind}: the statement's subject is {}, but the registry serves {served}",
            named.join(", ")
        ));
        return;
    }
    check.statements.insert(kind, statement);
}
