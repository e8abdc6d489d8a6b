//! The values a matrix is made of and checked against: the matrix schema and its validation
//! (`file:line` errors), version types, and the compatibility knowledge as data. Parsing what it
//! is handed is the only I/O here.

pub mod axes;
pub mod bases;
pub mod date;
pub mod digest;
pub mod extensions;
pub mod flavours;
pub mod knowledge;
pub mod matrix;
pub mod names;
pub mod version;
pub mod wheel_tags;

/// Which gpu-selftest build serves an image: the rule gpu-selftest itself uses, from the one
/// file both crates share, so the binary copied into an image and the one the self-test expects
/// cannot disagree.
#[path = "../../selftest/src/binary_name.rs"]
pub mod selftest_binary;
pub mod yaml;
