//! What building one image came to: its status, the self-test outcome, the digest pushed, the
//! aliases moved or held, and why it failed. Values the executor produces, the manifest fold and
//! the command's summary read.

use serde::Serialize;

use crate::history::manifest::{ImageSize, Packages, TestStatus};
use crate::model::digest::Digest;
use crate::pipeline::steps::Stage;

/// What the self-test said.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub(crate) enum TestOutcome {
    Pass {
        summary: String,
        report: Option<serde_json::Value>,
    },
    Fail {
        summary: String,
        report: Option<serde_json::Value>,
    },
    /// Not run: no GPU on the host, or `--no-test`.
    Skipped { summary: String },
    /// The self-test could not run (exit 2, unreadable output, container failure).
    Error {
        summary: String,
        report: Option<serde_json::Value>,
    },
}

impl TestOutcome {
    pub(crate) fn status(&self) -> TestStatus {
        match self {
            TestOutcome::Pass { .. } => TestStatus::Pass,
            TestOutcome::Fail { .. } => TestStatus::Fail,
            TestOutcome::Skipped { .. } => TestStatus::Skipped,
            TestOutcome::Error { .. } => TestStatus::Error,
        }
    }

    pub(crate) fn summary(&self) -> &str {
        match self {
            TestOutcome::Pass { summary, .. }
            | TestOutcome::Fail { summary, .. }
            | TestOutcome::Skipped { summary }
            | TestOutcome::Error { summary, .. } => summary,
        }
    }

    pub(crate) fn report(&self) -> Option<&serde_json::Value> {
        match self {
            TestOutcome::Pass { report, .. }
            | TestOutcome::Fail { report, .. }
            | TestOutcome::Error { report, .. } => report.as_ref(),
            TestOutcome::Skipped { .. } => None,
        }
    }
}

/// An image with the same build key that already exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Existing {
    /// In the local daemon, with this image id.
    Local(Digest),
    /// Already pushed to the registry, with this manifest digest (not present locally).
    Registry(Digest),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Built,
    /// An image with the same build key already existed.
    Reused,
    Failed,
    /// Not attempted because the image it builds on failed.
    Skipped,
    Interrupted,
    /// Unchanged since the push the manifest records (this build key, its digest), and its
    /// registry did not answer, so not checked that it still serves it: nothing pushed, moved or
    /// recorded. Not a failure of the image; not a success of the run either.
    Unchecked,
}

/// What happened to one image.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ImageResult {
    /// The image's folder in `images/` (its full tag without `{revision}` and `{date}`): what a
    /// run keys its images by.
    pub(crate) name: String,
    /// The full tag it is built and pushed as, its revision and date filled: what people read.
    pub(crate) tag: String,
    pub(crate) status: Status,
    pub(crate) image_id: Option<Digest>,
    pub(crate) digest: Option<Digest>,
    pub(crate) test: Option<TestOutcome>,
    /// The packages read from the image (not read again for an image reused with a passed test).
    pub(crate) packages: Option<Packages>,
    /// Its size as pushed (see [`ImageSize`]): measured by this run, or as the manifest records
    /// it for this build key; `None` when neither knows.
    pub(crate) size: Option<ImageSize>,
    pub(crate) aliases_moved: Vec<String>,
    /// Things worth knowing that did not fail the image (packages not readable, ...).
    pub(crate) notes: Vec<String>,
    /// Aliases held, with why: a rollback's hold until `imagegen release`, the never-backwards
    /// guard, a failed test or signature, a plan that judged no test. Never an alias that only
    /// waits for a GPU test: that one is in `aliases_awaiting`.
    pub(crate) aliases_held: Vec<(String, String)>,
    /// The aliases that wait for the test policy (`tests.require`): recorded on the image so
    /// that `imagegen test` moves them once the results hold.
    pub(crate) aliases_awaiting: Vec<String>,
    /// What the test policy still wants for `aliases_awaiting`: the GPU models with no passing
    /// result yet (`any GPU` where the policy names none).
    pub(crate) awaiting_results_on: Vec<String>,
    /// Which stage failed: `lookup` (local or registry), `build`, `test`, `push`, `sign`,
    /// `alias`, `record`; the stage of the step that failed ([`crate::pipeline::steps::Step::stage`]).
    pub(crate) failed_stage: Option<Stage>,
    pub(crate) error: Option<String>,
    pub(crate) seconds: f64,
}

impl ImageResult {
    pub(crate) fn new(name: &str, tag: &str, status: Status) -> ImageResult {
        ImageResult {
            name: name.to_string(),
            tag: tag.to_string(),
            status,
            image_id: None,
            digest: None,
            test: None,
            packages: None,
            size: None,
            aliases_moved: Vec::new(),
            notes: Vec::new(),
            aliases_held: Vec::new(),
            aliases_awaiting: Vec::new(),
            awaiting_results_on: Vec::new(),
            failed_stage: None,
            error: None,
            seconds: 0.0,
        }
    }

    pub(crate) fn succeeded(&self) -> bool {
        matches!(self.status, Status::Built | Status::Reused)
    }
}
