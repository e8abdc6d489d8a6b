//! imagegen: resolve a matrix of PyTorch × CUDA × cuDNN × Python × OS into GPU container images,
//! render their Dockerfiles, build them through the Docker Engine API, test them on GPUs with the
//! bundled `gpu-selftest`, tag and push them, and keep a manifest of every digest.
//!
//! The pure modules (`matrix`, `compat`, `resolve`, `render`, `tags`, `fingerprint`, `plan`) take
//! values and return values; `docker` and the file writers live at the edges.

pub mod app;
pub mod bake;
pub mod build;
pub mod ci;
pub mod cli;
pub mod compat;
pub mod docker;
pub mod engine_builder;
pub mod fanout_commands;
pub mod fingerprint;
pub mod k8s;
pub mod knowledge_command;
pub mod manifest;
pub mod manifest_merge;
pub mod matrix;
pub mod plan;
pub mod progress;
pub mod project;
pub mod publish;
pub mod pypi_index;
pub mod render;
pub mod resolve;
pub mod run_build;
pub mod tags;
pub mod upgrade;
pub mod version;
