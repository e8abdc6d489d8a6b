//! Building: the pure build plan (`plan`), the one alias move every command makes (`alias_move`), the executor over a [`executor::Builder`] trait
//! (`executor`), and the Docker adapter that implements it (`docker_builder`), with the build
//! output for people (`progress`). Bollard types never leave the `docker` module.

pub mod alias_move;
pub mod docker_builder;
pub mod executor;
pub mod image_diff;
pub mod normalize;
pub mod plan;
pub mod planned;
pub mod progress;
pub mod record;
pub mod results;
pub mod selftest;
