//! The `build` command: check that `images/` is rendered from the matrix, assemble the build
//! contexts, compute the plan, then (unless `--dry-run`) connect to Docker, execute the plan and
//! record every result in the manifest as soon as it is known, so Ctrl-C or a crash keeps what
//! finished. Prints a summary table; exit 1 if any image failed, 130/143 on SIGINT/SIGTERM.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use crate::cli::BuildArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{count, emit, note, table};
use crate::commands::signals::{interrupted, Signal};
use crate::commands::stages::{no_images, render_project};
use crate::docker::{Engine, RetryPolicy};
use crate::history::manifest::{now_rfc3339, Manifest};
use crate::model::digest::Digest;
use crate::pipeline::docker_builder::{Contexts, EngineBuilder, EngineBuilderSettings};
use crate::pipeline::executor::{execute, ExecOptions, ImageResult, Status};
use crate::pipeline::plan::{plan, select_for_build, Plan, Shard};
use crate::pipeline::progress::Progress;
use crate::pipeline::record::record;
use crate::pipeline::selftest::check_baseline;
use crate::project::{self, load_manifest, read_selftest_baseline, save_manifest, Project};

pub fn run(project: &Project, args: &BuildArgs) -> Result<Outcome> {
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
    let contexts = Contexts::assemble(&selected, &args.images, &args.selftest_dir)?;
    let manifest = load_manifest(&args.manifest)?;
    let plan = plan(
        &selected,
        &contexts.digests(),
        &manifest,
        baseline_digest.as_ref(),
    );
    if args.dry_run {
        emit(plan_table(&plan, &manifest))?;
        return Ok(Outcome::Success);
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(execute_plan(
        project, args, plan, contexts, manifest, baseline,
    ))
}

async fn execute_plan(
    project: &Project,
    settings: &BuildArgs,
    plan: Plan,
    contexts: Contexts,
    manifest: Manifest,
    selftest_baseline: Option<String>,
) -> Result<Outcome> {
    let retry = RetryPolicy {
        attempts: settings.push_attempts.max(1),
        ..RetryPolicy::default()
    };
    let engine = Engine::connect().await?.with_push_retry(retry);
    let terminal = std::io::stderr().is_terminal() && std::env::var_os("CI").is_none();
    let progress = Arc::new(Progress::new(terminal, &settings.log_dir));
    let source_commit = source_commit(&project.matrix_path);
    let mut build_labels = BTreeMap::new();
    build_labels.insert(
        "org.opencontainers.image.created".to_string(),
        now_rfc3339(),
    );
    if let Some(commit) = &source_commit {
        build_labels.insert(
            "org.opencontainers.image.revision".to_string(),
            commit.clone(),
        );
    }
    let builder = Arc::new(EngineBuilder::new(
        engine,
        contexts,
        Arc::clone(&progress),
        EngineBuilderSettings {
            build_labels,
            check_registry: settings.push,
            registry_retry: retry,
            selftest_baseline,
            ..Default::default()
        },
    ));
    let options = ExecOptions {
        jobs: settings.jobs,
        push: settings.push,
        test: !settings.no_test,
        require_gpu: settings.require_gpu,
        move_untested_aliases: settings.move_untested_aliases,
    };
    note(format!(
        "building {}, {} at a time{}",
        count(plan.images.len(), "image"),
        options.jobs.max(1),
        if settings.push { ", pushing" } else { "" }
    ));

    let manifest = Mutex::new(manifest);
    let save_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let by_name: BTreeMap<String, _> = plan
        .images
        .iter()
        .map(|i| (i.spec.name.clone(), i.clone()))
        .collect();
    let signal: Mutex<Option<Signal>> = Mutex::new(None);
    let cancel = async {
        let received = interrupted().await;
        note(format!(
            "{}: stopping; finished images stay recorded in {}",
            received.name(),
            settings.manifest.display()
        ));
        *signal.lock().expect("signal lock") = Some(received);
    };
    let results = execute(&plan, builder, &options, cancel, |result| {
        progress.finish(&result.name, &one_line(result));
        let Some(planned) = by_name.get(&result.name) else {
            return;
        };
        let mut manifest = manifest.lock().expect("manifest lock");
        record(
            &mut manifest,
            planned,
            result,
            source_commit.as_deref(),
            &now_rfc3339(),
        );
        if let Err(error) = save_manifest(&settings.manifest, &manifest) {
            save_error.lock().expect("save lock").get_or_insert(error);
        }
    })
    .await;
    if let Some(error) = save_error.into_inner().expect("save lock") {
        return Err(error.context(format!(
            "cannot write the manifest {}",
            settings.manifest.display()
        )));
    }
    emit(summary_table(&results))?;
    emit(format!("manifest: {}\n", settings.manifest.display()))?;
    if let Some(received) = *signal.lock().expect("signal lock") {
        return Ok(Outcome::Interrupted(received));
    }
    Ok(if results.iter().all(ImageResult::succeeded) {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// `git rev-parse HEAD` of the matrix's repository, or `GITHUB_SHA`.
fn source_commit(matrix_path: &Path) -> Option<String> {
    if let Ok(sha) = std::env::var("GITHUB_SHA") {
        return Some(sha);
    }
    let dir = matrix_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
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
            .images
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
            if image.aliases.is_empty() {
                "-".into()
            } else {
                image.aliases.join(", ")
            },
        ]);
    }
    let mut out = table(&rows);
    out.push_str(&format!(
        "\n{} planned\n",
        count(plan.images.len(), "image")
    ));
    out
}

fn summary_table(results: &[ImageResult]) -> String {
    let mut rows = vec![["IMAGE", "RESULT", "TEST", "DIGEST", "SECONDS", "ALIASES"]
        .map(String::from)
        .to_vec()];
    for result in results {
        let aliases = if !result.aliases_moved.is_empty() {
            format!("moved: {}", result.aliases_moved.join(", "))
        } else if !result.aliases_held.is_empty() {
            format!(
                "held ({}): {}",
                result.aliases_held[0].1,
                result
                    .aliases_held
                    .iter()
                    .map(|(a, _)| a.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            "-".into()
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
            format!("{:.1}", result.seconds),
            aliases,
        ]);
    }
    let mut out = String::from("\n");
    out.push_str(&table(&rows));
    for result in results.iter().filter(|r| !r.notes.is_empty()) {
        out.push_str(&format!("\n{}: {}\n", result.name, result.notes.join("; ")));
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
