//! The alias guard: a moving alias never moves backwards to an older torch release by itself;
//! going back is `imagegen rollback`, on purpose. A torch release the guard cannot compare (a
//! record without one, or one that is not a version) holds the move: the guard never lets a
//! move through because it could not judge it. Pure.

use crate::history::manifest::Manifest;
use crate::model::version::{TorchText, TorchVersion, VersionError, VersionText};

/// Where an alias points now, as the guard reads it from the manifest: the tag, and the torch
/// release its record gives, read once into a value the guard can only compare or refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CurrentTarget {
    pub(crate) tag: String,
    pub(crate) torch: RecordedTorch,
}

/// The torch release of the image an alias points at now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RecordedTorch {
    /// The record's torch release, parsed.
    Release(TorchVersion),
    /// The record names a torch release that is not one (`2`, `2.7.1.1`): it cannot be compared,
    /// and the guard holds the move.
    Uncomparable(VersionError),
    /// The manifest has no record of the tag.
    NoRecord,
}

impl RecordedTorch {
    /// The torch release a record gives (`None`: there is no record), parsed where the manifest
    /// is read for the guard.
    pub(crate) fn of(recorded: Option<&str>) -> RecordedTorch {
        match recorded.map(TorchVersion::parse) {
            None => RecordedTorch::NoRecord,
            Some(Ok(torch)) => RecordedTorch::Release(torch),
            Some(Err(error)) => RecordedTorch::Uncomparable(error),
        }
    }
}

/// The manifest as the guard reads it (here, so the schema does not depend on the guard).
impl Manifest {
    /// What an alias points at now: its tag, and the torch release the tag's record gives, read
    /// for the never-backwards guard (which holds the move when there is no record, or when the
    /// release cannot be compared).
    pub(crate) fn alias_target(&self, alias: &str) -> Option<CurrentTarget> {
        let record = self.aliases.get(alias)?;
        Some(CurrentTarget {
            tag: record.tag.clone(),
            torch: RecordedTorch::of(self.torch_of(&record.tag)),
        })
    }
}

/// The torch release of an image record (`imagegen test` moves the aliases a record awaits), read
/// as the guard's candidate: a record whose torch is no series or release (`2`, `2.7.1.1`) cannot
/// be compared, and the reason holds the move.
pub(crate) fn recorded_candidate(
    alias: &str,
    recorded: &VersionText,
    candidate_tag: &str,
) -> Result<TorchText, String> {
    TorchText::of_version(recorded.clone()).map_err(|error| {
        format!(
            "{alias} cannot be judged: {candidate_tag} names a torch release that cannot be compared ({error}); use `imagegen rollback {alias} --to DIGEST` to move it on purpose"
        )
    })
}

/// Whether `alias` may move from the image it points at now (`current`) to `candidate`: never
/// backwards to an older torch release, and never when either release cannot be compared.
/// `None` when it may; else the reason it may not.
pub(crate) fn alias_guard(
    alias: &str,
    current: Option<CurrentTarget>,
    candidate_torch: &TorchText,
    candidate_tag: &str,
) -> Option<String> {
    let CurrentTarget {
        tag: current_tag,
        torch: current_torch,
    } = current?;
    let on_purpose = format!("use `imagegen rollback {alias} --to DIGEST` to move it on purpose");
    let now = match current_torch {
        RecordedTorch::Release(torch) => torch,
        RecordedTorch::NoRecord => {
            return Some(format!(
                "{alias} points at {current_tag}, which the manifest has no record of: its torch release cannot be compared with {candidate_torch} ({candidate_tag}); {on_purpose}"
            ))
        }
        RecordedTorch::Uncomparable(error) => {
            return Some(format!(
                "{alias} cannot be judged: the record of {current_tag} names a torch release that cannot be compared ({error}); {on_purpose}"
            ))
        }
    };
    (candidate_torch.torch().version < now.version).then(|| format!(
        "{alias} would move backwards from torch {now} ({current_tag}) to {candidate_torch} ({candidate_tag}); use `imagegen rollback {alias}` to go back on purpose"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn torch(text: &str) -> TorchText {
        TorchText::from(text)
    }

    fn target(tag: &str, torch: Option<&str>) -> Option<CurrentTarget> {
        Some(CurrentTarget {
            tag: tag.to_string(),
            torch: RecordedTorch::of(torch),
        })
    }

    #[test]
    fn forwards_and_first_moves_pass_backwards_is_held() {
        assert_eq!(alias_guard("a", None, &torch("2.7.1"), "new"), None);
        assert_eq!(
            alias_guard("a", target("old", Some("2.7.0")), &torch("2.7.1"), "new"),
            None
        );
        assert_eq!(
            alias_guard("a", target("same", Some("2.7.1")), &torch("2.7.1"), "new"),
            None
        );
        let held = alias_guard("a", target("new", Some("2.10.0")), &torch("2.9.1"), "old").unwrap();
        assert!(
            held.contains("would move backwards from torch 2.10.0 (new) to 2.9.1 (old)"),
            "{held}"
        );
    }

    #[test]
    fn a_release_that_cannot_be_compared_holds_the_move() {
        let held = alias_guard(
            "a",
            target("old", Some("2.7.1+cu126")),
            &torch("2.8.0"),
            "new",
        )
        .unwrap();
        assert!(
            held.contains("a cannot be judged: the record of old")
                && held.contains("`2.7.1+cu126` is not a valid torch version")
                && held.contains("imagegen rollback a --to DIGEST"),
            "{held}"
        );
        // The candidate side is a torch release by type; an image record whose torch is none
        // (what `imagegen test` reads) is refused before the guard, naming it.
        let held = recorded_candidate("a", &VersionText::from("2"), "new").unwrap_err();
        assert!(
            held.contains("a cannot be judged: new names a torch release that cannot be compared")
                && held.contains("`2` is not a valid torch version")
                && held.contains("imagegen rollback a --to DIGEST"),
            "{held}"
        );
        assert_eq!(
            recorded_candidate("a", &VersionText::from("2.7.1"), "new").unwrap(),
            torch("2.7.1")
        );
        let held = alias_guard("a", target("gone", None), &torch("2.8.0"), "new").unwrap();
        assert!(
            held.contains("a points at gone, which the manifest has no record of"),
            "{held}"
        );
    }
}
