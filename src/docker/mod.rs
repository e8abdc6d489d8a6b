//! The edge of imagegen that talks to the outside world about images: the Docker Engine API
//! (through bollard: build, tag, push, run, inspect), OCI distribution registries (plain HTTP(S):
//! manifests, config blobs, tag existence) and the user's Docker credential configuration.
//!
//! This module owns the wire protocols, the error messages that name the daemon address, image
//! reference or registry host involved, retrying of transient registry failures and the redaction
//! of credentials. It must not decide policy: it knows nothing about matrices, specs, fingerprints
//! or which images to build; callers pass plain tags, labels and byte buffers, and get plain values
//! back.

mod context;
mod credentials;
mod engine;
mod error;
mod registry;
mod retry;

pub use context::{context_tar, ContextFile};
pub use credentials::{registry_host_of, Credentials, DockerConfig};
pub use engine::{
    build_step_progress, BuildRequest, Engine, LocalImage, RunOutput, RunRequest,
    DEFAULT_DOCKER_HOST,
};
pub use error::DockerError;
pub use registry::{
    RegistryClient, RegistryManifest, MEDIA_TYPE_DOCKER_MANIFEST, MEDIA_TYPE_DOCKER_MANIFEST_LIST,
    MEDIA_TYPE_OCI_INDEX, MEDIA_TYPE_OCI_MANIFEST,
};
pub use retry::RetryPolicy;
