//! The alias guard: a moving alias never moves backwards to an older torch release by itself;
//! going back is `imagegen rollback`, on purpose. Pure.

use crate::model::version::TorchVersion;

/// Whether `alias` may move from the image it points at now (`current`) to `candidate`: never
/// backwards to an older torch release. `None` when it may; else the reason it may not.
pub fn alias_guard(
    alias: &str,
    current: Option<(String, String)>,
    candidate_torch: &str,
    candidate_tag: &str,
) -> Option<String> {
    let (current_tag, current_torch) = current?;
    let version = |text: &str| TorchVersion::parse(text).map(|t| t.version).ok();
    match (version(&current_torch), version(candidate_torch)) {
        (Some(now), Some(next)) if next < now => Some(format!(
            "{alias} would move backwards from torch {current_torch} ({current_tag}) to {candidate_torch} ({candidate_tag}); use `imagegen rollback {alias}` to go back on purpose"
        )),
        _ => None,
    }
}
