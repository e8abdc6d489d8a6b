//! End of life: a cell whose OS release, or whose nvidia/cuda image set, is past its end of life
//! or within [`WARN_DAYS`] of it, by the sourced dates of the knowledge. Pure: today is a value
//! of the options (the commands read the clock, or `IMAGEGEN_TODAY`); without one nothing is
//! judged. The matrix's `end_of_life: refuse` turns the warning into a rejection of the cell.

use crate::model::knowledge::{EndOfLife, Knowledge};
use crate::model::matrix::Matrix;
use crate::resolve::image::Resolved;

/// How close to an end of life a cell is warned about.
pub(crate) const WARN_DAYS: i64 = 90;

/// One end of life a cell meets: what reaches it, when, and the sources that say so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EolFinding {
    /// `ubuntu20.04` or `nvidia/cuda 12.6.0 images`.
    pub(crate) subject: String,
    pub(crate) date: String,
    /// Days from today to the date: negative once past.
    pub(crate) days_left: i64,
    /// Each source as key and locator, then the note and whether the date is unverified.
    pub(crate) cited: String,
}

impl EolFinding {
    /// One sentence naming the subject, the date and the sources.
    pub(crate) fn describe(&self) -> String {
        let when = if self.days_left < 0 {
            format!(
                "reached end of life on {} ({} days ago)",
                self.date, -self.days_left
            )
        } else {
            format!(
                "reaches end of life on {} (in {} days)",
                self.date, self.days_left
            )
        };
        format!("{} {when}; source: {}", self.subject, self.cited)
    }
}

/// The ends of life `found` meets on day `today` (days since the epoch).
pub(crate) fn eol_findings(
    found: &Resolved,
    matrix: &Matrix,
    knowledge: &Knowledge,
    today: i64,
) -> Vec<EolFinding> {
    let mut findings = Vec::new();
    let mut consider = |subject: String, eol: &EndOfLife| {
        let days_left = eol.date.days_since_epoch() - today;
        if days_left > WARN_DAYS {
            return;
        }
        let mut cited = eol
            .source
            .iter()
            .zip(knowledge.locate(&eol.source))
            .map(|(key, locator)| format!("{key} ({locator})"))
            .collect::<Vec<_>>()
            .join(", ");
        if let Some(note) = &eol.note {
            cited.push_str(&format!("; {note}"));
        }
        if !eol.verified {
            cited.push_str("; unverified");
        }
        findings.push(EolFinding {
            subject,
            date: eol.date.to_string(),
            days_left,
            cited,
        });
    };
    if let Some(eol) = knowledge.os(&found.os).and_then(|os| os.eol.as_ref()) {
        consider(found.os.to_string(), eol);
    }
    // NVIDIA's image set matters where the cell builds on nvidia/cuda (no base of the team's own).
    if !matrix.base_images.covers_os(&found.os) {
        if let Some(eol) = &found.cuda_release.images_eol {
            consider(
                format!("nvidia/cuda {} images", found.cuda_release.version),
                eol,
            );
        }
    }
    findings
}
