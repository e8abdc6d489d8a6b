//! `imagegen test` and `imagegen test import`: the self-test of images already pushed, on any
//! node with Docker and GPUs, or from reports made elsewhere (a Kubernetes Job, a GPU runner).
//!
//! `test` picks recorded images (every current full tag with a digest, `--only`, `--digest`),
//! checks that the registry still serves each recorded digest under its full tag (a tag that now
//! serves another digest is refused: the image under test must be the one recorded), pulls it by
//! digest (never by tag), runs gpu-selftest in it as `build` does, with the digest and this node's
//! name handed to it, and records the result under the digest (`history::test_results`). `test
//! import` reads gpu-selftest JSON reports, refuses any that does not name a recorded digest and a
//! node (nothing is recorded then), and records the rest. Both then move the aliases waiting on
//! an image once the matrix's test policy holds, each through `history::alias_transaction::move_alias` (the
//! one alias transaction).
//!
//! With a signing key (`--signing-key`, `IMAGEGEN_SIGNING_KEY_FILE`, `IMAGEGEN_SIGNING_KEY`, as
//! `build --push`), every image whose result was recorded is attested again
//! (`commands::attest::attest_image`): its gpu-selftest statement, re-made from the manifest,
//! lists every node's recorded result with its own verdict (`nodeResults`), and the new `.att`
//! and `.sig` are recorded in the manifest's attestations.

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::attest::dsse::Signer;
use crate::cli::{Format, TestAction, TestArgs, TestImportArgs, TestSettleArgs};
use crate::commands::attest::{attest_image, load_signer, SignContext};
use crate::commands::ledger::{this_owner, RunId};
use crate::commands::outcome::Outcome;
use crate::commands::output::{emit, note, table};
use crate::docker::{Engine, Registries, RetryPolicy};
use crate::history::alias_transaction::{move_alias, AliasOutcome, AliasRequest, AliasTarget};
use crate::history::aliases::recorded_candidate;
use crate::history::ledger::Transaction;
use crate::history::manifest::{now_rfc3339, GpuTestResult, Manifest, RecordStatus, TestStatus};
use crate::history::test_results::{
    judge, read_report, result_from_report, results_of, valid_node_name,
};
use crate::model::digest::Digest;
use crate::pipeline::docker_builder::{DigestTester, RegistryAliases, RUN_LABEL};
use crate::pipeline::executor::TestOutcome;
use crate::pipeline::plan::matches_filter;
use crate::pipeline::selftest::check_baseline;
use crate::project::{
    host_name, read_selftest_baseline, read_selftest_report, ManifestFile, Project,
};

pub(crate) fn run(project: &Project, args: &TestArgs) -> Result<Outcome> {
    match &args.action {
        Some(TestAction::Import(import)) => run_import(project, import),
        Some(TestAction::Settle(settle)) => run_settle(project, settle),
        None => run_tests(project, args),
    }
}

/// One image's line of the report.
#[derive(Debug, Clone, Serialize)]
struct Line {
    tag: String,
    digest: Digest,
    node: String,
    gpus: Vec<String>,
    /// pass, fail, error, skipped (nothing recorded), refused (nothing run).
    verdict: String,
    summary: String,
    aliases_moved: Vec<String>,
    aliases_waiting: Vec<String>,
    /// What the policy still wants for the waiting aliases.
    missing: Vec<String>,
    /// Whether its test result went into the manifest (a test that ran and was recorded, or a
    /// report imported); a skip, a refusal, a pull that failed or `settle` record none.
    recorded: bool,
}

/// One image to test: its full tag, repository and recorded digest.
struct Chosen {
    tag: String,
    repository: String,
    digest: Digest,
}

