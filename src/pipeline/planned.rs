//! The plan as data: every image a build will make, in order, with its build key, what it
//! depends on, the aliases it may move and the steps ([`Step`]) the executor runs for it; and
//! the steps of the run before any image's. Computed by `plan::plan` before the first Docker
//! call; run by the executor and the command, printed by `build --dry-run` and `imagegen plan`,
//! read by the manifest fold and the command's tables.

use serde::Serialize;

use crate::history::manifest::ImageSize;
use crate::history::upgrade::UpgradePlan;
use crate::model::digest::Digest;
use crate::pipeline::steps::{RunStep, Step};
use crate::resolve::image::ImageSpec;

/// One image of the plan.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlannedImage {
    pub(crate) spec: ImageSpec,
    /// `repository:tag`.
    pub(crate) reference: String,
    /// sha256 over the fingerprint, the exact build context and the parent's build key: an image
    /// carrying this key as a label is reused instead of rebuilt.
    pub(crate) build_key: Digest,
    /// The image that must be built first (devel → its runtime).
    pub(crate) depends_on: Option<String>,
    /// Aliases this image may move to itself once it passed its test.
    pub(crate) aliases: Vec<String>,
    /// The manifest says an image with this build key passed its self-test: a reused local image
    /// is not tested again.
    pub(crate) passed_before: bool,
    /// sha256 of the gpu-selftest baseline the self-test is judged against, if any.
    pub(crate) selftest_baseline: Option<Digest>,
    /// The digest the manifest records for this build key, if it was pushed before.
    pub(crate) recorded_digest: Option<Digest>,
    /// The size the manifest records for this build key, if any.
    pub(crate) recorded_size: Option<ImageSize>,
    /// Aliases this image earns but may not take (they would move backwards), with why.
    pub(crate) aliases_blocked: Vec<(String, String)>,
    /// What the test policy (`tests.require`) still wants before this image's aliases move,
    /// judged on the results the manifest records for this build key: GPU models without a
    /// passing result, `any GPU`, or nothing.
    pub(crate) tests_missing: Vec<String>,
    /// What the executor does for this image, in order (`executor::run_step` runs each).
    pub(crate) steps: Vec<Step>,
}

/// The whole plan: the images to build, in build order, and what that changes compared with
/// the manifest (the review `imagegen plan` prints), from one computation.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Plan {
    /// The steps of the run before any image's: what serves every image at once.
    pub(crate) before: Vec<RunStep>,
    pub(crate) images: Vec<PlannedImage>,
    /// New and rebuilt images and why, alias moves and holds, rising driver minimums, images no
    /// longer produced: over every image of the matrix, not only those selected to build.
    pub(crate) review: UpgradePlan,
}
