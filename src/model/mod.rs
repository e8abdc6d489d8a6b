//! The values a matrix is made of and checked against: the matrix schema and its validation
//! (`file:line` errors), version types, and the compatibility knowledge as data. Parsing what it
//! is handed is the only I/O here.

pub mod axes;
pub mod digest;
pub mod knowledge;
pub mod matrix;
pub mod names;
pub mod version;
pub mod yaml;