/// The recorded images `args` selects.
fn choose(manifest: &Manifest, args: &TestArgs) -> Result<Vec<Chosen>> {
    let mut chosen = Vec::new();
    if !args.digests.is_empty() {
        for text in &args.digests {
            let digest = Digest::parse(text).with_context(|| format!("--digest {text}"))?;
            let record = manifest
                .all_records()
                .find(|r| r.digest.as_ref() == Some(&digest))
                .ok_or_else(|| {
                    anyhow!(
                        "--digest {digest}: {} records no image with this digest\nhint: `imagegen test` tests recorded images only; build and push it first",
                        args.manifest.display()
                    )
                })?;
            chosen.push(Chosen {
                tag: record.tag.clone(),
                repository: record.repository.clone(),
                digest,
            });
        }
        return Ok(chosen);
    }
    for record in manifest.images().values() {
        let Some(digest) = &record.digest else {
            continue;
        };
        if record.status != RecordStatus::Ok
            || args
                .only
                .as_deref()
                .is_some_and(|only| !matches_filter(only, &record.tag))
        {
            continue;
        }
        chosen.push(Chosen {
            tag: record.tag.clone(),
            repository: record.repository.clone(),
            digest: digest.clone(),
        });
    }
    if chosen.is_empty() {
        bail!(
            "{} records no pushed image{}\nhint: `imagegen build --push` records them; `imagegen plan` shows what the matrix makes",
            args.manifest.display(),
            args.only
                .as_deref()
                .map(|only| format!(" whose full tag matches --only {only}"))
                .unwrap_or_default()
        );
    }
    Ok(chosen)
}

/// The node name: `--node`, else this machine's host name; checked, since it is recorded.
fn node_name(given: Option<&str>) -> Result<String> {
    let node = match given {
        Some(node) => node.to_string(),
        None => host_name().ok_or_else(|| {
            anyhow!("cannot read this machine's host name\nhint: name the node with --node NAME")
        })?,
    };
    if !valid_node_name(&node) {
        bail!("--node {node:?}: a node name is letters, digits, `.`, `_` and `-`, at most 253 characters");
    }
    Ok(node)
}

fn run_tests(project: &Project, args: &TestArgs) -> Result<Outcome> {
    let require = project.matrix()?.tests.require.clone();
    // A signing key that cannot be used stops the run before anything is tested.
    let signer = load_signer(&args.signing)?;
    let file = ManifestFile::new(&args.manifest, Duration::from_secs(args.lock.lock_timeout));
    let manifest = file.read()?;
    let chosen = choose(&manifest, args)?;
    let node = node_name(args.node.as_deref())?;
    let baseline = match &args.selftest_baseline {
        Some(path) => {
            let text = read_selftest_baseline(path)?;
            check_baseline(&text)
                .map_err(|why| anyhow!("--selftest-baseline {}: {why}", path.display()))?;
            Some(text)
        }
        None => None,
    };
    let baseline_digest = baseline.as_deref().map(|text| Digest::of(text.as_bytes()));
    let timeout = Duration::from_secs(args.deadlines.registry_timeout);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let engine =
            Engine::connect_with_timeout(Duration::from_secs(args.deadlines.daemon_timeout))
                .await?;
        let tester = DigestTester {
            engine: engine.clone(),
            registries: Registries::new(timeout, RetryPolicy::default()),
            run_id: RunId::this_process().to_string(),
            node: node.clone(),
            baseline,
        };
        let gpus = tester.gpus().await;
        if !gpus {
            note("no GPU runtime on this Docker daemon: gpu-selftest runs without GPUs (a report that says it could not run records nothing)");
        }
        let mut lines = Vec::new();
        for image in &chosen {
            let line = test_one(&tester, &file, image, gpus, baseline_digest.as_ref()).await;
            lines.push(line);
        }
        let _ = engine
            .remove_containers_with_label(RUN_LABEL, &tester.run_id)
            .await;
        let signed = match &signer {
            Some(signer) => {
                attest_recorded(project, signer, &file, &tester.registries, &lines).await
            }
            None => true,
        };
        if args.no_move {
            list_waiting(&file.read()?, &require, &mut lines);
        } else {
            move_ready_aliases(
                &RegistryAliases(&tester.registries),
                &file,
                &require,
                &mut lines,
            )
            .await?;
        }
        let outcome = finish(lines, args.format, &file.path)?;
        Ok(if signed { outcome } else { Outcome::Failed })
    })
}

