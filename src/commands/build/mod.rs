//! The `build` command: check that `images/` is rendered from the matrix, assemble the build
//! contexts, compute the plan (`pipeline::plan`: every image's steps), then (unless `--dry-run`,
//! which prints it) run the plan's run steps (fetch the wheels, settle alias moves an earlier run
//! left in between), connect to Docker, remove what killed runs left (`leftovers`), and hand the
//! plan to the executor, which writes down every change in the manifest as it happens (under the
//! manifest's lock, merged into the manifest as it is then, so another run's records survive),
//! so Ctrl-C, SIGTERM or a crash keeps what finished. Prints a summary table and what was left
//! undone (`report`); removes every container the run started, on every path; exit 1 if any
//! image failed, 4 if none failed but images already pushed could not be checked (their registry
//! did not answer), 130/143 on SIGINT/SIGTERM.

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use futures_util::future::BoxFuture;

use crate::attest::dsse::Signer;
use crate::cli::{BuildArgs, Format};
use crate::commands::attest;
use crate::commands::ledger::{this_owner, Liveness, RunId};
use crate::commands::outcome::Outcome;
use crate::commands::output::{count, emit, note};
use crate::commands::signals::{Signal, Signals};
use crate::commands::stages::{lock_problems, no_images, render_project};
use crate::commands::wheels;
use crate::docker::layer_store::LayerStore;
use crate::docker::pypi_index::team_context_files;
use crate::docker::run_journal::RunJournal;
use crate::docker::{ContextFile, Engine, Registries, RetryPolicy};
use crate::history::alias_transaction::{settle_leftovers, SettleOutcome, Settled, Settlement};
use crate::history::apt_lock::{apt_moves, AptLock, APT_LOCK_FILE};
use crate::history::ledger::{CommitToken, MemoryStore, Store, Transaction};
use crate::history::manifest::{now_rfc3339, Manifest};
use crate::model::digest::Digest;
use crate::model::matrix::WheelSource;
use crate::pipeline::docker_builder::contexts::Contexts;
use crate::pipeline::docker_builder::{
    EngineBuilder, EngineBuilderSettings, RegistryAliases, RUN_LABEL,
};
use crate::pipeline::executor::{execute, Claim, ExecOptions, ImageResult, Journal, Status};
use crate::pipeline::plan::{plan, select_for_build, Plan, PlanOptions, PlannedImage, Shard};
use crate::pipeline::progress::Progress;
use crate::pipeline::record::{record, AliasesMoved};
use crate::pipeline::selftest::check_baseline;
use crate::pipeline::steps::RunStep;
use crate::project::{self, read_selftest_baseline, wait_for_lock, ManifestFile, Project};
use crate::resolve::bases::{pin_problems, BASES_FILE};
use crate::resolve::image::ImageSpec;

mod leftovers;
mod report;

use leftovers::{
    journal_dir, remove_images_of_dead_runs, remove_leftovers_of_dead_runs, state_dir,
};
use report::{left_undone, one_line, plan_table, summary_table};

