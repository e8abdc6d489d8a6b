//! The images a run's builds made, written down as they are made, so that a later run can remove
//! what a killed run left. The classic builder commits an image after every step and labels only
//! the last one; when the run is killed mid-build (SIGKILL, a crash) the daemon stops the step's
//! container, but the images of the finished steps stay, untagged, with no label that names the
//! run. The journal is the run's own record of them: `<dir>/<run id>.images`, created before the
//! first build starts (intent), one image ID appended per finished step (result), removed when
//! the run ends normally.
//!
//! This module owns the file format and the file system; which runs are gone, and which images
//! may go, is the caller's decision (`commands/build.rs`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file name suffix of a run's journal.
const SUFFIX: &str = ".images";

/// This run's journal, open for appending.
#[derive(Debug)]
pub(crate) struct RunJournal {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

/// A journal found on disk: the run it belongs to and the images it recorded, in the order they
/// were made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JournalEntry {
    pub(crate) run: String,
    pub(crate) images: Vec<String>,
    pub(crate) path: PathBuf,
}

impl RunJournal {
    /// Creates `<dir>/<run>.images` (and `dir`), before any image of the run exists.
    pub(crate) fn create(dir: &Path, run: &str) -> std::io::Result<RunJournal> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{run}{SUFFIX}"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        Ok(RunJournal {
            path,
            file: Mutex::new(file),
        })
    }

    /// Appends one image ID. The line is written at once (no buffer), so a SIGKILL right after
    /// the step still finds it on disk.
    pub(crate) fn record(&self, image_id: &str) -> std::io::Result<()> {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(format!("{image_id}\n").as_bytes())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the journal: the run ends normally, so its images are results or build cache,
    /// not leftovers.
    pub(crate) fn finish(&self) -> std::io::Result<()> {
        remove(&self.path)
    }
}

/// Every journal in `dir` (none when `dir` does not exist), sorted by run.
pub(crate) fn journals(dir: &Path) -> std::io::Result<Vec<JournalEntry>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let Some(run) = path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_suffix(SUFFIX))
            .map(str::to_string)
        else {
            continue;
        };
        let images = std::fs::read_to_string(&path)?
            .lines()
            .map(str::trim)
            .filter(|line| is_image_id(line))
            .map(str::to_string)
            .collect();
        found.push(JournalEntry { run, images, path });
    }
    found.sort_by(|a, b| a.run.cmp(&b.run));
    Ok(found)
}

/// Removes a journal that was handled; one already gone is fine.
pub(crate) fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// A short (12) or full (64) hex image ID, with or without `sha256:`: what the journal holds.
/// Anything else in the file (a line cut by the kill) is skipped.
fn is_image_id(text: &str) -> bool {
    let hex = text.strip_prefix("sha256:").unwrap_or(text);
    (hex.len() == 12 || hex.len() == 64) && hex.chars().all(|c| c.is_ascii_hexdigit())
}

/// The images a classic build's steps committed, read from its output line by line. A `FROM`
/// step's arrow names the base image, which is not the build's own (a base pulled by digest has
/// no tag and would look like a leftover): it is never given.
#[derive(Debug, Default)]
pub(crate) struct StepImages {
    in_from: bool,
}

impl StepImages {
    /// The image of the step this line ends (` ---> 1a2b3c4d5e6f`); `None` for every other line
    /// (` ---> Running in …`, ` ---> Using cache`, output) and for a `FROM` step's.
    pub(crate) fn see<'a>(&mut self, line: &'a str) -> Option<&'a str> {
        if let Some(step) = line.strip_prefix("Step ") {
            self.in_from = step.split_once(" : ").is_some_and(|(_, instruction)| {
                instruction
                    .split_whitespace()
                    .next()
                    .is_some_and(|word| word.eq_ignore_ascii_case("FROM"))
            });
            return None;
        }
        let id = line.strip_prefix(" ---> ")?.trim_end();
        (!self.in_from && id.len() == 12 && id.chars().all(|c| c.is_ascii_hexdigit())).then_some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_images_are_read_from_the_builders_arrow_lines_only_and_never_the_base() {
        let mut steps = StepImages::default();
        let seen: Vec<Option<&str>> = [
            "Step 1/3 : FROM imagegen-test/base:1@sha256:00",
            " ---> 000000000000",
            "Step 2/3 : RUN true",
            " ---> Running in 1a2b3c4d5e6f",
            " ---> 1a2b3c4d5e6f",
            "Step 3/3 : LABEL a=b",
            " ---> Using cache",
            " ---> 0123456789ab",
            " ---> 1a2b3c",
            "Step 1/1 : from other",
            " ---> ffffffffffff",
        ]
        .into_iter()
        .map(|line| steps.see(line))
        .collect();
        let images: Vec<&str> = seen.into_iter().flatten().collect();
        assert_eq!(images, vec!["1a2b3c4d5e6f", "0123456789ab"]);
    }

    #[test]
    fn a_journal_keeps_what_was_recorded_until_finished() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        assert_eq!(journals(&runs).unwrap(), Vec::new());
        let journal = RunJournal::create(&runs, "abc-1-2").unwrap();
        journal.record("1a2b3c4d5e6f").unwrap();
        journal.record("0123456789ab").unwrap();
        // A line cut short by a kill is skipped, not taken as an image.
        std::fs::write(runs.join("dead-9-9.images"), "ffffffffffff\nfff").unwrap();
        let found = journals(&runs).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].run, "abc-1-2");
        assert_eq!(found[0].images, vec!["1a2b3c4d5e6f", "0123456789ab"]);
        assert_eq!(found[1].images, vec!["ffffffffffff"]);
        journal.finish().unwrap();
        assert_eq!(journals(&runs).unwrap().len(), 1);
        remove(&runs.join("dead-9-9.images")).unwrap();
        remove(&runs.join("dead-9-9.images")).unwrap();
        assert_eq!(journals(&runs).unwrap(), Vec::new());
    }
}
