//! The executor: walks a plan, calling a [`Builder`] for each image (reuse or build, test, push,
//! move aliases), up to `jobs` at a time, a devel image only after its runtime image succeeded.
//! One failed image does not stop the others. Ctrl-C (the `cancel` future) stops launching,
//! drops what is in flight, and reports it as interrupted.
//!
//! It knows nothing of bollard: the Docker builder and the fake builder of the tests both
//! implement [`Builder`]. Policy lives here: a failed test means no push and no alias; aliases
//! move only after the image passed (or, with `move_untested_aliases`, when no GPU could test it).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::history::manifest::Packages;
use crate::model::digest::Digest;
use crate::pipeline::plan::{Plan, PlannedImage};
pub use crate::pipeline::results::{Existing, ImageResult, Status, TestOutcome};
use futures_util::stream::{FuturesUnordered, StreamExt};

/// The Docker operations the executor needs. Errors are already worded for people.
pub trait Builder: Send + Sync + 'static {
    /// An image carrying this image's build key, locally or (when pushing) in the registry.
    fn find_existing(
        &self,
        image: &PlannedImage,
    ) -> impl Future<Output = anyhow::Result<Option<Existing>>> + Send;
    /// Builds and tags the full reference; returns the image id.
    fn build(&self, image: &PlannedImage) -> impl Future<Output = anyhow::Result<String>> + Send;
    /// Runs the self-test in a container from the image.
    fn test(&self, image: &PlannedImage) -> impl Future<Output = TestOutcome> + Send;
    /// Reads the packages inside the built image (pip and OS); `None` when the image cannot run
    /// here (another platform).
    fn contents(
        &self,
        image: &PlannedImage,
    ) -> impl Future<Output = anyhow::Result<Option<Packages>>> + Send;
    /// Pushes `repository:tag`; returns the manifest digest. With `build_key` (full tags), refuses
    /// when the registry already holds that tag with other content: full tags are immutable.
    fn push(
        &self,
        repository: &str,
        tag: &str,
        build_key: Option<&Digest>,
    ) -> impl Future<Output = anyhow::Result<Digest>> + Send;
    /// Tags local `source` as `repository:tag`.
    fn tag(
        &self,
        source: &str,
        repository: &str,
        tag: &str,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}

#[derive(Debug, Clone)]
pub struct ExecOptions {
    pub jobs: usize,
    pub push: bool,
    pub test: bool,
    /// A skipped test (no GPU) fails the image.
    pub require_gpu: bool,
    /// Move aliases of images whose test was skipped (never of failed ones).
    pub move_untested_aliases: bool,
}

/// Runs `plan`. Each result goes to `on_result` as soon as it is known (the caller saves the
/// manifest there), and all of them are returned in plan order.
pub async fn execute<B: Builder>(
    plan: &Plan,
    builder: Arc<B>,
    options: &ExecOptions,
    cancel: impl Future<Output = ()>,
    mut on_result: impl FnMut(&ImageResult),
) -> Vec<ImageResult> {
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
                    on_result(&result);
                    results.insert(image.spec.name.clone(), result);
                }
                _ => {
                    let image = pending.remove(index).expect("index in range");
                    in_flight.insert(image.spec.name.clone());
                    running.push(run_one(Arc::clone(&builder), image, options.clone()));
                }
            }
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            Some(result) = running.next() => {
                in_flight.remove(&result.name);
                outcomes.insert(result.name.clone(), result.succeeded());
                on_result(&result);
                results.insert(result.name.clone(), result);
            }
            _ = &mut cancel => {
                drop(running);
                for name in in_flight.iter().cloned().chain(pending.iter().map(|p| p.spec.name.clone())) {
                    let mut result = ImageResult::new(&name, Status::Interrupted);
                    result.error = Some("interrupted before it finished; nothing was tagged or pushed for it after the interruption".into());
                    on_result(&result);
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
async fn run_one<B: Builder>(
    builder: Arc<B>,
    image: PlannedImage,
    options: ExecOptions,
) -> ImageResult {
    let start = Instant::now();
    let mut result = ImageResult::new(&image.spec.name, Status::Built);
    result.aliases_held = image.aliases_blocked.clone();
    let fail = |mut result: ImageResult, stage: &str, error: String| {
        result.status = Status::Failed;
        result.failed_stage = Some(stage.to_string());
        result.error = Some(error);
        result.seconds = start.elapsed().as_secs_f64();
        result
    };

    let existing = match builder.find_existing(&image).await {
        Ok(existing) => existing,
        Err(error) => return fail(result, "lookup", format!("{error:#}")),
    };
    match existing {
        Some(Existing::Registry(digest)) => {
            // Built, tested and pushed by an earlier run (the manifest records it) and not present
            // here: nothing to build, test or push; its aliases stay where that run left them.
            result.status = Status::Reused;
            result.digest = Some(digest);
            result.seconds = start.elapsed().as_secs_f64();
            return result;
        }
        Some(Existing::Local(id)) => {
            result.status = Status::Reused;
            // Make sure the full tag points at the reused image (it may only carry another tag).
            if let Err(error) = builder
                .tag(&id, &image.spec.repository, &image.spec.tag)
                .await
            {
                return fail(result, "build", format!("{error:#}"));
            }
            result.image_id = Some(id);
        }
        None => match builder.build(&image).await {
            Ok(id) => result.image_id = Some(id),
            Err(error) => return fail(result, "build", format!("{error:#}")),
        },
    }

    let known_good = result.status == Status::Reused && image.passed_before;
    if !known_good {
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
    } else if options.test {
        builder.test(&image).await
    } else {
        TestOutcome::Skipped {
            summary: "not run (--no-test)".into(),
        }
    };
    result.test = Some(test.clone());
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
        TestOutcome::Skipped { summary } if options.require_gpu && options.test => {
            return fail(
                result,
                "test",
                format!("--require-gpu: the self-test was skipped ({summary})"),
            )
        }
        _ => {}
    }

    if options.push {
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
    }

    let may_move = match &test {
        TestOutcome::Pass { .. } => None,
        TestOutcome::Skipped { .. } if options.move_untested_aliases => None,
        other => Some(format!("self-test {}: {}", other.status(), other.summary())),
    };
    for alias in &image.aliases {
        if let Some(index) = &image.spec.index {
            let reason = format!(
                "moved by `imagegen publish` with the {index} index, once every platform passed"
            );
            result.aliases_held.push((alias.clone(), reason));
            continue;
        }
        if let Some(reason) = &may_move {
            result.aliases_held.push((alias.clone(), reason.clone()));
            continue;
        }
        if let Err(error) = builder
            .tag(&image.reference, &image.spec.repository, alias)
            .await
        {
            return fail(result, "alias", format!("{error:#}"));
        }
        if options.push {
            if let Err(error) = builder.push(&image.spec.repository, alias, None).await {
                return fail(result, "alias", format!("{error:#}"));
            }
        }
        result.aliases_moved.push(alias.clone());
    }
    result.seconds = start.elapsed().as_secs_f64();
    result
}

#[cfg(test)]
mod tests;