/// Attests again each image of `lines` whose result was recorded (pass, fail, error), from the
/// manifest as it now is, and records the attestations; false when one could not be signed.
async fn attest_recorded(
    project: &Project,
    signer: &Signer,
    file: &ManifestFile,
    registries: &Registries,
    lines: &[Line],
) -> bool {
    let mut context = SignContext::of(project);
    let mut whole = true;
    let mut seen = std::collections::BTreeSet::new();
    for line in lines {
        if !matches!(line.verdict.as_str(), "pass" | "fail" | "error")
            || !seen.insert(line.digest.clone())
        {
            continue;
        }
        let attested = async {
            let manifest = file.read()?;
            let record = manifest
                .all_records()
                .find(|r| r.digest.as_ref() == Some(&line.digest))
                .with_context(|| format!("the manifest no longer records {}", line.digest))?;
            // The statement's top-level `node` is the build host's; this node is in nodeResults.
            context.node = record
                .selftest
                .as_ref()
                .and_then(|test| test.report.as_ref())
                .and_then(|report| report["node_name"].as_str())
                .map(String::from);
            let attested = attest_image(registries, signer, record, &line.digest, &context).await?;
            let mut transaction = Transaction::begin(file)?;
            transaction.record_attestation(line.digest.clone(), attested.clone());
            transaction.commit()?;
            anyhow::Ok(attested)
        }
        .await;
        match attested {
            Ok(attested) => note(format!(
                "{}: signed, attestations {} (key {}, {} node result(s))",
                line.tag,
                attested.attestations.tag,
                &attested.key_id[..12.min(attested.key_id.len())],
                file.read()
                    .ok()
                    .and_then(|m| m
                        .all_records()
                        .find(|r| r.digest.as_ref() == Some(&line.digest))
                        .map(|r| results_of(r).len()))
                    .unwrap_or(0)
            )),
            Err(error) => {
                whole = false;
                eprintln!("{}: results recorded, not signed: {error:#}", line.tag);
            }
        }
    }
    whole
}

/// Tests one image: the tag must still serve the recorded digest; pull by digest; run; record.
async fn test_one(
    tester: &DigestTester,
    file: &ManifestFile,
    image: &Chosen,
    gpus: bool,
    baseline: Option<&Digest>,
) -> Line {
    let mut line = Line {
        tag: image.tag.clone(),
        digest: image.digest.clone(),
        node: tester.node.clone(),
        gpus: Vec::new(),
        verdict: "refused".into(),
        summary: String::new(),
        aliases_moved: Vec::new(),
        aliases_waiting: Vec::new(),
        missing: Vec::new(),
        recorded: false,
    };
    let repository = &image.repository;
    match tester.served(repository, &image.tag).await {
        Ok(Some(served)) if served == image.digest => {}
        Ok(Some(served)) => {
            line.summary = format!(
                "{repository}:{} now serves {served}, not the recorded {}: refused (the image under test must be the one recorded; `imagegen restore {}` puts the recorded digest back, `imagegen verify` shows every difference)",
                image.tag, image.digest, image.tag
            );
            return line;
        }
        Ok(None) => {
            line.summary = format!(
                "the registry no longer serves {repository}:{}: refused (`imagegen verify` shows it)",
                image.tag
            );
            return line;
        }
        Err(error) => {
            line.verdict = "error".into();
            line.summary = format!(
                "cannot ask the registry for {repository}:{}: {error:#}",
                image.tag
            );
            return line;
        }
    }
    let reference = match tester.pull(repository, &image.digest).await {
        Ok(reference) => reference,
        Err(error) => {
            line.verdict = "error".into();
            line.summary = format!("cannot pull {repository}@{}: {error:#}", image.digest);
            return line;
        }
    };
    let outcome = tester
        .test(&reference, &image.digest, &image.tag, gpus)
        .await;
    line.verdict = outcome.status().to_string();
    line.summary = outcome.summary().to_string();
    let status = match &outcome {
        TestOutcome::Skipped { .. } => return line,
        other => other.status(),
    };
    let report = outcome.report().cloned().unwrap_or(serde_json::Value::Null);
    let mut result = result_from_report(
        &report,
        &tester.node,
        status,
        &now_rfc3339(),
        "imagegen test",
    );
    result.baseline = baseline.cloned();
    line.gpus = result.gpus.clone();
    match record(file, &image.digest, &result) {
        Ok(()) => line.recorded = true,
        Err(error) => {
            line.verdict = "error".into();
            line.summary = format!("{}; not recorded: {error:#}", line.summary);
        }
    }
    line
}

