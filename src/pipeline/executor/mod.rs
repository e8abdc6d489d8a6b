//! The executor: walks a plan, calling a [`Builder`] for each image (reuse or build, test, push,
//! move aliases), up to `jobs` at a time, a devel image only after its runtime image succeeded.
//! One failed image does not stop the others. Ctrl-C or SIGTERM (the `cancel` future) stops
//! launching, drops what is in flight, and reports it as interrupted, with the step it was at.
//!
//! It knows nothing of bollard or of files: the Docker builder and the fake builder of the tests
//! both implement [`Builder`], and what changed in the registry is written down through a
//! [`Journal`] as it happens: an image's full tag once pushed (before any alias moves, so an
//! alias that fails cannot lose it), each alias move before it is made (intent) and after
//! (result). When the journal signs, an image's attestations are pushed after its full tag and
//! before any alias moves, so an alias never serves an unsigned image; a failed signing fails
//! the image and holds its aliases. Policy lives here: a failed test means no push and no
//! alias; aliases move only after the image passed (or, with `move_untested_aliases`, when no GPU could test it), and
//! never backwards, judged against the manifest as it is when the alias moves.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::history::alias_transaction::{
    move_alias, AliasOutcome, AliasRegistry, AliasRequest, AliasTarget, Owner,
};
pub(crate) use crate::history::ledger::Claim;
use crate::history::ledger::Store;
use crate::history::manifest::{ImageSize, Packages};
use crate::history::test_results::{gpu_is, ANY_GPU};
use crate::model::digest::Digest;
use crate::pipeline::planned::{Plan, PlannedImage};
pub(crate) use crate::pipeline::results::{Existing, ImageResult, Status, TestOutcome};
use futures_util::stream::{FuturesUnordered, StreamExt};

