//! The manifest and what is decided from it: the record of every image built, pushed and tested,
//! kept as history (`manifest`); merging the manifests of CI shards (`merge`); the upgrade plan a
//! person reviews before tags move (`upgrade`); the alias guard (`aliases`); the alias transaction every alias move goes through
//! (`alias_transaction`); rollback targets
//! (`rollback`); the attestations pushed per digest (`attestations`); what changed between two
//! images (`diff`); the manifest against what the registry serves, with alias moves left in
//! between settled (`verify`); self-test results per digest and the test policy that gates alias
//! moves (`test_results`); what `manifest prune` drops (`prune`); the apt extras' versions a
//! build recorded beside the image (`apt_lock`). Pure: values in,
//! values out.

pub mod alias_transaction;
pub mod aliases;
pub mod apt_lock;
pub mod attestations;
pub mod diff;
pub mod manifest;
pub mod merge;
pub mod prune;
pub mod rollback;
pub mod test_results;
pub mod upgrade;
pub mod verify;
