//! The integration tests, in one test binary so the suite links the crate once. Each module is
//! an area; the Docker ones run against the real daemon and a real registry on 127.0.0.1 and
//! fail, never skip, when the daemon is missing.

mod attest;
mod bases;
mod build;
mod cli;
mod compiled;
mod docker_engine;
mod docker_host_env;
mod docs_links;
mod examples;
mod extensions;
mod faults;
mod flavour_services;
mod flavours;
mod generators;
mod gpu_tests;
mod host_venv;
mod layout;
mod limits;
mod multiarch;
mod real_build;
mod references;
mod reproducible;
mod support;
mod tiers;
mod upgrade;
mod wheel_cache;

/// Every Rust file of the workspace is compiled into a target: a module whose `mod` line was
/// removed (here, or a `mod tests;` in `src/` or `selftest/`) fails this test, named. It lives
/// in the crate root, not in a module, so that no `mod` line can drop it; the walk it runs is
/// in [`compiled`], which this crate cannot build without.
#[test]
fn every_rust_file_in_the_tree_is_compiled_into_a_target() {
    compiled::assert_every_file_is_compiled();
}
