//! Proof that travels with an image: the three in-toto statements imagegen attaches to every
//! pushed digest (SLSA provenance, a CycloneDX SBOM, the gpu-selftest result), their DSSE
//! envelopes signed with ECDSA P-256, and the registry layout cosign reads (`sha256-<hex>.att`
//! and `.sig` tags). The formats are the `imagegen-attest` crate's (re-exported here under
//! their old paths: [`check`], [`cosign`], [`dsse`], [`policy`], [`referrers`], [`statement`]);
//! this module says which facts of imagegen's records go into each predicate ([`provenance`],
//! [`sbom`], [`selftest`], [`index`]). Pure: records in, predicates out. Reading keys and
//! talking to the registry is `commands/attest.rs`'s job, through `docker::Registries`.

pub(crate) mod index;
pub(crate) mod provenance;
pub mod sbom;
pub(crate) mod selftest;

pub use imagegen_attest::cosign;
pub(crate) use imagegen_attest::{check, dsse, policy, referrers, statement, PredicateKind};

use crate::model::digest::Digest;

/// imagegen's digest as the attestation crate's: the same 32 bytes (the crate, a leaf, has its
/// own type).
pub(crate) fn to_attest(digest: &Digest) -> imagegen_attest::Digest {
    imagegen_attest::Digest::from_sha256(digest.sha256_bytes())
}

/// The attestation crate's digest as imagegen's, to record.
pub(crate) fn from_attest(digest: &imagegen_attest::Digest) -> Digest {
    Digest::from_sha256(&digest.sha256_bytes())
}

#[cfg(test)]
mod tests;