/// Records `result` under `digest` in the manifest (one transaction).
fn record(file: &ManifestFile, digest: &Digest, result: &GpuTestResult) -> Result<()> {
    let mut transaction = Transaction::begin(file)?;
    transaction
        .record_test_result(digest, result)
        .ok_or_else(|| anyhow!("the manifest no longer records {digest}"))?;
    transaction.commit()
}

/// For each image of `lines` whose aliases wait: once the policy holds on its results, moves
/// them (the alias transaction), and says what still waits and for what.
async fn move_ready_aliases(
    registry: &RegistryAliases<'_>,
    file: &ManifestFile,
    require: &[String],
    lines: &mut [Line],
) -> Result<()> {
    let owner = this_owner();
    for line in lines.iter_mut() {
        // A refused image (its tag serves another digest) moves nothing, whatever it recorded.
        if line.verdict == "refused" {
            continue;
        }
        let manifest = file.read()?;
        let Some(record) = manifest
            .images()
            .get(&line.tag)
            .filter(|r| r.digest.as_ref() == Some(&line.digest))
        else {
            continue;
        };
        let state = judge(require, &results_of(record));
        if !state.holds {
            line.aliases_waiting = record.awaiting_aliases.clone();
            if !line.aliases_waiting.is_empty() {
                line.missing = state.missing;
            }
            continue;
        }
        for alias in record.awaiting_aliases.clone() {
            let torch = match recorded_candidate(&alias, &record.torch, &record.tag) {
                Ok(torch) => torch,
                Err(reason) => {
                    note(format!("{}: {alias} not moved: {reason}", record.tag));
                    drop_awaiting(file, &line.tag, &line.digest, &alias)?;
                    continue;
                }
            };
            let request = AliasRequest {
                repository: &record.repository,
                target: AliasTarget {
                    alias: &alias,
                    tag: &record.tag,
                    digest: &line.digest,
                    guard_torch: Some(&torch),
                },
                owner: &owner,
            };
            match move_alias(registry, file, &request).await {
                Ok(AliasOutcome::Held(reason)) => {
                    note(format!("{}: {alias} not moved: {reason}", record.tag));
                }
                Ok(_) => line.aliases_moved.push(alias.clone()),
                Err(error) => {
                    note(format!("{}: moving {alias} failed: {error:#}", record.tag));
                    line.aliases_waiting.push(alias.clone());
                    continue;
                }
            }
            // Moved, or held for good (it would go backwards): it no longer waits.
            drop_awaiting(file, &line.tag, &line.digest, &alias)?;
        }
    }
    Ok(())
}

/// Writes down that the record of `tag` at `digest` no longer awaits `alias` (moved, or held for
/// good).
fn drop_awaiting(file: &ManifestFile, tag: &str, digest: &Digest, alias: &str) -> Result<()> {
    let mut transaction = Transaction::begin(file)?;
    transaction.drop_awaiting(tag, digest, alias);
    transaction.commit()
}

