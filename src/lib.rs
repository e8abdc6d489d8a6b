//! imagegen: resolve a matrix of PyTorch × CUDA × cuDNN × Python × OS into GPU container images,
//! render their Dockerfiles, build them through the Docker Engine API, test them on GPUs with the
//! bundled `gpu-selftest`, tag and push them, and keep a manifest of every digest.
//!
//! The folders follow the stages a matrix flows through, and each imports only the ones below it:
//! `commands` (the imperative shell, one file per verb) → `project` (disk → values) →
//! `pipeline`, `generate` and `attest` (what to build, what to write for other tools, and the
//! signed statements that travel with each image) → `history` (the manifest) → `render` →
//! `resolve` → `model` (matrix, versions, knowledge). `docker` is the edge that talks to the
//! Docker daemon and registries; it imports no domain module.

// `pub` is for what other crates use (the binary, `tests/it`, `bench/`, the doc examples);
// everything else is `pub(crate)` or private, so the dead-code lint sees what nothing calls.
#![warn(unreachable_pub)]

pub mod attest;
pub mod cli;
pub mod commands;
pub mod docker;
pub mod generate;
pub(crate) mod history;
pub mod model;
pub(crate) mod pipeline;
pub mod project;
pub mod render;
pub mod resolve;