pub(crate) fn run(project: &Project, args: &BuildArgs) -> Result<Outcome> {
    let shard = args
        .shard
        .as_deref()
        .map(str::parse::<Shard>)
        .transpose()
        .map_err(|message| anyhow::anyhow!(message))?;
    let (resolution, rendered) = render_project(project)?;
    if resolution.images.is_empty() {
        return Err(no_images(project, &resolution, " to build", ""));
    }
    let drift = project::check(&rendered, &args.images)?;
    if !drift.diffs.is_empty() {
        anyhow::bail!(
            "{} does not match {} ({} differ): the images built must be the ones reviewed\nhint: run `imagegen render` and commit the result",
            args.images.display(),
            project.matrix_path.display(),
            count(drift.diffs.len(), "Dockerfile")
        );
    }
    let selected = select_for_build(
        &resolution.images,
        args.only.as_deref(),
        shard,
        args.platform.as_deref(),
    )?;
    // The images built install what was locked and reviewed (another image's stale lock does not
    // stop them: `render --check` reports it).
    let locks: Vec<_> = lock_problems(&resolution, &project.locks()?)
        .into_iter()
        .filter(|problem| selected.iter().any(|image| image.name == problem.image))
        .collect();
    if !locks.is_empty() {
        anyhow::bail!(
            "{} missing or stale for the images to build from {}: the images built must install what was locked and reviewed\n{}\nhint: run `imagegen lock` and `imagegen render`, and commit the result",
            count(locks.len(), "lock"),
            project.matrix_path.display(),
            locks
                .iter()
                .map(|problem| problem.describe(&args.images))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // The bases the selected images build on must be pinned once pinning started (bases.lock).
    let pins = pin_problems(&selected, project.base_pins()?.as_ref());
    if !pins.is_empty() {
        anyhow::bail!(
            "{} of the images to build {} not pinned in {}/{BASES_FILE}: the images built must stand on the bases reviewed\n{}\nhint: run `imagegen lock --bases` and `imagegen render`, and commit the result",
            count(pins.len(), "base"),
            if pins.len() == 1 { "is" } else { "are" },
            args.images.display(),
            pins.join("\n")
        );
    }
    let baseline = match &args.selftest_baseline {
        Some(path) => {
            let text = read_selftest_baseline(path)?;
            check_baseline(&text).map_err(|why| {
                anyhow::anyhow!(
                    "--selftest-baseline {}: {why}\nhint: save one with `gpu-selftest --save-baseline FILE` on a node known to be good",
                    path.display()
                )
            })?;
            Some(text)
        }
        None => None,
    };
    let baseline_digest = baseline.as_deref().map(|text| Digest::of(text.as_bytes()));
    let wheel_source = project.matrix()?.wheels;
    let team_wheels = match wheel_source {
        // The team's wheels come through the host-side cache with every other file of the lock.
        WheelSource::Cache | WheelSource::Host => BTreeMap::new(),
        WheelSource::Index => team_wheels(&selected, &project.locks()?)?,
    };
    let mut contexts =
        Contexts::assemble_with(&selected, &args.images, &args.selftest_dir, &team_wheels)?;
    let manifest_file =
        ManifestFile::new(&args.manifest, Duration::from_secs(args.lock.lock_timeout));
    let mut manifest = manifest_file.read()?;
    if args.release_holds {
        // Only the aliases this build may move; a dry run releases them in what it prints only.
        let aliases: BTreeSet<&String> = selected.iter().flat_map(|image| &image.aliases).collect();
        let released = if args.dry_run {
            let preview = MemoryStore::new(manifest);
            let released = release_holds(&preview, &aliases)?;
            manifest = preview.manifest();
            released
        } else {
            let released = release_holds(&manifest_file, &aliases)?;
            manifest = manifest_file.read()?;
            released
        };
        for alias in released {
            note(format!(
                "released the hold a rollback put on {alias} (--release-holds): this build may move it"
            ));
        }
    }
    // A signing key that cannot be used stops the build before anything is built.
    let signer = if args.push {
        attest::load_signer(&args.signing)?
    } else {
        None
    };
    let plan = plan(
        &resolution.images,
        &selected,
        &contexts.digests(),
        &manifest,
        baseline_digest.as_ref(),
        &project.matrix()?.tests.require,
        &PlanOptions {
            push: args.push,
            test: !args.no_test,
            require_gpu: args.require_gpu,
            move_untested_aliases: args.move_untested_aliases,
            sign: signer.is_some(),
            wheels: wheel_source,
        },
    );
    if args.dry_run {
        match args.format {
            Format::Table => emit(plan_table(&plan, &manifest))?,
            Format::Json => emit(format!("{}\n", serde_json::to_string_pretty(&plan)?))?,
        }
        return Ok(Outcome::Success);
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // The run's own steps, before any image's: the one `match` over them.
    for step in &plan.before {
        match step {
            RunStep::FetchWheels { images } => {
                let images: Vec<ImageSpec> = selected
                    .iter()
                    .filter(|spec| images.contains(&spec.name))
                    .cloned()
                    .collect();
                contexts.wheels = wheels::fetch_for_images(
                    &images,
                    &project.locks()?,
                    &wheels::cache_root(args.wheel_cache.as_deref()),
                    args.wheel_jobs as usize,
                )?;
            }
            RunStep::SettleAliasMoves { repositories } => {
                let registries = Registries::new(
                    Duration::from_secs(args.deadlines.registry_timeout),
                    RetryPolicy {
                        attempts: args.push_attempts.max(1),
                        ..RetryPolicy::default()
                    },
                );
                runtime.block_on(settle_pending_moves(
                    &manifest_file,
                    repositories,
                    &registries,
                ));
            }
        }
    }
    runtime.block_on(execute_plan(
        project,
        args,
        plan,
        contexts,
        manifest_file,
        (baseline, signer),
    ))
}

/// Releases the holds rollbacks put on `aliases` (`--release-holds`), in one transaction;
/// the aliases released.
fn release_holds(store: &dyn Store, aliases: &BTreeSet<&String>) -> Result<Vec<String>> {
    let mut transaction = Transaction::begin(store)?;
    let released = aliases
        .iter()
        .filter(|alias| transaction.release_alias(alias).is_some())
        .map(|alias| alias.to_string())
        .collect();
    transaction.commit()?;
    Ok(released)
}

async fn execute_plan(
    project: &Project,
    settings: &BuildArgs,
    plan: Plan,
    contexts: Contexts,
    manifest_file: ManifestFile,
    (selftest_baseline, signer): (Option<String>, Option<Signer>),
) -> Result<Outcome> {
    // From here on SIGINT and SIGTERM stop the build cleanly instead of ending the process.
    let mut signals = Signals::listen();
    let retry = RetryPolicy {
        attempts: settings.push_attempts.max(1),
        ..RetryPolicy::default()
    };
    let registry_timeout = Duration::from_secs(settings.deadlines.registry_timeout);
    let engine =
        Engine::connect_with_timeout(Duration::from_secs(settings.deadlines.daemon_timeout))
            .await?
            .with_push_retry(retry)
            .with_push_idle_timeout(registry_timeout);
    let run_id = RunId::this_process().to_string();
    let journals = journal_dir(&settings.log_dir);
    remove_leftovers_of_dead_runs(&engine, RUN_LABEL, run_is_gone).await;
    remove_images_of_dead_runs(&engine, &journals, run_is_gone).await;
    // Written before the first build starts: the step images of this run, should it be killed.
    let journal = match RunJournal::create(&journals, &run_id) {
        Ok(journal) => Some(Arc::new(journal)),
        Err(error) => {
            eprintln!(
                "warning: cannot write this run's image journal in {}: {error}; a kill mid-build would leave its step images for you to remove",
                journals.display()
            );
            None
        }
    };
    let outcome = build_and_record(
        project,
        settings,
        plan,
        contexts,
        manifest_file,
        engine.clone(),
        (&run_id, selftest_baseline, signer, journal.clone()),
        &mut signals,
    )
    .await;
    // The run ends here, killed by nothing: its step images are results or build cache.
    if let Some(journal) = journal {
        if let Err(error) = journal.finish() {
            eprintln!(
                "warning: could not remove {}: {error}",
                journal.path().display()
            );
        }
    }
    // Every path ends here: containers of this run that a cancellation left behind go.
    match engine
        .remove_containers_with_label(RUN_LABEL, &run_id)
        .await
    {
        Ok(0) => {}
        Ok(count) => eprintln!("removed {count} container(s) this run left behind"),
        Err(error) => eprintln!(
            "warning: could not remove this run's containers (label {RUN_LABEL}={run_id}): {error}"
        ),
    }
    outcome
}

/// Whether the run `run` (a run id of a container label or a journal) was of this machine's
/// boot and its process is gone; a run this machine cannot judge is not.
fn run_is_gone(run: &str) -> bool {
    RunId::parse(run).is_some_and(|id| id.liveness() == Liveness::Gone)
}

#[allow(clippy::too_many_arguments)]
async fn build_and_record(
    project: &Project,
    settings: &BuildArgs,
    plan: Plan,
    contexts: Contexts,
    manifest_file: ManifestFile,
    engine: Engine,
    (run_id, selftest_baseline, signer, journal): (
        &str,
        Option<String>,
        Option<Signer>,
        Option<Arc<RunJournal>>,
    ),
    signals: &mut Signals,
) -> Result<Outcome> {
    let retry = RetryPolicy {
        attempts: settings.push_attempts.max(1),
        ..RetryPolicy::default()
    };
    let registry_timeout = Duration::from_secs(settings.deadlines.registry_timeout);
    let terminal = std::io::stderr().is_terminal() && std::env::var_os("CI").is_none();
    let progress = Arc::new(Progress::new(terminal, &settings.log_dir));
    let source_commit = project.source_commit();
    // No `org.opencontainers.image.created` from the clock: the normalized config sets it to the
    // image's epoch (pipeline::normalize), so two builds of the same inputs are the same bytes.
    let mut build_labels = BTreeMap::new();
    if let Some(commit) = &source_commit {
        build_labels.insert(
            "org.opencontainers.image.revision".to_string(),
            commit.clone(),
        );
    }
    let signing = signer.map(|signer| {
        let mut context = attest::SignContext::of(project);
        context.build.selftest_binaries = contexts.selftest_digests.clone();
        Signing {
            signer,
            context,
            registries: Registries::new(registry_timeout, retry),
        }
    });
    let builder = Arc::new(EngineBuilder::new(
        engine,
        contexts,
        Arc::clone(&progress),
        EngineBuilderSettings {
            build_labels,
            check_registry: settings.push,
            registry_retry: retry,
            registry_timeout,
            build_timeout: Duration::from_secs(settings.build_timeout),
            run_id: run_id.to_string(),
            selftest_baseline,
            journal,
            layer_store: Some(Arc::new(LayerStore::in_dir(&state_dir(&settings.log_dir)))),
            venv_layers: project.matrix()?.venv_layers,
            ..Default::default()
        },
    ));
    let owner = this_owner();
    let by = owner.by.clone();
    let ledger_progress = Arc::clone(&progress);
    let journal = Arc::new(ManifestJournal {
        file: manifest_file
            .clone()
            .with_waiting_lines(move |line| ledger_progress.line("alias", &format!("== {line}"))),
        source_commit,
        progress: Arc::clone(&progress),
        signing,
        push: settings.push,
    });
    let options = ExecOptions {
        jobs: settings.jobs,
        owner,
        registry_start: project.registry_start(),
    };
    note(format!(
        "building {}, {} at a time{}",
        count(plan.images.len(), "image"),
        options.jobs.max(1),
        if settings.push { ", pushing" } else { "" }
    ));

    let signal: Mutex<Option<Signal>> = Mutex::new(None);
    let cancel = async {
        let received = signals.recv().await;
        note(format!(
            "{}: stopping; finished work stays recorded in {}",
            received.name(),
            settings.manifest.display()
        ));
        *signal.lock().expect("signal lock") = Some(received);
    };
    // What each image's apt extras came to, against its apt.lock: logged, shown, written, and
    // the moves added to the image's notes in the summary.
    let mut apt_notes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut results = execute(&plan, builder, journal, &options, cancel, |result| {
        let (said, moved) = record_apt_lock(&settings.images, result);
        for line in &said {
            progress.line(&result.name, &format!("== {line}"));
        }
        if !moved.is_empty() {
            apt_notes.insert(result.name.clone(), moved);
        }
        progress.finish(&result.name, &one_line(result));
    })
    .await;
    for result in &mut results {
        result
            .notes
            .extend(apt_notes.remove(&result.name).unwrap_or_default());
    }
    let manifest = manifest_file.read().unwrap_or_default();
    let undone = left_undone(&plan, &results, &manifest, &by, settings.push);
    match settings.format {
        Format::Table => {
            emit(summary_table(&results))?;
            emit(undone)?;
            emit(format!("manifest: {}\n", settings.manifest.display()))?;
        }
        // One object on stdout for programs; the same table for people on stderr.
        Format::Json => {
            note(summary_table(&results).trim_end());
            let report = serde_json::json!({
                "images": results,
                "left_undone": undone.lines().filter(|line| !line.is_empty()).collect::<Vec<_>>(),
                "manifest": settings.manifest,
                "interrupted": signal.lock().expect("signal lock").map(|received| received.name()),
            });
            emit(format!("{}\n", serde_json::to_string_pretty(&report)?))?;
        }
    }
    if let Some(received) = *signal.lock().expect("signal lock") {
        return Ok(Outcome::Interrupted(received));
    }
    let unchecked = |result: &ImageResult| result.status == Status::Unchecked;
    Ok(if results.iter().all(ImageResult::succeeded) {
        Outcome::Success
    } else if results
        .iter()
        .all(|result| result.succeeded() || unchecked(result))
    {
        // Nothing failed; images already pushed could not be checked (the registry did not
        // answer).
        Outcome::Unchecked
    } else {
        Outcome::Failed
    })
}

/// Compares the versions the apt extras of a built image came to with its `apt.lock` (the last
/// build's), and writes the file again when they differ. Returns the lines for its log and
/// output, and of those the ones the summary repeats (what moved, what could not be done).
fn record_apt_lock(images_dir: &Path, result: &ImageResult) -> (Vec<String>, Vec<String>) {
    let Some(packages) = result.packages.as_ref().filter(|_| result.succeeded()) else {
        return (Vec::new(), Vec::new());
    };
    if packages.apt_extras.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let now = AptLock {
        packages: packages.apt_extras.clone(),
    };
    let path = images_dir.join(&result.name).join(APT_LOCK_FILE);
    let mut notes = Vec::new();
    let mut said = Vec::new();
    let before = match project::read_apt_lock(images_dir, &result.name) {
        Ok(before) => before,
        Err(error) => {
            notes.push(format!("apt: {error:#}; written again"));
            None
        }
    };
    match &before {
        Some(before) if *before == now => said.push(format!(
            "apt: {} as {} records them",
            count(now.packages.len(), "package"),
            path.display()
        )),
        Some(before) => notes.extend(apt_moves(before, &now).iter().map(ToString::to_string)),
        None => {}
    }
    if before.as_ref() != Some(&now) {
        match project::write_apt_lock(images_dir, &result.name, &now) {
            Ok(()) => said.push(format!(
                "apt: wrote {} ({})",
                path.display(),
                count(now.packages.len(), "package")
            )),
            Err(error) => notes.push(format!("apt: {error:#}")),
        }
    }
    let mut lines = notes.clone();
    lines.extend(said);
    (lines, notes)
}

/// Settles the alias moves an earlier run of these images' repositories began and did not
/// write down as done, by what the registry serves for each alias (the settle loop of
/// `history::alias_transaction`). A move whose alias another live run holds is that run's to
/// finish, and is left alone; a registry that cannot be asked leaves them for later (the build
/// moves its aliases anyway).
async fn settle_pending_moves(
    manifest_file: &ManifestFile,
    repositories: &[String],
    registries: &Registries,
) {
    let Ok(settled) = settle_leftovers(
        &RegistryAliases(registries),
        manifest_file,
        |_, repository| repositories.iter().any(|r| r == repository),
    )
    .await
    else {
        return;
    };
    for Settled {
        alias,
        pending,
        outcome,
    } in settled
    {
        match outcome {
            Ok(SettleOutcome::Settled(Settlement::Elsewhere, _)) => eprintln!(
                "warning: {alias}: a move to {} was left in between and the registry serves neither its origin nor its target; `imagegen verify` shows it",
                pending.to
            ),
            Ok(SettleOutcome::Settled(settlement, _)) => eprintln!(
                "settled the move of {alias} to {} that an earlier run left in between: {}",
                pending.to,
                settlement.as_str()
            ),
            Ok(SettleOutcome::Busy(holder)) => {
                eprintln!("{alias}: a move of it is under way ({holder}); left to that run")
            }
            Ok(SettleOutcome::Gone) => {}
            Err(error) => eprintln!(
                "warning: could not settle the move of {alias} left in between: {error:#}"
            ),
        }
    }
}

/// The manifest file as the executor's [`Journal`]: each write is one transaction (the
/// manifest's lock, the manifest as it is now, the fold of `pipeline::record`, the write); alias
/// moves hold the alias's lock beside it (its waiting line goes to the build's progress).
struct ManifestJournal {
    file: ManifestFile,
    source_commit: Option<String>,
    progress: Arc<Progress>,
    /// With `--signing-key`: what signs each pushed image before its aliases move.
    signing: Option<Signing>,
    /// Whether the run pushes: then its alias moves are the alias transaction's, else tags here.
    push: bool,
}

/// The key and the build's facts the attestations of `build --push --signing-key` carry.
struct Signing {
    signer: Signer,
    context: attest::SignContext,
    registries: Registries,
}

impl ManifestJournal {
    /// One transaction, off the async workers (waiting for the lock blocks).
    fn write(&self, change: impl FnOnce(&mut Transaction)) -> Result<()> {
        tokio::task::block_in_place(|| {
            let mut transaction = Transaction::begin(&self.file)?;
            change(&mut transaction);
            transaction.commit()
        })
    }
}

impl Journal for ManifestJournal {
    async fn claim(&self, image: &PlannedImage) -> Result<Claim> {
        let path = self.file.publish_lock_path(&image.reference)?;
        let what = format!("{}, which another run is publishing", image.reference);
        let lock = wait_for_lock(&path, &what, self.file.lock_timeout(), |line| {
            self.progress.line(&image.spec.name, &format!("== {line}"))
        })
        .await?;
        Ok(Box::new(lock))
    }

    fn image(&self, image: &PlannedImage, result: &ImageResult) -> Result<()> {
        let aliases = if self.push {
            AliasesMoved::InRegistry
        } else {
            AliasesMoved::OnThisHost
        };
        self.write(|transaction| {
            record(
                transaction,
                image,
                result,
                self.source_commit.as_deref(),
                &now_rfc3339(),
                aliases,
            )
        })
    }

    async fn attest(&self, image: &PlannedImage, digest: &Digest) -> Result<()> {
        let Some(signing) = &self.signing else {
            return Ok(());
        };
        let manifest = tokio::task::block_in_place(|| self.file.read())?;
        let record = manifest
            .images()
            .values()
            .find(|record| record.digest.as_ref() == Some(digest))
            .with_context(|| {
                format!(
                    "{}: the manifest records no image with digest {digest}",
                    image.spec.name
                )
            })?;
        let attested = attest::attest_image(
            &signing.registries,
            &signing.signer,
            record,
            digest,
            &signing.context,
        )
        .await?;
        self.write(|transaction| transaction.record_attestation(digest.clone(), attested.clone()))?;
        self.progress.line(
            &image.spec.name,
            &format!(
                "== signed, attestations {} (gpu-selftest {})",
                attested.attestations.tag, attested.gpu_selftest
            ),
        );
        Ok(())
    }
}

/// The journal's record is its manifest file's.
impl Store for ManifestJournal {
    fn read(&self) -> Result<Manifest> {
        self.file.read()
    }

    fn lock(&self) -> Result<Claim> {
        Store::lock(&self.file)
    }

    fn write(&self, manifest: &Manifest, token: CommitToken) -> Result<()> {
        Store::write(&self.file, manifest, token)
    }

    fn hold_alias<'a>(&'a self, alias: &'a str) -> BoxFuture<'a, Result<Claim>> {
        self.file.hold_alias(alias)
    }

    fn try_hold_alias(&self, alias: &str) -> Result<Result<Claim, String>> {
        self.file.try_hold_alias(alias)
    }
}

/// The team's wheels of each image whose matrix names extra indexes, fetched here on the host
/// with the host's credentials (the environment or netrc: none enters a build) and checked
/// against the lock's sha256, as the `extension-wheels/` files of its build context.
fn team_wheels(
    images: &[ImageSpec],
    locks: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Vec<ContextFile>>> {
    let mut files = BTreeMap::new();
    for image in images {
        let indexes = &image.extensions.extra_indexes;
        if indexes.is_empty() {
            continue;
        }
        let lock = locks
            .get(&image.name)
            .map(String::as_str)
            .unwrap_or_default();
        let context_files = team_context_files(lock, indexes, Duration::from_secs(120))
            .with_context(|| format!("fetching the team's wheels of {}", image.name))?
            .into_iter()
            .map(|(path, contents)| ContextFile {
                path,
                contents,
                executable: false,
            })
            .collect();
        files.insert(image.name.clone(), context_files);
    }
    Ok(files)
}
