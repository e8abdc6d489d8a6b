//! imagegen's OCI registry edge, for what the Docker daemon cannot answer: [`Digest`], a content
//! digest (`sha256:` and 64 hex digits) checked when made; [`Reference`], an image
//! reference parsed once by the `distribution/reference` grammar; [`RegistryClient`], a small
//! client of the distribution API (registry v2) over HTTP(S) (whether a tag exists and under
//! which digest, image labels, raw manifests, blobs, OCI 1.1 referrers); [`Registries`], the one
//! factory of clients (the user's Docker config read once, one deadline and retry policy for all);
//! [`DockerConfig`] and [`Credentials`], the Docker client's credential configuration
//! (`credHelpers`, `credsStore`, `auths`); [`RetryPolicy`], the backoff of transient failures.
//!
//! Leaf: it depends on nothing of imagegen's and knows nothing about which tags imagegen uses.
//! Every failure is a [`RegistryError`] naming the registry host, never a secret.
//!
//! # Why not `oci-client`
//!
//! `oci-client` 0.18 was tried against what this client must do (issue 44): it pushed and read
//! manifests on Debian's `docker-registry` 2.8 over plain http, but
//! - a 429 or 503 comes back as an error without its status or headers, so `Retry-After` cannot
//!   be honoured (nor refused when it asks for longer than the deadline);
//! - a Docker config `identitytoken` is sent as a bearer token as is, not exchanged at the
//!   realm (`grant_type=refresh_token`), so registries whose helpers hand out identity tokens
//!   (ECR, ACR, GCR) answer 401;
//! - a manifest PUT hands back the `Location`, not `OCI-Subject`, so whether the registry indexed
//!   a referrer (and no fallback tag is needed) is lost;
//! - it has no retries of its own, a deadline per read rather than per request, and brings
//!   reqwest 0.13, chrono and http-auth (about 40 crates) besides ureq, which imagegen keeps for
//!   the PyPI client.
//!
//! Wrapping it would mean re-implementing the parts that matter here around it, so the client
//! stays imagegen's own, in this crate, behind the same tests.

mod auth;
mod credentials;
mod digest;
mod error;
mod reference;
mod registries;
mod registry;
mod retry;

pub use credentials::{Credentials, DockerConfig};
pub use digest::{Digest, DigestError};
pub use error::RegistryError;
pub use reference::{registry_host_of, repository_path_of, Reference, ReferenceError, DOCKER_HUB};
pub use registries::Registries;
pub use registry::{
    https_agent, RegistryClient, RegistryManifest, DEFAULT_TIMEOUT, MEDIA_TYPE_DOCKER_MANIFEST,
    MEDIA_TYPE_OCI_INDEX,
};
pub use retry::{is_transient_message, RetryPolicy};

/// An error and its sources as one line, each cause once. Public for imagegen's Docker edge,
/// which words the daemon's errors the same way.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}