/// The Docker operations the executor needs (errors are already worded for people); alias moves
/// go through its [`AliasRegistry`] side.
pub(crate) trait Builder: AliasRegistry + Send + Sync + 'static {
    /// An image carrying this image's build key, locally or (when pushing) in the registry.
    fn find_existing(
        &self,
        image: &PlannedImage,
    ) -> impl Future<Output = anyhow::Result<Option<Existing>>> + Send;
    /// Builds and tags the full reference; returns the image id.
    fn build(&self, image: &PlannedImage) -> impl Future<Output = anyhow::Result<Digest>> + Send;
    /// Runs the self-test in a container from the image.
    fn test(&self, image: &PlannedImage) -> impl Future<Output = TestOutcome> + Send;
    /// Reads the packages inside the built image (pip and OS); `None` when the image cannot run
    /// here (another platform).
    fn contents(
        &self,
        image: &PlannedImage,
    ) -> impl Future<Output = anyhow::Result<Option<Packages>>> + Send;
    /// Pushes `repository:tag`; returns the manifest digest the registry serves for it. With
    /// `build_key` (full tags), refuses when the registry already holds that tag with other
    /// content (full tags are immutable), and pushes nothing when it holds this build key
    /// already (another run pushed it): its digest is the answer.
    fn push(
        &self,
        repository: &str,
        tag: &str,
        build_key: Option<&Digest>,
    ) -> impl Future<Output = anyhow::Result<Digest>> + Send;
    /// The size of the image this run made (built or normalized for a push) with image id
    /// `image_id`; `None` for one it did not (a reused image, not pushed again).
    fn size(&self, image_id: &Digest) -> Option<ImageSize>;
    /// Tags local `source` as `repository:tag`.
    fn tag(
        &self,
        source: &str,
        repository: &str,
        tag: &str,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Where the executor writes down what it changed, as it changes it (see the module docs); alias
/// moves are written down through its [`Store`] side (the manifest's ledger). The writes are
/// short and synchronous, so cancelling a build never leaves one half done.
pub(crate) trait Journal: Store + Send + Sync + 'static {
    /// Waits until no other run publishes `image` (its full tag and aliases), and keeps others
    /// out until the claim is dropped.
    fn claim(&self, image: &PlannedImage) -> impl Future<Output = anyhow::Result<Claim>> + Send;
    /// Writes down the result of `image` as it stands: once its full tag is pushed, and at the
    /// end.
    fn image(&self, image: &PlannedImage, result: &ImageResult) -> anyhow::Result<()>;
    /// Signs and pushes the attestations of `image`, whose full tag serves `digest` and is
    /// written down, and records them; called before any of its aliases moves (a journal that
    /// does not sign answers `Ok` at once). An error holds the aliases.
    fn attest(
        &self,
        image: &PlannedImage,
        digest: &Digest,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Which step each image in flight is at, for the report of an interruption.
#[derive(Clone, Default)]
struct Steps(Arc<Mutex<BTreeMap<String, &'static str>>>);

impl Steps {
    fn set(&self, name: &str, step: &'static str) {
        self.0
            .lock()
            .expect("steps lock")
            .insert(name.to_string(), step);
    }

    fn get(&self, name: &str) -> Option<&'static str> {
        self.0.lock().expect("steps lock").get(name).copied()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ExecOptions {
    pub(crate) jobs: usize,
    pub(crate) push: bool,
    pub(crate) test: bool,
    /// A skipped test (no GPU) fails the image.
    pub(crate) require_gpu: bool,
    /// Move aliases of images whose test was skipped (never of failed ones).
    pub(crate) move_untested_aliases: bool,
    /// The run that owns the alias moves this execution makes.
    pub(crate) owner: Owner,
}

/// Runs `plan`. Each result is written down through `journal` and goes to `on_result` as soon
/// as it is known, and all of them are returned in plan order.
pub(crate) async fn execute<B: Builder, J: Journal>(
    plan: &Plan,
    builder: Arc<B>,
    journal: Arc<J>,
    options: &ExecOptions,
    cancel: impl Future<Output = ()>,
    mut on_result: impl FnMut(&ImageResult),
) -> Vec<ImageResult> {
    let by_name: BTreeMap<&str, &PlannedImage> = plan
        .images
        .iter()
        .map(|image| (image.spec.name.as_str(), image))
        .collect();
    let mut finish = |result: &mut ImageResult| {
        if let Some(planned) = by_name.get(result.name.as_str()) {
            if let Err(error) = journal.image(planned, result) {
                result.status = Status::Failed;
                result.failed_stage = Some("record".into());
                result.error = Some(format!(
                    "{}could not be written to the manifest: {error:#}",
                    result
                        .error
                        .as_deref()
                        .map(|e| format!("{e}; also "))
                        .unwrap_or_default()
                ));
            }
        }
        on_result(result);
    };
    let steps = Steps::default();
    let in_plan: BTreeSet<String> = plan.images.iter().map(|i| i.spec.name.clone()).collect();
    let mut pending: VecDeque<PlannedImage> = plan.images.iter().cloned().collect();
    let mut outcomes: BTreeMap<String, bool> = BTreeMap::new();
    let mut results: BTreeMap<String, ImageResult> = BTreeMap::new();
    let mut in_flight: BTreeSet<String> = BTreeSet::new();
    let mut running = FuturesUnordered::new();
    let jobs = options.jobs.max(1);
    tokio::pin!(cancel);

    loop {
        let mut index = 0;
        while running.len() < jobs && index < pending.len() {
            let dependency = pending[index]
                .depends_on
                .clone()
                .filter(|d| in_plan.contains(d));
            match dependency.map(|d| outcomes.get(&d).copied()) {
                Some(None) => index += 1,
                Some(Some(false)) => {
                    let image = pending.remove(index).expect("index in range");
                    let mut result = ImageResult::new(&image.spec.name, Status::Skipped);
                    result.error = Some(format!(
                        "not built: the image it builds on, {}, failed",
                        image.depends_on.as_deref().unwrap_or("?")
                    ));
                    outcomes.insert(image.spec.name.clone(), false);
                    finish(&mut result);
                    results.insert(image.spec.name.clone(), result);
                }
                _ => {
                    let image = pending.remove(index).expect("index in range");
                    in_flight.insert(image.spec.name.clone());
                    running.push(run_one(
                        Arc::clone(&builder),
                        Arc::clone(&journal),
                        image,
                        options.clone(),
                        steps.clone(),
                    ));
                }
            }
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            Some(mut result) = running.next() => {
                in_flight.remove(&result.name);
                finish(&mut result);
                outcomes.insert(result.name.clone(), result.succeeded());
                results.insert(result.name.clone(), result);
            }
            _ = &mut cancel => {
                drop(running);
                for name in in_flight.iter().cloned().chain(pending.iter().map(|p| p.spec.name.clone())) {
                    let mut result = ImageResult::new(&name, Status::Interrupted);
                    result.error = Some(match steps.get(&name) {
                        Some(step) => format!("interrupted while {step}; nothing more was tagged, pushed or moved for it"),
                        None => "not started".to_string(),
                    });
                    finish(&mut result);
                    results.insert(name, result);
                }
                break;
            }
        }
    }
    plan.images
        .iter()
        .filter_map(|i| results.remove(&i.spec.name))
        .collect()
}

/// One image from start to finish.
async fn run_one<B: Builder, J: Journal>(
    builder: Arc<B>,
    journal: Arc<J>,
    image: PlannedImage,
    options: ExecOptions,
    steps: Steps,
) -> ImageResult {
    let start = Instant::now();
    let name = image.spec.name.clone();
    let step = |what: &'static str| steps.set(&name, what);
    let mut result = ImageResult::new(&image.spec.name, Status::Built);
    result.aliases_held = image.aliases_blocked.clone();
    let fail = |mut result: ImageResult, stage: &str, error: String| {
        result.status = Status::Failed;
        result.failed_stage = Some(stage.to_string());
        result.error = Some(error);
        result.seconds = start.elapsed().as_secs_f64();
        result
    };

    step("looking for an earlier build");
    let existing = match builder.find_existing(&image).await {
        Ok(existing) => existing,
        Err(error) => return fail(result, "lookup", format!("{error:#}")),
    };
    // Built, tested and pushed by an earlier run (the manifest records it) and not present
    // here: nothing to build, test or push; only aliases that run did not move are moved.
    let in_registry_only = matches!(existing, Some(Existing::Registry(_)));
    match existing {
        Some(Existing::Registry(digest)) => {
            result.status = Status::Reused;
            result.digest = Some(digest);
        }
        Some(Existing::Local(id)) => {
            result.status = Status::Reused;
            // Make sure the full tag points at the reused image (it may only carry another tag).
            if let Err(error) = builder
                .tag(id.as_str(), &image.spec.repository, &image.spec.tag)
                .await
            {
                return fail(result, "build", format!("{error:#}"));
            }
            result.image_id = Some(id);
        }
        None => {
            step("building");
            match builder.build(&image).await {
                Ok(id) => result.image_id = Some(id),
                Err(error) => return fail(result, "build", format!("{error:#}")),
            }
        }
    }
    // What this run measured of the image, else what the manifest records for its build key
    // (the same content: a reused image is not normalized again unless it is pushed).
    result.size = result
        .image_id
        .as_ref()
        .and_then(|id| builder.size(id))
        .or(image.recorded_size);

    let known_good = result.status == Status::Reused && image.passed_before;
    if !known_good && !in_registry_only {
        step("reading its packages");
        // An image without a shell or for another platform still builds; its packages are unknown.
        match builder.contents(&image).await {
            Ok(Some(packages)) => result.packages = Some(packages),
            Ok(None) => result
                .notes
                .push("packages not read: the image is for another platform than this host".into()),
            Err(error) => result.notes.push(format!("packages not read: {error:#}")),
        }
    }
    let test = if known_good {
        TestOutcome::Pass {
            summary: "passed when this build key was first tested (see the manifest)".into(),
            report: None,
        }
    } else if in_registry_only {
        TestOutcome::Skipped {
            summary: "not tested by this run (only in the registry) and the manifest records no pass for this build key".into(),
        }
    } else if options.test {
        step("running its self-test");
        builder.test(&image).await
    } else {
        TestOutcome::Skipped {
            summary: "not run (--no-test)".into(),
        }
    };
    if !in_registry_only {
        result.test = Some(test.clone());
    }
    match &test {
        TestOutcome::Fail { summary, .. } => {
            return fail(result, "test", format!("gpu-selftest failed: {summary}"))
        }
        TestOutcome::Error { summary, .. } => {
            return fail(
                result,
                "test",
                format!("gpu-selftest could not run: {summary}"),
            )
        }
        TestOutcome::Skipped { summary }
            if options.require_gpu && options.test && !in_registry_only =>
        {
            return fail(
                result,
                "test",
                format!("--require-gpu: the self-test was skipped ({summary})"),
            )
        }
        _ => {}
    }

    // Held until the aliases moved: another run publishing this image waits, then finds it done.
    let mut _claim = None;
    if options.push {
        step("waiting for another run that publishes the same tag");
        match journal.claim(&image).await {
            Ok(claim) => _claim = Some(claim),
            Err(error) => return fail(result, "push", format!("{error:#}")),
        }
        if !in_registry_only {
            step("pushing its full tag");
            match builder
                .push(
                    &image.spec.repository,
                    &image.spec.tag,
                    Some(&image.build_key),
                )
                .await
            {
                Ok(digest) => result.digest = Some(digest),
                Err(error) => return fail(result, "push", format!("{error:#}")),
            }
            // A reused image is normalized for its push: measured now.
            if let Some(size) = result.image_id.as_ref().and_then(|id| builder.size(id)) {
                result.size = Some(size);
            }
            // The full tag is in the registry: written down now, so that nothing that fails
            // later (an alias, an interruption) loses its digest.
            if let Err(error) = journal.image(&image, &result) {
                return fail(
                    result,
                    "record",
                    format!("pushed, but could not be written to the manifest: {error:#}"),
                );
            }
        }
    }

    // Signed before any alias moves: an alias never serves an image without its attestations.
    if options.push {
        if let Some(digest) = result.digest.clone() {
            step("signing its attestations");
            if let Err(error) = journal.attest(&image, &digest).await {
                for alias in &image.aliases {
                    result
                        .aliases_held
                        .push((alias.clone(), "not moved: the image is not signed".into()));
                }
                return fail(result, "sign", format!("not signed: {error:#}"));
            }
        }
    }

    // Whether the aliases may move now: after a pass that leaves nothing the test policy still
    // wants; they wait (recorded on the image, for `imagegen test`) when the policy wants results
    // from GPUs this run did not have; otherwise they are held.
    let gate = match &test {
        TestOutcome::Pass { report, .. } => {
            let gpus = tested_gpus(report.as_ref());
            let still: Vec<String> = image
                .tests_missing
                .iter()
                .filter(|model| {
                    model.as_str() != ANY_GPU && !gpus.iter().any(|gpu| gpu_is(gpu, model))
                })
                .cloned()
                .collect();
            if still.is_empty() {
                Gate::Move
            } else {
                Gate::Await(still)
            }
        }
        TestOutcome::Skipped { .. } if options.move_untested_aliases && !in_registry_only => {
            Gate::Move
        }
        TestOutcome::Skipped { .. } if image.tests_missing.is_empty() => Gate::Move,
        TestOutcome::Skipped { .. } if options.push => Gate::Await(image.tests_missing.clone()),
        other => Gate::Hold(format!("self-test {}: {}", other.status(), other.summary())),
    };
    step("moving its aliases");
    for alias in &image.aliases {
        if let Some(index) = &image.spec.index {
            let reason = format!(
                "moved by `imagegen publish` with the {index} index, once every platform passed"
            );
            result.aliases_held.push((alias.clone(), reason));
            continue;
        }
        match &gate {
            Gate::Move => {}
            Gate::Hold(reason) => {
                result.aliases_held.push((alias.clone(), reason.clone()));
                continue;
            }
            Gate::Await(missing) => {
                result.aliases_held.push((
                    alias.clone(),
                    format!(
                        "waits for passing self-test results on {} (matrix.yaml `tests`); `imagegen test` on such a node moves it",
                        missing.join(", ")
                    ),
                ));
                result.aliases_awaiting.push(alias.clone());
                continue;
            }
        }
        if !options.push {
            if let Err(error) = builder
                .tag(&image.reference, &image.spec.repository, alias)
                .await
            {
                return fail(result, "alias", format!("{error:#}"));
            }
            result.aliases_moved.push(alias.clone());
            continue;
        }
        let Some(digest) = result.digest.clone() else {
            return fail(
                result,
                "alias",
                "no digest to move the alias to (the full tag was not pushed)".into(),
            );
        };
        let request = AliasRequest {
            repository: &image.spec.repository,
            target: AliasTarget {
                alias,
                tag: &image.spec.tag,
                digest: &digest,
                guard_torch: Some(&image.spec.torch),
            },
            owner: &options.owner,
        };
        match move_alias(&*builder, &*journal, &request).await {
            Ok(AliasOutcome::Held(reason)) => {
                result.aliases_held.push((alias.clone(), reason));
                continue;
            }
            Ok(_) => {}
            Err(error) => return fail(result, "alias", format!("{error:#}")),
        }
        // The daemon's tag follows the registry's (after the move, so a held alias is not
        // tagged here either).
        if !in_registry_only {
            if let Err(error) = builder
                .tag(&image.reference, &image.spec.repository, alias)
                .await
            {
                return fail(result, "alias", format!("{error:#}"));
            }
        }
        result.aliases_moved.push(alias.clone());
    }
    result.seconds = start.elapsed().as_secs_f64();
    result
}

/// What may happen to an image's aliases after its test.
enum Gate {
    Move,
    /// They wait for results from these GPU models (or `any GPU`).
    Await(Vec<String>),
    Hold(String),
}

/// The GPU names of a self-test report's inventory.
fn tested_gpus(report: Option<&serde_json::Value>) -> Vec<String> {
    report
        .and_then(|r| r["checks"].as_array())
        .and_then(|checks| checks.iter().find(|c| c["name"] == "inventory"))
        .and_then(|inventory| inventory["gpus"].as_array())
        .map(|gpus| {
            gpus.iter()
                .filter_map(|g| g["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
