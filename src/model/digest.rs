//! Content digests, as the registry crate defines them: `sha256:` and 64 lowercase hex digits, or
//! no value at all. [`Digest`] lives in `imagegen-oci` (the registry client hands them out and
//! takes them in) and is the one digest type of imagegen; this module keeps its old path.

pub use imagegen_oci::{Digest, DigestError};
