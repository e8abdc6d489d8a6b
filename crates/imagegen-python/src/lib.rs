//! imagegen's Python packaging edge: what a package index, a lock and a wheel say, as values that
//! can only be built valid. A [`PackageName`] is normalized (PEP 503) when it is parsed; a
//! [`WheelFilename`] is split once (PEP 427) into a name, a PEP 440 [`Version`], a build tag and
//! its compatibility tags, so no caller splits a file name by hand or compares versions as text;
//! an [`IndexRequirement`] is a PEP 508 requirement (through `pep508_rs`, uv's parser) naming a
//! package an index serves; [`linux_cpython`] is the marker environment of a CPython on Linux;
//! [`Target`] says which wheels pip installs on an image's Python and platform; [`wheel_zip`]
//! reads a wheel's `METADATA` from the few byte ranges an HTTP server hands out; [`lock`] reads
//! the pip requirements file a lock is into [`LockedPackage`]s (name, PEP 440 version, [`Sha256`]
//! hashes, the index uv took it from).
//!
//! Pure and leaf: text and bytes in, values out; no I/O, and nothing of imagegen's. The model
//! is uv's leaf crates (`uv-normalize`, `uv-pep508`, `uv-distribution-filename`).

pub mod lock;
mod requirement;
mod tags;
mod wheel_filename;
pub mod wheel_zip;

pub use lock::{parse_lock, LockError, LockedPackage, Sha256, Sha256Error};
pub use pep508_rs::pep440_rs::{Operator, Version, VersionParseError};
pub use pep508_rs::{ExtraName, InvalidNameError, MarkerEnvironment, PackageName, Requirement};
pub use requirement::{
    linux_cpython, parse_requirement, pinned_version, IndexRequirement, RequirementError,
};
pub use tags::Target;
pub use wheel_filename::{WheelFilename, WheelFilenameError};
