//! The integration tests, in one test binary so the suite links the crate once. Each module is
//! an area; the Docker ones run against the real daemon and a real registry on 127.0.0.1 and
//! fail, never skip, when the daemon is missing.

mod build;
mod cli;
mod docker_engine;
mod docker_host_env;
mod faults;
mod generators;
mod layout;
mod limits;
mod multiarch;
mod real_build;
mod support;
mod upgrade;
