//! The values a matrix is made of and checked against: the matrix schema and its validation
//! (`file:line` errors), version types, and the compatibility knowledge as data. Parsing what it
//! is handed is the only I/O here.

pub mod axes;
pub(crate) mod bases;
pub(crate) mod date;
pub mod digest;
pub(crate) mod extensions;
pub(crate) mod flavours;
#[cfg(test)]
mod hostile;
pub(crate) mod http_url;
pub mod knowledge;
pub mod matrix;
pub(crate) mod names;
pub(crate) mod venv_holds;
pub(crate) mod version;

/// Which gpu-selftest build serves an image: the rule gpu-selftest itself uses, from the one
/// file both crates share, so the binary copied into an image and the one the self-test expects
/// cannot disagree.
#[path = "../../selftest/src/binary_name.rs"]
pub mod selftest_binary;
pub(crate) mod yaml;
