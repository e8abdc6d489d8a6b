//! The executor: walks a plan, running each image's steps (the plan's [`Step`] values, one
//! `match` in [`run_step`]) through a [`Builder`], up to `jobs` images at a time, a devel image
//! only after its runtime image succeeded. `build --dry-run` prints the same step values.
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
//! never backwards, judged against the manifest as it is when the alias moves. An image
//! unchanged since the push the manifest records, whose registry does not answer, is
//! `unchecked`, not failed: nothing is pushed, moved or recorded for it, and the images built on
//! it go on.

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
use crate::pipeline::steps::{AliasVia, Stage, Step, Wheels};
use futures_util::stream::{FuturesUnordered, StreamExt};

/// The Docker operations the executor needs (errors are already worded for people); alias moves
/// go through its [`AliasRegistry`] side.
pub(crate) trait Builder: AliasRegistry + Send + Sync + 'static {
    /// An image carrying this image's build key: locally, or in the registry with the digest
    /// `in_registry` (what the manifest records for the key, when pushing).
    fn find_existing(
        &self,
        image: &PlannedImage,
        in_registry: Option<&Digest>,
    ) -> impl Future<Output = anyhow::Result<Option<Existing>>> + Send;
    /// Makes sure `base`, the image `image` is built `FROM`, is in the daemon (`built_first`:
    /// an image of this plan; else pulled when missing, and checked against `pinned_id`).
    fn resolve_base(
        &self,
        image: &PlannedImage,
        base: &str,
        pinned_id: Option<&Digest>,
        built_first: bool,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// Makes the image (see [`Step::Build`]) and tags the full reference (unless not `load`ed);
    /// returns the image id.
    fn build(
        &self,
        image: &PlannedImage,
        wheels: Wheels,
        load: bool,
    ) -> impl Future<Output = anyhow::Result<Digest>> + Send;
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
    /// Whether `error` (of [`Builder::find_existing`] or [`Builder::push`]) is that a registry
    /// could not be reached: no connection, or no answer within the deadline, after the retries.
    /// `None` for any other error (a refusal, other content under a full tag).
    fn unreachable_registry(&self, error: &anyhow::Error) -> Option<Unreachable>;
}

/// A registry that could not be reached, as the error of a call to it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unreachable {
    /// `host[:port]`, as the matrix names the registry.
    pub(crate) host: String,
    /// Why, in a few words (`io: Connection refused (os error 111)`, `no answer within 30 s`).
    pub(crate) reason: String,
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
    fn set(&self, name: &str, step: &Step) {
        self.0
            .lock()
            .expect("steps lock")
            .insert(name.to_string(), step.doing());
    }

    fn get(&self, name: &str) -> Option<&'static str> {
        self.0.lock().expect("steps lock").get(name).copied()
    }
}