/// Prints the lines, ending with what went into the manifest; the outcome: refused digests are an
/// error (exit 2), and so is a run that could test no image; a failed test exit 1.
fn finish(lines: Vec<Line>, format: Format, manifest: &Path) -> Result<Outcome> {
    match format {
        Format::Json => emit(format!(
            "{}\n",
            serde_json::to_string_pretty(&serde_json::json!({ "results": lines }))?
        ))?,
        Format::Table => {
            let mut rows = vec![["IMAGE", "DIGEST", "NODE", "GPUS", "RESULT", "ALIASES"]
                .map(String::from)
                .to_vec()];
            for line in &lines {
                let mut aliases = Vec::new();
                if !line.aliases_moved.is_empty() {
                    aliases.push(format!("moved: {}", line.aliases_moved.join(", ")));
                }
                if !line.aliases_waiting.is_empty() && line.missing.is_empty() {
                    aliases.push(format!(
                        "ready (`imagegen test settle` moves them): {}",
                        line.aliases_waiting.join(", ")
                    ));
                } else if !line.aliases_waiting.is_empty() {
                    aliases.push(format!(
                        "waiting for {}: {}",
                        line.missing.join(", "),
                        line.aliases_waiting.join(", ")
                    ));
                }
                rows.push(vec![
                    line.tag.clone(),
                    line.digest.short().to_string(),
                    line.node.clone(),
                    if line.gpus.is_empty() {
                        "-".into()
                    } else {
                        line.gpus.join(", ")
                    },
                    line.verdict.clone(),
                    if aliases.is_empty() {
                        "-".into()
                    } else {
                        aliases.join("; ")
                    },
                ]);
            }
            let mut text = table(&rows);
            for line in lines
                .iter()
                .filter(|l| l.verdict != "pass" && !l.summary.is_empty())
            {
                text.push_str(&format!(
                    "\n{}: {}: {}",
                    line.tag, line.verdict, line.summary
                ));
            }
            let recorded = lines.iter().filter(|l| l.recorded).count();
            let moved: usize = lines.iter().map(|l| l.aliases_moved.len()).sum();
            let mut written = Vec::new();
            if recorded > 0 {
                written.push(format!(
                    "{recorded} test {}",
                    if recorded == 1 { "result" } else { "results" }
                ));
            }
            if moved > 0 {
                written.push(format!(
                    "{moved} alias {}",
                    if moved == 1 { "move" } else { "moves" }
                ));
            }
            if written.is_empty() {
                text.push_str(&format!("\nnothing recorded in {}\n", manifest.display()));
            } else {
                text.push_str(&format!(
                    "\n{} recorded in {}\n",
                    written.join(" and "),
                    manifest.display()
                ));
            }
            emit(text)?;
        }
    }
    // No image could be tested here (no GPU, or no NVIDIA runtime): nothing was recorded and no
    // alias moved, which is "could not run" (exit 2), not a pass.
    let skipped = lines.iter().filter(|l| l.verdict == "skipped").count();
    if skipped > 0 && skipped == lines.len() {
        bail!(
            "no image could be tested on this node: gpu-selftest skipped all {skipped} ({}); nothing was recorded and the aliases still wait\nhint: run `imagegen test` on a node with GPUs and the NVIDIA container runtime (`imagegen doctor` checks it), or import a report made there with `imagegen test import`",
            lines[0].summary
        );
    }
    let refused: Vec<&Line> = lines.iter().filter(|l| l.verdict == "refused").collect();
    if !refused.is_empty() {
        bail!(
            "{} refused: {}",
            refused.len(),
            refused
                .iter()
                .map(|l| l.summary.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    Ok(
        if lines
            .iter()
            .any(|l| matches!(l.verdict.as_str(), "fail" | "error"))
        {
            Outcome::Failed
        } else {
            Outcome::Success
        },
    )
}

fn run_import(project: &Project, args: &TestImportArgs) -> Result<Outcome> {
    let require = project.matrix()?.tests.require.clone();
    let signer = load_signer(&args.signing)?;
    let file = ManifestFile::new(&args.manifest, Duration::from_secs(args.lock.lock_timeout));
    let manifest = file.read()?;
    // Every report is read and checked before anything is recorded: one bad report records none.
    let now = now_rfc3339();
    let mut reads: Vec<(
        String,
        &std::path::PathBuf,
        crate::history::test_results::ReadReport,
    )> = Vec::new();
    for path in &args.reports {
        let text = read_selftest_report(path)?;
        let read = read_report(&text, &now, &format!("test import {}", path.display())).map_err(
            |error| anyhow!("{}: {error}; refused, nothing was imported", path.display()),
        )?;
        let Some(record) = manifest
            .all_records()
            .find(|r| r.digest.as_ref() == Some(&read.digest))
        else {
            bail!(
                "{}: its image_digest {} is not recorded in {}; refused, nothing was imported\nhint: a report counts only for an image this manifest records (`imagegen build --push`); check that the report was made for this project's image",
                path.display(),
                read.digest,
                args.manifest.display()
            );
        };
        if let Some((_, other_path, other)) = reads.iter().find(|(_, _, other)| {
            other.digest == read.digest
                && other.result.node == read.result.node
                && other.result.verdict != read.result.verdict
        }) {
            bail!(
                "{} and {} are both reports of node {} for {}, one says {}, the other {}; refused, nothing was imported\nhint: import the report of the run you trust (a re-test is imported on its own, later)",
                other_path.display(),
                path.display(),
                read.result.node,
                read.digest,
                other.result.verdict,
                read.result.verdict
            );
        }
        reads.push((record.tag.clone(), path, read));
    }
    let mut transaction = Transaction::begin(&file)?;
    for (_, _, read) in &reads {
        transaction.record_test_result(&read.digest, &read.result);
    }
    transaction.commit()?;
    let mut lines: Vec<Line> = reads
        .iter()
        .map(|(tag, _, read)| Line {
            tag: tag.clone(),
            digest: read.digest.clone(),
            node: read.result.node.clone(),
            gpus: read.result.gpus.clone(),
            verdict: read.result.verdict.to_string(),
            summary: read.result.summary.clone(),
            aliases_moved: Vec::new(),
            aliases_waiting: Vec::new(),
            missing: Vec::new(),
            // Imported in the transaction committed above.
            recorded: true,
        })
        .collect();
    let timeout = Duration::from_secs(args.deadlines.registry_timeout);
    let registries = Registries::new(timeout, RetryPolicy::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let signed = match &signer {
        Some(signer) => {
            runtime.block_on(attest_recorded(project, signer, &file, &registries, &lines))
        }
        None => true,
    };
    if args.no_move {
        list_waiting(&file.read()?, &require, &mut lines);
        let outcome = finish(lines, args.format, &file.path)?;
        return Ok(if signed { outcome } else { Outcome::Failed });
    }
    runtime.block_on(move_ready_aliases(
        &RegistryAliases(&registries),
        &file,
        &require,
        &mut lines,
    ))?;
    let failed = lines
        .iter()
        .any(|l| l.verdict == TestStatus::Fail.as_str() || l.verdict == TestStatus::Error.as_str());
    let outcome = finish(lines, args.format, &file.path)?;
    Ok(if failed || !signed {
        Outcome::Failed
    } else {
        outcome
    })
}

/// Fills in what each line's image still waits for, without moving anything.
fn list_waiting(manifest: &Manifest, require: &[String], lines: &mut [Line]) {
    for line in lines {
        if let Some(record) = manifest
            .images()
            .get(&line.tag)
            .filter(|r| r.digest.as_ref() == Some(&line.digest))
        {
            line.aliases_waiting = record.awaiting_aliases.clone();
            if !line.aliases_waiting.is_empty() {
                line.missing = judge(require, &results_of(record)).missing;
            }
        }
    }
}

/// `imagegen test settle`: every image with waiting aliases, moved where the policy holds.
fn run_settle(project: &Project, args: &TestSettleArgs) -> Result<Outcome> {
    let require = project.matrix()?.tests.require.clone();
    let file = ManifestFile::new(&args.manifest, Duration::from_secs(args.lock.lock_timeout));
    let manifest = file.read()?;
    let mut lines: Vec<Line> = manifest
        .images()
        .values()
        .filter(|record| !record.awaiting_aliases.is_empty())
        .filter_map(|record| {
            let digest = record.digest.clone()?;
            let state = judge(&require, &results_of(record));
            Some(Line {
                tag: record.tag.clone(),
                digest,
                node: "-".into(),
                gpus: Vec::new(),
                verdict: if state.holds { "pass" } else { "waiting" }.into(),
                summary: String::new(),
                aliases_moved: Vec::new(),
                aliases_waiting: Vec::new(),
                missing: Vec::new(),
                recorded: false,
            })
        })
        .collect();
    if lines.is_empty() {
        emit("no aliases wait for self-test results\n")?;
        return Ok(Outcome::Success);
    }
    let timeout = Duration::from_secs(args.deadlines.registry_timeout);
    let registries = Registries::new(timeout, RetryPolicy::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(move_ready_aliases(
        &RegistryAliases(&registries),
        &file,
        &require,
        &mut lines,
    ))?;
    finish(lines, args.format, &file.path)
}
