//! imagegen's attestation formats: proof that travels with an image, as bytes other tools read.
//! [`statement`] wraps a predicate ([`provenance`]: SLSA provenance v1; [`sbom`]: a CycloneDX 1.6
//! subset; [`selftest`]: the gpu-selftest result, with its JSON schema) in an in-toto Statement
//! v1 about a [`Digest`]; [`dsse`] signs the statement as a DSSE envelope with ECDSA P-256 and
//! opens it again ([`KeyId`]: a public key's sha256, never key material); [`cosign`] lays
//! envelopes and the simple-signing payload out as the OCI manifests cosign reads
//! (`sha256-<hex>.att`, `.sig`); [`referrers`] makes the same artifacts OCI 1.1 referrers (and
//! the fallback index of a registry without the referrers API); [`check`] decides, from what a
//! registry served, whether an image's attestations are whole; [`policy`] writes the Sigstore
//! policy-controller `ClusterImagePolicy` that admits only such images.
//!
//! Pure and leaf: values in, values (JSON, bytes) out; no I/O, no registry, and nothing of
//! imagegen's: which facts of an image go into a predicate, reading keys and talking to the
//! registry are imagegen's (`imagegen::attest`, `commands::attest`). Values are built valid: a
//! [`Digest`] is `sha256:` and 64 hex digits, a [`KeyId`] is made from a key, a statement's
//! subject is a [`Digest`], a [`PredicateKind`] is one of the three imagegen attaches.

pub mod check;
pub mod cosign;
mod digest;
pub mod dsse;
pub mod policy;
pub mod provenance;
pub mod referrers;
pub mod sbom;
pub mod selftest;
pub mod statement;

pub use digest::{Digest, DigestError};
pub use dsse::KeyId;

/// The predicate types imagegen attaches, one statement each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PredicateKind {
    Provenance,
    Sbom,
    GpuSelftest,
}

impl PredicateKind {
    pub const ALL: [PredicateKind; 3] = [
        PredicateKind::Provenance,
        PredicateKind::Sbom,
        PredicateKind::GpuSelftest,
    ];

    /// The `predicateType` URI.
    pub fn uri(self) -> &'static str {
        match self {
            PredicateKind::Provenance => provenance::PREDICATE_TYPE,
            PredicateKind::Sbom => sbom::PREDICATE_TYPE,
            PredicateKind::GpuSelftest => selftest::PREDICATE_TYPE,
        }
    }

    /// The short name used in imagegen's manifest and in messages.
    pub fn name(self) -> &'static str {
        match self {
            PredicateKind::Provenance => "provenance",
            PredicateKind::Sbom => "sbom",
            PredicateKind::GpuSelftest => "gpu-selftest",
        }
    }

    /// The kind whose `predicateType` is `uri`; `None` for another tool's.
    pub fn from_uri(uri: &str) -> Option<PredicateKind> {
        PredicateKind::ALL
            .into_iter()
            .find(|kind| kind.uri() == uri)
    }
}

impl std::fmt::Display for PredicateKind {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name())
    }
}
