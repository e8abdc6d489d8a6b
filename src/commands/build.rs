//! The `build` command: check that `images/` is rendered from the matrix, assemble the build
//! contexts, compute the plan, then (unless `--dry-run`) connect to Docker, settle alias moves an
//! earlier run left in between, execute the plan and write down every change in the manifest
//! as it happens (under the manifest's lock, merged into the manifest as it is then, so another
//! run's records survive), so Ctrl-C, SIGTERM or a crash keeps what finished. Prints a summary
//! table and what was left undone; removes every container the run started, on every path; exit
//! 1 if any image failed, 130/143 on SIGINT/SIGTERM.

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use futures_util::future::BoxFuture;

use crate::attest::dsse::Signer;
use crate::cli::{BuildArgs, Format};
use crate::commands::attest;
use crate::commands::ledger::{this_owner, Liveness, RunId};
use crate::commands::outcome::Outcome;
use crate::commands::output::{count, emit, note, table};
use crate::commands::signals::{Signal, Signals};
use crate::commands::stages::{lock_problems, no_images, render_project};
use crate::commands::wheels;
use crate::docker::layer_store::LayerStore;
use crate::docker::pypi_index::team_context_files;
use crate::docker::run_journal::{self, RunJournal};
use crate::docker::{ContextFile, Engine, Registries, Removal, RetryPolicy};
use crate::history::alias_transaction::{settle_leftovers, SettleOutcome, Settled, Settlement};
use crate::history::apt_lock::{apt_moves, AptLock, APT_LOCK_FILE};
use crate::history::ledger::{CommitToken, MemoryStore, Store, Transaction};
use crate::history::manifest::{now_rfc3339, Manifest};
use crate::model::digest::Digest;
use crate::model::matrix::WheelSource;
use crate::pipeline::docker_builder::{
    Contexts, EngineBuilder, EngineBuilderSettings, RegistryAliases, RUN_LABEL,
};
use crate::pipeline::executor::{execute, Claim, ExecOptions, ImageResult, Journal, Status};
use crate::pipeline::plan::{plan, select_for_build, Plan, PlannedImage, Shard};
use crate::pipeline::progress::Progress;
use crate::pipeline::record::{record, AliasesMoved};
use crate::pipeline::selftest::check_baseline;
use crate::project::{self, read_selftest_baseline, wait_for_lock, ManifestFile, Project};
use crate::resolve::bases::{pin_problems, BASES_FILE};
use crate::resolve::image::ImageSpec;

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
    let plan = plan(
        &resolution.images,
        &selected,
        &contexts.digests(),
        &manifest,
        baseline_digest.as_ref(),
        &project.matrix()?.tests.require,
    );
    // A signing key that cannot be used stops the build before anything is built.
    let signer = if args.push {
        attest::load_signer(&args.signing)?
    } else {
        None
    };
    if args.dry_run {
        match args.format {
            Format::Table => emit(plan_table(&plan, &manifest))?,
            Format::Json => emit(format!("{}\n", serde_json::to_string_pretty(&plan)?))?,
        }
        return Ok(Outcome::Success);
    }
    if wheel_source != WheelSource::Index {
        contexts.wheels = wheels::fetch_for_images(
            &selected,
            &project.locks()?,
            &wheels::cache_root(args.wheel_cache.as_deref()),
            args.wheel_jobs as usize,
        )?;
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
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
    remove_leftovers_of_dead_runs(&engine).await;
    remove_images_of_dead_runs(&engine, &journals).await;
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

/// The images of `plan` nothing of this run runs on this host, where `pushed_untested` (the run
/// pushes and runs no self-test): those no other image of the plan is built `FROM`.
fn run_nothing_here(plan: &Plan, pushed_untested: bool) -> BTreeSet<String> {
    if !pushed_untested {
        return BTreeSet::new();
    }
    plan.images
        .iter()
        .map(|image| &image.spec)
        .filter(|spec| {
            !plan
                .images
                .iter()
                .any(|other| other.spec.parent.as_ref() == Some(&spec.name))
        })
        .map(|spec| spec.name.clone())
        .collect()
}

/// Removes the containers earlier runs left behind when they were killed before their own
/// cleanup (SIGKILL, a crash): those labelled with a run of this machine's boot whose process is
/// gone. A live run's containers, and those of runs this machine cannot judge (another host on a
/// shared daemon, an earlier boot, an older imagegen's run id), are left alone.
async fn remove_leftovers_of_dead_runs(engine: &Engine) {
    let containers = match engine.containers_labelled(RUN_LABEL).await {
        Ok(containers) => containers,
        Err(error) => {
            eprintln!("warning: could not look for containers earlier runs left behind: {error}");
            return;
        }
    };
    let dead: std::collections::BTreeSet<String> = containers
        .iter()
        .map(|(_, run)| run.clone())
        .filter(|run| RunId::parse(run).is_some_and(|id| id.liveness() == Liveness::Gone))
        .collect();
    for run in dead {
        match engine.remove_containers_with_label(RUN_LABEL, &run).await {
            Ok(0) => {}
            Ok(count) => {
                eprintln!("removed {count} container(s) left behind by run {run}, which is gone")
            }
            Err(error) => eprintln!(
                "warning: could not remove the containers of run {run}, which is gone: {error}"
            ),
        }
    }
}

/// Where runs write their journals of step images: `runs/` beside the build logs
/// (`.imagegen/runs`).
fn journal_dir(log_dir: &Path) -> PathBuf {
    state_dir(log_dir).join("runs")
}

/// The folder of imagegen's state beside the logs (`.imagegen/`): the run journals and the
/// layer store.
fn state_dir(log_dir: &Path) -> PathBuf {
    log_dir
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// How long a run waits, before its builds, for the daemon to let go of the images of a run killed
/// mid-build: it stops and removes the killed step's container on its own time, and refuses to
/// remove that container's image ("being used by running container") for a moment even after
/// the container has left its list.
const DEAD_RUN_IMAGES_PATIENCE: Duration = Duration::from_secs(15);

/// Removes the images that builds of runs killed mid-build left (the classic builder's images of
/// the steps finished before the kill), from those runs' journals: only runs of this machine's
/// boot whose process is gone, and only images with no tag that no image is built on and no
/// container uses (the daemon judges that; nothing is forced). A live run's journal, and one of
/// a run this machine cannot judge, stay.
///
/// It runs before this run's builds and waits (within [`DEAD_RUN_IMAGES_PATIENCE`]) while a
/// container still holds one: a build started meanwhile would take the killed run's step images
/// as its cache and build on them, and an image built on is no longer a leftover to remove.
async fn remove_images_of_dead_runs(engine: &Engine, dir: &Path) {
    let found = match run_journal::journals(dir) {
        Ok(found) => found,
        Err(error) => {
            eprintln!(
                "warning: could not read the image journals of earlier runs in {}: {error}",
                dir.display()
            );
            return;
        }
    };
    let deadline = std::time::Instant::now() + DEAD_RUN_IMAGES_PATIENCE;
    for entry in found {
        let gone = RunId::parse(&entry.run).is_some_and(|id| id.liveness() == Liveness::Gone);
        if !gone {
            continue;
        }
        let mut removed = 0;
        let (in_use, failed) = loop {
            // Kept for a later run to try again when the daemon failed or a container still
            // holds an image past the patience.
            let mut failed = false;
            let mut in_use = None;
            // Newest first: each step's image is the parent of the next. One built on by an
            // image that is not the run's (a later build took it as cache) is that image's
            // layer now, and stays, like a tagged one.
            for image in entry.images.iter().rev() {
                match engine.remove_untagged_image(image).await {
                    Ok(Removal::Removed) => removed += 1,
                    Ok(Removal::Absent | Removal::Tagged | Removal::HasChildren(_)) => {}
                    Ok(Removal::InUse(reason)) => {
                        in_use = Some(format!("{image}: {reason}"));
                        // Its parents are held by it: they are tried with it next time.
                        break;
                    }
                    Err(error) => {
                        failed = true;
                        eprintln!(
                            "warning: could not remove image {image} left behind by run {}, which is gone: {error}",
                            entry.run
                        );
                    }
                }
            }
            if in_use.is_none() || std::time::Instant::now() >= deadline {
                break (in_use, failed);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        if removed > 0 {
            eprintln!(
                "removed {removed} image(s) left behind by run {}, which is gone",
                entry.run
            );
        }
        if let Some(reason) = &in_use {
            eprintln!(
                "note: a container still uses an image left behind by run {}, which is gone ({reason}); a later run removes its images",
                entry.run
            );
        }
        if in_use.is_none() && !failed {
            if let Err(error) = run_journal::remove(&entry.path) {
                eprintln!(
                    "warning: could not remove {}: {error}",
                    entry.path.display()
                );
            }
        }
    }
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
    if settings.push {
        settle_leftovers_of(
            &manifest_file,
            &plan,
            &Registries::new(registry_timeout, retry),
        )
        .await;
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
            unloaded: run_nothing_here(&plan, settings.push && settings.no_test),
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
        push: settings.push,
        test: !settings.no_test,
        require_gpu: settings.require_gpu,
        move_untested_aliases: settings.move_untested_aliases,
        owner,
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
    Ok(if results.iter().all(ImageResult::succeeded) {
        Outcome::Success
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
async fn settle_leftovers_of(manifest_file: &ManifestFile, plan: &Plan, registries: &Registries) {
    let repositories: BTreeSet<&str> = plan
        .images
        .iter()
        .map(|image| image.spec.repository.as_str())
        .collect();
    let Ok(settled) = settle_leftovers(
        &RegistryAliases(registries),
        manifest_file,
        |_, repository| repositories.contains(repository),
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

fn one_line(result: &ImageResult) -> String {
    let mut text = format!("{:?}", result.status).to_lowercase();
    if let Some(test) = &result.test {
        text.push_str(&format!(", self-test {}", test.status()));
    }
    if let Some(digest) = &result.digest {
        text.push_str(&format!(", {digest}"));
    }
    if let Some(stage) = &result.failed_stage {
        text.push_str(&format!(" (failed at {stage})"));
    }
    text
}

fn plan_table(plan: &Plan, manifest: &Manifest) -> String {
    let mut rows = vec![["IMAGE", "BUILD KEY", "AFTER", "ACTION", "ALIASES"]
        .map(String::from)
        .to_vec()];
    for image in &plan.images {
        let known = manifest
            .images()
            .get(&image.spec.tag)
            .is_some_and(|r| r.build_key == image.build_key);
        rows.push(vec![
            image.reference.clone(),
            image.build_key.hex()[..12].to_string(),
            image.depends_on.clone().unwrap_or_else(|| "-".into()),
            if known {
                "reuse if present, else build".into()
            } else {
                "build".into()
            },
            alias_cell(&image.aliases, &image.aliases_blocked),
        ]);
    }
    let mut out = table(&rows);
    out.push_str(&format!(
        "\n{} planned\n",
        count(plan.images.len(), "image")
    ));
    for image in &plan.images {
        for (alias, reason) in &image.aliases_blocked {
            out.push_str(&format!("held: {alias}: {reason}\n"));
        }
    }
    out
}

/// The aliases column: those moved (or to move) and those held, both named.
fn alias_cell(moved: &[String], held: &[(String, String)]) -> String {
    let mut parts = Vec::new();
    if !moved.is_empty() {
        parts.push(moved.join(", "));
    }
    if !held.is_empty() {
        parts.push(format!(
            "held: {}",
            held.iter()
                .map(|(alias, _)| alias.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join("; ")
    }
}

fn summary_table(results: &[ImageResult]) -> String {
    let mut rows = vec![[
        "IMAGE", "RESULT", "TEST", "DIGEST", "SIZE", "SECONDS", "ALIASES",
    ]
    .map(String::from)
    .to_vec()];
    for result in results {
        let moved = if result.aliases_moved.is_empty() {
            String::new()
        } else {
            format!("moved: {}", result.aliases_moved.join(", "))
        };
        let aliases = match (moved.is_empty(), result.aliases_held.is_empty()) {
            (true, true) => "-".to_string(),
            (false, true) => moved,
            (true, false) => held_text(result),
            (false, false) => format!("{moved}; {}", held_text(result)),
        };
        rows.push(vec![
            result.name.clone(),
            format!("{:?}", result.status).to_lowercase(),
            result
                .test
                .as_ref()
                .map(|t| t.status().to_string())
                .unwrap_or_else(|| "-".into()),
            result
                .digest
                .as_ref()
                .map(|d| d.short().to_string())
                .unwrap_or_else(|| "-".into()),
            result
                .size
                .map(|size| size.to_string())
                .unwrap_or_else(|| "-".into()),
            format!("{:.1}", result.seconds),
            aliases,
        ]);
    }
    let mut out = String::from("\n");
    out.push_str(&table(&rows));
    for result in results.iter().filter(|r| !r.notes.is_empty()) {
        out.push_str(&format!("\n{}: {}\n", result.name, result.notes.join("; ")));
    }
    // Each reason once, with every alias it holds (a run without GPUs holds them all alike).
    let mut reasons: Vec<(&str, Vec<String>)> = Vec::new();
    for result in results {
        for (alias, reason) in &result.aliases_held {
            let held = format!("{alias} ({})", result.name);
            match reasons
                .iter_mut()
                .find(|(known, _)| *known == reason.as_str())
            {
                Some((_, aliases)) => aliases.push(held),
                None => reasons.push((reason, vec![held])),
            }
        }
    }
    for (reason, aliases) in &reasons {
        out.push_str(&format!("\nheld: {}: {reason}", aliases.join(", ")));
    }
    if !reasons.is_empty() {
        out.push('\n');
    }
    // One entry per cause: images that failed with the same error (a missing base image, a
    // registry down) share it, each with its own log.
    let mut causes: Vec<(String, Vec<&ImageResult>)> = Vec::new();
    for result in results.iter().filter(|r| !r.succeeded()) {
        let cause = cause_of(result);
        match causes.iter_mut().find(|(known, _)| *known == cause) {
            Some((_, members)) => members.push(result),
            None => causes.push((cause, vec![result])),
        }
    }
    for (cause, members) in &causes {
        let names: Vec<String> = members
            .iter()
            .map(|r| format!("{} {}", r.name, format!("{:?}", r.status).to_lowercase()))
            .collect();
        out.push_str(&format!(
            "\n{}:\n  {}\n",
            names.join(", "),
            cause.replace('\n', "\n  ")
        ));
        for log in members.iter().filter_map(|r| full_log_of(r)) {
            out.push_str(&format!("  {log}\n"));
        }
    }
    let failed = results.iter().filter(|r| !r.succeeded()).count();
    out.push_str(&format!(
        "\n{}: {} ok, {} not ok\n",
        count(results.len(), "image"),
        results.len() - failed,
        failed
    ));
    out
}

/// A result's error without its `full log:` line, so images failing alike group together; devel
/// images not built because their runtime image failed share one cause.
fn cause_of(result: &ImageResult) -> String {
    let error = result.error.as_deref().unwrap_or("");
    if result.status == Status::Skipped && error.starts_with("not built: the image it builds on") {
        return "not built: the runtime image each builds on failed (above)".into();
    }
    result
        .error
        .as_deref()
        .unwrap_or("")
        .lines()
        .filter(|line| !line.starts_with("full log: "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `full log: ...` line of a result's error, if it has one.
fn full_log_of(result: &ImageResult) -> Option<&str> {
    result
        .error
        .as_deref()?
        .lines()
        .find(|line| line.starts_with("full log: "))
}

/// `held (reason): a, b` for one reason, or each alias with its own.
/// The held aliases of an image, by name; their reasons follow the table, each once.
fn held_text(result: &ImageResult) -> String {
    let names: Vec<&str> = result
        .aliases_held
        .iter()
        .map(|(a, _)| a.as_str())
        .collect();
    format!("held (reason below): {}", names.join(", "))
}

/// What this run did not get to: images interrupted or failed before they were pushed, aliases
/// that did not move, and alias moves it began and did not finish (pending in the manifest),
/// each with the command that finishes it.
fn left_undone(
    plan: &Plan,
    results: &[ImageResult],
    manifest: &Manifest,
    by: &str,
    push: bool,
) -> String {
    let mut lines = Vec::new();
    let rerun = |name: &str| {
        format!(
            "imagegen build{} --only {name}",
            if push { " --push" } else { "" }
        )
    };
    for result in results {
        let Some(planned) = plan.images.iter().find(|i| i.spec.name == result.name) else {
            continue;
        };
        let unmoved: Vec<&str> = planned
            .aliases
            .iter()
            .filter(|alias| {
                !result.aliases_moved.contains(alias)
                    && !result.aliases_held.iter().any(|(held, _)| held == *alias)
            })
            .map(String::as_str)
            .collect();
        match result.status {
            Status::Interrupted => lines.push(format!(
                "{}: {}; to finish: {}",
                result.name,
                result.error.as_deref().unwrap_or("interrupted"),
                rerun(&result.name)
            )),
            Status::Failed | Status::Skipped if result.digest.is_some() => lines.push(format!(
                "{}: pushed as {}, but aliases not moved: {}; to finish: {}",
                result.name,
                result
                    .digest
                    .as_ref()
                    .map(Digest::to_string)
                    .unwrap_or_default(),
                if unmoved.is_empty() {
                    "-".to_string()
                } else {
                    unmoved.join(", ")
                },
                rerun(&result.name)
            )),
            Status::Failed | Status::Skipped => lines.push(format!(
                "{}: not {} (failed at {}); after fixing it: {}",
                result.name,
                if push { "pushed" } else { "built" },
                result.failed_stage.as_deref().unwrap_or("an earlier image"),
                rerun(&result.name)
            )),
            Status::Built | Status::Reused => {}
        }
    }
    for (alias, pending) in manifest.pending_aliases() {
        if pending.by == by {
            lines.push(format!(
                "alias {alias}: the move to {} ({}) is written down as pending, not as done; `imagegen verify --adopt` settles it by what the registry serves, `imagegen build --push` makes it",
                pending.to, pending.tag
            ));
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nleft undone:\n");
    for line in lines {
        out.push_str(&format!("  {line}\n"));
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_images_nothing_of_the_run_builds_on_go_unloaded_when_it_pushes_untested() {
        let specs = crate::resolve::test_images(
            "registry: r.example\nrepository: t/p\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n",
        );
        let plan = crate::pipeline::plan::plan(
            &specs,
            &crate::resolve::select::select(&specs, None, None),
            &BTreeMap::new(),
            &Manifest::new(),
            None,
            &[],
        );
        let names: Vec<&str> = plan
            .images
            .iter()
            .map(|image| image.spec.name.as_str())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        // The devel image is built FROM the runtime one: only the devel image is left unloaded.
        let unloaded = run_nothing_here(&plan, true);
        let devel: Vec<&str> = names
            .iter()
            .copied()
            .filter(|name| name.contains("-devel-"))
            .collect();
        assert_eq!(
            unloaded.iter().map(String::as_str).collect::<Vec<_>>(),
            devel
        );
        assert!(run_nothing_here(&plan, false).is_empty());
    }

    #[test]
    fn the_summary_names_held_aliases_beside_moved_ones() {
        let mut result =
            ImageResult::new("2.7.0-cuda12.6-cudnn9-runtime-ubuntu24.04", Status::Built);
        result.aliases_moved = vec!["2.7-cuda12.6-runtime-ubuntu24.04".into()];
        result.aliases_held = vec![(
            "2.7-cuda12.6-runtime".into(),
            "2.7-cuda12.6-runtime would move backwards from torch 2.7.1".into(),
        )];
        let summary = summary_table(&[result]);
        assert!(
            summary.contains("moved: 2.7-cuda12.6-runtime-ubuntu24.04; held (reason below): 2.7-cuda12.6-runtime"),
            "{summary}"
        );
        assert!(
            summary.contains("held: 2.7-cuda12.6-runtime (2.7.0-cuda12.6-cudnn9-runtime-ubuntu24.04): 2.7-cuda12.6-runtime would move backwards"),
            "{summary}"
        );
        assert_eq!(
            summary.matches("would move backwards").count(),
            1,
            "{summary}"
        );
    }
}