/// How the executor runs, beside what the plan's steps say: how many images at once, and who
/// owns the alias moves.
#[derive(Debug, Clone)]
pub(crate) struct ExecOptions {
    pub(crate) jobs: usize,
    /// The run that owns the alias moves this execution makes.
    pub(crate) owner: Owner,
    /// The command that starts a registry, by its host, where the project knows it (its
    /// `registry.yml`): named when that registry does not answer.
    pub(crate) registry_start: BTreeMap<String, String>,
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
                result.failed_stage = Some(Stage::Record);
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
                    let mut result =
                        ImageResult::new(&image.spec.name, &image.spec.tag, Status::Skipped);
                    result.error = Some(format!(
                        "not built: the image it builds on, {}, failed",
                        image
                            .spec
                            .parent_tag
                            .as_deref()
                            .or(image.depends_on.as_deref())
                            .unwrap_or("?")
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
                // An unchecked image is here as it was pushed: the images built on it go on.
                outcomes.insert(
                    result.name.clone(),
                    result.succeeded() || result.status == Status::Unchecked,
                );
                results.insert(result.name.clone(), result);
            }
            _ = &mut cancel => {
                drop(running);
                for name in in_flight.iter().cloned().chain(pending.iter().map(|p| p.spec.name.clone())) {
                    let tag = by_name.get(name.as_str()).map_or(name.as_str(), |planned| planned.spec.tag.as_str());
                    let mut result = ImageResult::new(&name, tag, Status::Interrupted);
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

/// One image from start to finish: its plan's steps, in order, each run by [`run_step`]; the
/// first that fails ends the image.
async fn run_one<B: Builder, J: Journal>(
    builder: Arc<B>,
    journal: Arc<J>,
    image: PlannedImage,
    options: ExecOptions,
    steps: Steps,
) -> ImageResult {
    let mut run = ImageRun::new(&image);
    for step in &image.steps {
        steps.set(&image.spec.name, step);
        let done = run_step(&*builder, &*journal, &image, step, &options, &mut run).await;
        if let Err(failure) = done {
            return run.failed(failure);
        }
    }
    run.finished()
}

/// Why a step ended its image: the phase it names, and the error for people. With `unchecked`
/// (the digest the manifest records for this build key), the image is not failed: it is
/// unchanged since that push, and the registry could not be asked whether it still serves it.
struct Failure {
    stage: Stage,
    error: String,
    unchecked: Option<Digest>,
}

impl Failure {
    fn at(stage: Stage, error: impl Into<String>) -> Failure {
        Failure {
            stage,
            error: error.into(),
            unchecked: None,
        }
    }

    /// An image unchanged since the push the manifest records (`recorded`), whose registry did
    /// not answer.
    fn unchecked(
        stage: Stage,
        recorded: &Digest,
        unreachable: &Unreachable,
        options: &ExecOptions,
    ) -> Failure {
        let host = &unreachable.host;
        let start = options
            .registry_start
            .get(host)
            .map(|command| {
                format!(" This project's registry.yml configures it: `{command}` starts it.")
            })
            .unwrap_or_default();
        Failure {
            stage,
            error: format!(
                "unchanged since its recorded push, registry unreachable: not checked (the registry {host} did not answer: {}); nothing was pushed, moved or recorded for it\nhint: is the registry at {host} running?{start} Once it runs, `imagegen verify` checks that it serves what the manifest records",
                unreachable.reason,
            ),
            unchecked: Some(recorded.clone()),
        }
    }
}

/// One image's run between its steps: the result as it stands, and what a step learned that a
/// later one reads.
struct ImageRun {
    start: Instant,
    result: ImageResult,
    /// What `find-earlier-build` found.
    existing: Option<Existing>,
    /// The self-test's outcome (or what stands for it), from `self-test`.
    test: Option<TestOutcome>,
    /// Whether the aliases may move, from `judge-aliases`.
    gate: Option<Gate>,
    /// Held until the image's steps end: another run publishing the tag waits, then finds it
    /// done.
    claim: Option<Claim>,
    /// Built by this run and left out of the daemon (the plan's `load: false`: pushed from
    /// memory, tested nowhere here): no daemon tag follows its aliases.
    left_out_of_daemon: bool,
}

impl ImageRun {
    fn new(image: &PlannedImage) -> ImageRun {
        ImageRun {
            start: Instant::now(),
            result: ImageResult::new(&image.spec.name, &image.spec.tag, Status::Built),
            existing: None,
            test: None,
            gate: None,
            claim: None,
            left_out_of_daemon: false,
        }
    }

    /// An image with this build key was found: nothing is made.
    fn reused(&self) -> bool {
        self.existing.is_some()
    }

    /// Built, tested and pushed by an earlier run (the manifest records it) and not present
    /// here: nothing is built, tested or pushed; only aliases that run did not move are moved.
    fn in_registry_only(&self) -> bool {
        matches!(self.existing, Some(Existing::Registry(_)))
    }

    /// Reused, and the manifest records a pass for its build key: not tested again.
    fn known_good(&self, image: &PlannedImage) -> bool {
        self.reused() && image.passed_before
    }

    /// What this run measured of the image, else what the manifest records for its build key
    /// (the same content: a reused image is not normalized again unless it is pushed).
    fn measure(&mut self, builder: &impl Builder, image: &PlannedImage) {
        self.result.size = self
            .result
            .image_id
            .as_ref()
            .and_then(|id| builder.size(id))
            .or_else(|| image.recorded_size.clone());
    }

    fn failed(mut self, failure: Failure) -> ImageResult {
        match failure.unchecked {
            Some(recorded) => {
                self.result.status = Status::Unchecked;
                self.result.digest = Some(recorded);
            }
            None => {
                self.result.status = Status::Failed;
                self.result.failed_stage = Some(failure.stage);
            }
        }
        self.result.error = Some(failure.error);
        self.finished()
    }

    fn finished(mut self) -> ImageResult {
        self.result.seconds = self.start.elapsed().as_secs_f64();
        drop(self.claim.take());
        self.result
    }
}

/// Runs one step of `image`: the one `match` over the plan's step values (see [`Step`] for what
/// each does, and when one is passed over).
async fn run_step<B: Builder, J: Journal>(
    builder: &B,
    journal: &J,
    image: &PlannedImage,
    step: &Step,
    options: &ExecOptions,
    run: &mut ImageRun,
) -> Result<(), Failure> {
    let failure = |error: anyhow::Error| Failure::at(step.stage(), format!("{error:#}"));
    // A registry call of an image unchanged since the push the manifest records: a registry
    // that does not answer leaves it unchecked, not failed.
    let registry_failure = |error: anyhow::Error| match (
        image.recorded_digest.as_ref(),
        builder.unreachable_registry(&error),
    ) {
        (Some(recorded), Some(unreachable)) => {
            Failure::unchecked(step.stage(), recorded, &unreachable, options)
        }
        _ => failure(error),
    };
    let spec = &image.spec;
    match step {
        Step::HoldAlias { alias, reason } => {
            run.result
                .aliases_held
                .push((alias.clone(), reason.clone()));
        }
        Step::FindEarlierBuild { in_registry } => {
            let existing = builder
                .find_existing(image, in_registry.as_ref())
                .await
                .map_err(registry_failure)?;
            match &existing {
                Some(Existing::Registry(digest)) => {
                    run.result.status = Status::Reused;
                    run.result.digest = Some(digest.clone());
                }
                Some(Existing::Local(id)) => {
                    run.result.status = Status::Reused;
                    // The full tag points at the reused image (it may only carry another tag).
                    builder
                        .tag(id.as_str(), &spec.repository, &spec.tag)
                        .await
                        .map_err(|error| Failure::at(Stage::Build, format!("{error:#}")))?;
                    run.result.image_id = Some(id.clone());
                }
                None => {}
            }
            if existing.is_some() {
                run.existing = existing;
                run.measure(builder, image);
            }
        }
        Step::ResolveBase {
            base,
            pinned_id,
            parent,
        } => {
            if !run.reused() {
                builder
                    .resolve_base(image, base, pinned_id.as_ref(), parent.is_some())
                    .await
                    .map_err(failure)?;
            }
        }
        Step::Build { wheels, load } => {
            if !run.reused() {
                let id = builder
                    .build(image, *wheels, *load)
                    .await
                    .map_err(failure)?;
                run.result.image_id = Some(id);
                run.left_out_of_daemon = !*load;
                run.measure(builder, image);
            }
        }
        Step::ReadPackages => {
            if !run.known_good(image) && !run.in_registry_only() {
                // An image without a shell or for another platform still builds; its packages
                // are unknown.
                match builder.contents(image).await {
                    Ok(Some(packages)) => run.result.packages = Some(packages),
                    Ok(None) => run.result.notes.push(
                        "packages not read: the image is for another platform than this host"
                            .into(),
                    ),
                    Err(error) => run
                        .result
                        .notes
                        .push(format!("packages not read: {error:#}")),
                }
            }
        }
        Step::SelfTest {
            run: run_it,
            require_gpu,
            baseline: _,
        } => {
            let registry_only = run.in_registry_only();
            // The baseline is the builder's (it hands it to every self-test); the plan's digest
            // of it is what `passed_before` was judged against.
            let test = if run.known_good(image) {
                TestOutcome::Pass {
                    summary: "passed when this build key was first tested (see the manifest)"
                        .into(),
                    report: None,
                }
            } else if registry_only {
                TestOutcome::Skipped {
                    summary: "not tested by this run (only in the registry) and the manifest records no pass for this build key".into(),
                }
            } else if *run_it {
                builder.test(image).await
            } else {
                TestOutcome::Skipped {
                    summary: "not run (--no-test)".into(),
                }
            };
            if !registry_only {
                run.result.test = Some(test.clone());
            }
            run.test = Some(test.clone());
            match &test {
                TestOutcome::Fail { summary, .. } => {
                    return Err(Failure::at(
                        Stage::Test,
                        format!("gpu-selftest failed: {summary}"),
                    ))
                }
                TestOutcome::Error { summary, .. } => {
                    return Err(Failure::at(
                        Stage::Test,
                        format!("gpu-selftest could not run: {summary}"),
                    ))
                }
                TestOutcome::Skipped { summary } if *require_gpu && *run_it && !registry_only => {
                    return Err(Failure::at(
                        Stage::Test,
                        format!("--require-gpu: the self-test was skipped ({summary})"),
                    ))
                }
                _ => {}
            }
        }
        Step::ClaimTag => {
            run.claim = Some(journal.claim(image).await.map_err(failure)?);
        }
        Step::Push => {
            if !run.in_registry_only() {
                let digest = builder
                    .push(&spec.repository, &spec.tag, Some(&image.build_key))
                    .await
                    .map_err(registry_failure)?;
                run.result.digest = Some(digest);
                // A reused image is normalized for its push: measured now.
                if let Some(size) = run.result.image_id.as_ref().and_then(|id| builder.size(id)) {
                    run.result.size = Some(size);
                }
            }
        }
        Step::RecordPush => {
            // The full tag is in the registry: written down now, so that nothing that fails
            // later (an alias, an interruption) loses its digest.
            if !run.in_registry_only() {
                journal.image(image, &run.result).map_err(|error| {
                    Failure::at(
                        step.stage(),
                        format!("pushed, but could not be written to the manifest: {error:#}"),
                    )
                })?;
            }
        }
        Step::Attest => {
            // Signed before any alias moves: an alias never serves an image without its
            // attestations.
            if let Some(digest) = run.result.digest.clone() {
                if let Err(error) = journal.attest(image, &digest).await {
                    for alias in &image.aliases {
                        run.result
                            .aliases_held
                            .push((alias.clone(), "not moved: the image is not signed".into()));
                    }
                    return Err(Failure::at(step.stage(), format!("not signed: {error:#}")));
                }
            }
        }
        Step::JudgeAliases {
            move_untested,
            wait_for,
            untested_wait,
        } => {
            run.gate = Some(judge(
                run.test.as_ref(),
                *move_untested && !run.in_registry_only(),
                wait_for,
                *untested_wait,
            ));
        }
        Step::MoveAlias { alias, via } => {
            match run.gate.as_ref().unwrap_or(&Gate::Unjudged) {
                Gate::Move => {}
                Gate::Hold(reason) => {
                    run.result
                        .aliases_held
                        .push((alias.clone(), reason.clone()));
                    return Ok(());
                }
                Gate::Unjudged => {
                    run.result.aliases_held.push((
                        alias.clone(),
                        "not moved: the plan judged no self-test for it".into(),
                    ));
                    return Ok(());
                }
                Gate::Await(missing) => {
                    // Waiting, not held: `imagegen test` on a node with these GPUs moves it.
                    run.result.aliases_awaiting.push(alias.clone());
                    run.result.awaiting_results_on = missing.clone();
                    return Ok(());
                }
            }
            if *via == AliasVia::Registry {
                let Some(digest) = run.result.digest.clone() else {
                    return Err(Failure::at(
                        step.stage(),
                        "no digest to move the alias to (the full tag was not pushed)",
                    ));
                };
                let request = AliasRequest {
                    repository: &spec.repository,
                    target: AliasTarget {
                        alias,
                        tag: &spec.tag,
                        digest: &digest,
                        guard_torch: Some(&spec.torch),
                    },
                    owner: &options.owner,
                };
                if let AliasOutcome::Held(reason) = move_alias(builder, journal, &request)
                    .await
                    .map_err(failure)?
                {
                    run.result.aliases_held.push((alias.clone(), reason));
                    return Ok(());
                }
            }
            // The daemon's tag follows the registry's (after the move, so a held alias is not
            // tagged here either); without a push it is the only one.
            if *via == AliasVia::Daemon || !(run.in_registry_only() || run.left_out_of_daemon) {
                builder
                    .tag(&image.reference, &spec.repository, alias)
                    .await
                    .map_err(failure)?;
            }
            run.result.aliases_moved.push(alias.clone());
        }
        // Written by `execute` once the result is final, as for an image that never ran (not
        // built because the image under it failed, or interrupted): see `execute`'s `finish`.
        Step::Record => {}
    }
    Ok(())
}

/// What may happen to an image's aliases after its test.
enum Gate {
    Move,
    /// They wait for results from these GPU models (or `any GPU`).
    Await(Vec<String>),
    Hold(String),
    /// No `judge-aliases` step ran before (a plan that moves aliases always has one).
    Unjudged,
}

/// Whether the aliases may move now: after a pass that leaves nothing the test policy still
/// wants (`wait_for`); they wait (recorded on the image, for `imagegen test`) when the policy
/// wants results from GPUs this run did not have, or the test was skipped and `untested_wait`;
/// otherwise they are held.
fn judge(
    test: Option<&TestOutcome>,
    move_untested: bool,
    wait_for: &[String],
    untested_wait: bool,
) -> Gate {
    match test {
        Some(TestOutcome::Pass { report, .. }) => {
            let gpus = tested_gpus(report.as_ref());
            let still: Vec<String> = wait_for
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
        Some(TestOutcome::Skipped { .. }) if move_untested => Gate::Move,
        Some(TestOutcome::Skipped { .. }) if wait_for.is_empty() => Gate::Move,
        Some(TestOutcome::Skipped { .. }) if untested_wait => Gate::Await(wait_for.to_vec()),
        Some(other) => Gate::Hold(format!("self-test {}: {}", other.status(), other.summary())),
        None => Gate::Unjudged,
    }
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
