//! Files imagegen writes for other tools: a `docker buildx bake` file (`bake`), the GitHub Actions
//! build matrix (`github`) and Kubernetes Jobs (`k8s`). Pure: image specs in, documents out.

pub mod bake;
pub mod github;
pub(crate) mod gitlab;
pub mod k8s;
pub(crate) mod oci_index;
