//! The manifest: what was built, pushed and tested, kept as history (`manifest`), and merging
//! manifests of CI shards (`merge`).

pub mod manifest;
pub mod merge;
