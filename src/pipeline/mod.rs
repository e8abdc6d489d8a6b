//! Building: the pure build plan (`plan`), the executor over a [`executor::Builder`] trait
//! (`executor`), and the Docker adapter that implements it (`docker_builder`), with the build
//! output for people (`progress`). Bollard types never leave the `docker` module.

pub(crate) mod docker_builder;
pub(crate) mod executor;
pub(crate) mod image_diff;
pub(crate) mod normalize;
pub(crate) mod plan;
pub(crate) mod planned;
pub(crate) mod progress;
pub(crate) mod record;
pub(crate) mod relabel;
pub(crate) mod results;
pub(crate) mod selftest;
pub(crate) mod steps;
pub(crate) mod venv_cut;
pub(crate) mod wheel_install;
