//! The edge of imagegen that talks to the outside world about images: the Docker Engine API
//! (through bollard: build, tag, push, run, inspect), OCI distribution registries (plain HTTP(S):
//! manifests, config blobs, tag existence), the user's Docker credential configuration, and the
//! Python package index `imagegen knowledge derive` reads (`pypi_index`: PEP 691/503 pages, PEP 658
//! metadata, byte ranges of wheels), whose answers it hands to the model's parsers.
//!
//! This module owns the wire protocols, the error messages that name the daemon address, image
//! reference or registry host involved, retrying of transient registry failures and the redaction
//! of credentials. It must not decide policy: it knows nothing about matrices, specs, fingerprints
//! or which images to build; callers pass plain tags, labels and byte buffers, and get plain values
//! back.
//!
//! A build, test and push, as the executor strings them together:
//!
//! ```no_run
//! use imagegen::docker::*;
//! # async fn example() -> Result<(), DockerError> {
//! let engine = Engine::connect().await?; // DOCKER_HOST or the default socket
//! let context = context_tar(std::path::Path::new("images/torch-2.7.0-cu128"), &[])?;
//! let mut request = BuildRequest::new("registry.example.com/ml/torch:2.7.0-cu128", context);
//! request.labels.insert("imagegen.fingerprint".into(), "sha256:...".into());
//! let image_id = engine.build(request, |line| println!("{line}")).await?;
//!
//! let output = engine
//!     .run(RunRequest {
//!         image: image_id.clone(),
//!         cmd: vec!["gpu-selftest".into(), "--format".into(), "json".into()],
//!         entrypoint: Some(vec![]), // no banner from nvidia/cuda's entrypoint before the JSON
//!         gpus: engine.gpu_runtime_available().await?,
//!         shm_size_bytes: Some(8 << 30),
//!         ..Default::default()
//!     })
//!     .await?;
//! assert_eq!(output.exit_code, 0);
//!
//! let repository = "registry.example.com/ml/torch";
//! let registries = Registries::default(); // the user's Docker config, read once
//! let credentials = registries.credentials(repository)?;
//! let digest = engine
//!     .push(repository, "2.7.0-cu128", credentials.as_ref(), |_| {})
//!     .await?;
//! let registry = registries.client(repository)?;
//! let path = repository_path_of(repository); // "ml/torch"
//! let recorded = registry.manifest_digest(path, "2.7.0-cu128").await?;
//! assert_eq!(recorded.map(|d| d.to_string()), Some(digest));
//! # Ok(())
//! # }
//! ```

mod context;
mod engine;
mod error;
pub(crate) mod layer_store;
pub(crate) mod pypi_index;
pub(crate) mod run_journal;
pub(crate) mod wheel_cache;

pub(crate) use context::{append_to_context, context_tar_leaving_out, ContextWheels, DiskFile};
pub use context::{context_tar, ContextFile};
pub(crate) use engine::Removal;
pub use engine::{build_step_progress, BuildRequest, Engine, LocalImage, RunOutput, RunRequest};
pub use error::DockerError;
// The registry edge is its own crate (crates/imagegen-oci); its names are re-exported here, where
// the commands have always found them.
pub(crate) use imagegen_oci::registry_host_of;
pub(crate) use imagegen_oci::DEFAULT_TIMEOUT as DEFAULT_REGISTRY_TIMEOUT;
pub use imagegen_oci::{
    repository_path_of, Credentials, DockerConfig, Registries, RegistryClient, RegistryError,
    RegistryManifest, RetryPolicy, MEDIA_TYPE_DOCKER_MANIFEST, MEDIA_TYPE_OCI_INDEX,
};
