//! Proof that travels with an image: the three in-toto statements imagegen attaches to every
//! pushed digest (SLSA provenance, a CycloneDX SBOM, the gpu-selftest result), their DSSE
//! envelopes signed with ECDSA P-256, and the registry layout cosign reads (`sha256-<hex>.att`
//! and `.sig` tags). Pure: values in, values out. Reading keys and talking to the registry is
//! `commands/attest.rs`'s job, through `docker::Registries`.
//!
//! Order of work: [`statement`] wraps a predicate ([`provenance`], [`sbom`], [`selftest`]) with
//! its subject; [`dsse`] signs and verifies the envelope; [`cosign`] lays envelopes and the
//! simple-signing payload out as OCI manifests; [`check`] decides, from what the registry
//! served, whether an image's attestations are whole.

pub(crate) mod check;
pub mod cosign;
pub(crate) mod dsse;
pub(crate) mod index;
pub(crate) mod policy;
pub(crate) mod provenance;
pub(crate) mod referrers;
pub mod sbom;
pub(crate) mod selftest;
pub(crate) mod statement;

/// The predicate types imagegen attaches, one statement each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum PredicateKind {
    Provenance,
    Sbom,
    GpuSelftest,
}

impl PredicateKind {
    pub(crate) const ALL: [PredicateKind; 3] = [
        PredicateKind::Provenance,
        PredicateKind::Sbom,
        PredicateKind::GpuSelftest,
    ];

    /// The `predicateType` URI.
    pub(crate) fn uri(self) -> &'static str {
        match self {
            PredicateKind::Provenance => provenance::PREDICATE_TYPE,
            PredicateKind::Sbom => sbom::PREDICATE_TYPE,
            PredicateKind::GpuSelftest => selftest::PREDICATE_TYPE,
        }
    }

    /// The short name used in the manifest and in messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            PredicateKind::Provenance => "provenance",
            PredicateKind::Sbom => "sbom",
            PredicateKind::GpuSelftest => "gpu-selftest",
        }
    }

    pub(crate) fn from_uri(uri: &str) -> Option<PredicateKind> {
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

#[cfg(test)]
mod tests;
