//! The manifest and what is decided from it: the record of every image built, pushed and tested,
//! kept as history (`manifest`), behind its one door (`ledger`: every change is a
//! `ledger::Transaction` on a `ledger::Store`; nothing outside this folder can change the record
//! otherwise); the alias transaction every alias move goes through, and the one loop that settles
//! moves left in between (`alias_transaction`); merging the manifests of CI shards (`merge`);
//! the upgrade plan a person reviews before tags move (`upgrade`); the alias guard (`aliases`);
//! rollback targets (`rollback`); the attestations pushed per digest (`attestations`); what
//! changed between two images (`diff`); the manifest against what the registry serves
//! (`verify`); self-test results per digest and the test policy that gates alias moves
//! (`test_results`); what `manifest prune` drops (`prune`); the apt extras' versions a build
//! recorded beside the image (`apt_lock`). Pure, values in and values out, but for the door and
//! the alias transaction, which do their I/O through the traits they are handed (a store, a
//! registry); it must not talk to Docker or the file system itself.

pub(crate) mod alias_transaction;
pub(crate) mod aliases;
pub(crate) mod apt_lock;
pub(crate) mod attestations;
pub(crate) mod diff;
pub(crate) mod ledger;
pub(crate) mod manifest;
pub(crate) mod merge;
pub(crate) mod prune;
pub(crate) mod pull_cost;
pub(crate) mod rollback;
pub(crate) mod test_results;
pub(crate) mod upgrade;
pub(crate) mod verify;
