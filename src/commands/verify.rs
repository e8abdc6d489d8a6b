//! `imagegen verify`: every full tag, alias and index the manifest records, against what the
//! registry serves (a HEAD of each tag); exit 1 on any difference, each named with the command
//! that fixes it. It reads and never writes, except with `--adopt`, which settles alias moves
//! left in between (begun, not written down as done) by what the registry serves, through the
//! settle loop of `history::alias_transaction`. The comparison is `history::verify`'s; this file
//! asks and prints.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cli::{Format, VerifyArgs};
use crate::commands::attest;
use crate::commands::outcome::Outcome;
use crate::commands::output::table;
use crate::commands::signals::Signals;
use crate::commands::waiting::waiting_text;
use crate::docker::{repository_path_of, Registries, RetryPolicy};
use crate::history::alias_transaction::{settle_leftovers, SettleOutcome};
use crate::history::test_results::waiting;
use crate::history::verify::{compare, references, Adopted, Answers, Finding, Reference, Served};
use crate::model::digest::Digest;
use crate::project::{load_existing_manifest, ManifestFile, Project};

pub(crate) fn run(project: &Project, args: &VerifyArgs) -> Result<Outcome> {
    // The test policy says what waiting aliases wait for; a matrix that cannot be read (verify
    // needs only the manifest) leaves that unsaid.
    let require = project.matrix().ok().map(|m| m.tests.require.clone());
    // Which registry is asked: --registry, else the matrix's (it may have moved since the
    // records were written), else each record's own.
    let registry = args
        .registry
        .clone()
        .or_else(|| project.matrix().ok().map(|m| m.registry.clone()));
    let file = ManifestFile::new(&args.manifest, Duration::from_secs(args.lock.lock_timeout));
    // Loading checks every digest in it (file:line:col on a bad one); a manifest that is not
    // there is an error (a mistyped path must not verify as "nothing recorded").
    let manifest = load_existing_manifest(&args.manifest)?;
    if args.attestations {
        return verify_attestations(&manifest, args);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut signals = Signals::listen();
        tokio::select! {
            received = signals.recv() => {
                eprintln!("{}: stopped; the manifest was not changed", received.name());
                Ok(Outcome::Interrupted(received))
            }
            outcome = verify(&file, manifest, args, (require.as_deref(), registry.as_deref())) => outcome,
        }
    })
}

/// `--attestations`: the signed statements of every pushed image, not the tags.
fn verify_attestations(
    manifest: &crate::history::manifest::Manifest,
    args: &VerifyArgs,
) -> Result<Outcome> {
    let verifier = attest::load_verifier(args.key.as_deref(), &args.signing)?;
    let registries = Registries::new(
        Duration::from_secs(args.deadlines.registry_timeout),
        RetryPolicy::default(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let verdicts = runtime.block_on(attest::verify_attestations(
        manifest,
        &verifier,
        &registries,
    ))?;
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "manifest": args.manifest.display().to_string(),
                "key_id": verifier.key_id(),
                "checked": verdicts.len(),
                "bad": verdicts.iter().filter(|v| !v.problems.is_empty()).count(),
                "images": verdicts,
            }))?
        ),
        Format::Table => print!("{}", attest::verdict_table(&verdicts, verifier.key_id())),
    }
    Ok(if attest::all_whole(&verdicts) {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

async fn verify(
    file: &ManifestFile,
    manifest: crate::history::manifest::Manifest,
    args: &VerifyArgs,
    (require, asked): (Option<&[String]>, Option<&str>),
) -> Result<Outcome> {
    let timeout = Duration::from_secs(args.deadlines.registry_timeout);
    let mut registry = Registry::new(timeout, usize::from(args.concurrency));
    registry.host = asked.map(String::from);
    let recorded: std::collections::BTreeSet<String> = references(&manifest)
        .iter()
        .filter_map(|reference| reference.repository.split_once('/'))
        .map(|(host, _)| host.to_string())
        .collect();
    if let Some(host) = asked {
        if recorded.iter().any(|recorded| recorded != host) {
            eprintln!(
                "note: asking {host} for the images recorded under {}",
                recorded.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    let mut served = registry.ask(&references(&manifest)).await?;
    let mut adopted: Vec<Adopted> = Vec::new();
    let manifest = if args.adopt {
        // The one settle loop, by the answers just collected. A move another live run is making
        // (it holds the alias's lock) is that run's to finish: not settled here.
        let settled = settle_leftovers(&Answers(&served), file, |alias, repository| {
            served.contains_key(&Reference {
                repository: repository.to_string(),
                tag: alias.to_string(),
            })
        })
        .await?;
        for one in settled {
            match one.outcome? {
                SettleOutcome::Busy(holder) => {
                    eprintln!(
                        "{}: a move of it is under way ({holder}); not settled",
                        one.alias
                    );
                    served.retain(|reference, _| reference.tag != one.alias);
                }
                outcome => adopted.extend(Adopted::of(&one.alias, &outcome)),
            }
        }
        let updated = file.read()?;
        // Another run may have written references meanwhile: ask about those too.
        let unasked: Vec<Reference> = references(&updated)
            .into_iter()
            .filter(|reference| !served.contains_key(reference))
            .collect();
        served.extend(registry.ask(&unasked).await?);
        updated
    } else {
        manifest
    };
    let findings = compare(&manifest, &served);
    let drift = findings.iter().filter(|f| f.is_drift()).count();
    // Waiting for test results is not drift: the registry and the manifest agree on it.
    let mut waiting_for_tests = waiting(&manifest, require.unwrap_or_default());
    if require.is_none() {
        for image in &mut waiting_for_tests {
            image.missing = vec!["(matrix.yaml not read: see its `tests`)".into()];
        }
    }
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "manifest": file.path.display().to_string(),
                "checked": findings.len(),
                "drift": drift,
                "adopted": adopted,
                "findings": findings,
                "waiting_for_tests": waiting_for_tests,
            }))?
        ),
        Format::Table => print!(
            "{}{}",
            report(file, &findings, &adopted),
            waiting_text(&waiting_for_tests)
        ),
    }
    Ok(if drift == 0 {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// What the registry serves, asked of it with bounded concurrency.
struct Registry {
    registries: Registries,
    concurrency: usize,
    /// The registry host asked instead of each record's (`--registry`, or the matrix's).
    host: Option<String>,
}

impl Registry {
    fn new(timeout: Duration, concurrency: usize) -> Registry {
        Registry {
            registries: Registries::new(timeout, RetryPolicy::default()),
            concurrency: concurrency.max(1),
            host: None,
        }
    }

    /// What the registry serves for each reference: a HEAD each, up to `concurrency` at a time.
    async fn ask(&mut self, wanted: &[Reference]) -> Result<Served> {
        use futures_util::stream::{self, StreamExt, TryStreamExt};
        let asks = wanted.iter().map(|reference| {
            // The same repository path, on the registry asked.
            let repository = match (&self.host, reference.repository.split_once('/')) {
                (Some(host), Some((_, path))) => format!("{host}/{path}"),
                _ => reference.repository.clone(),
            };
            let client = self.registries.client(&repository);
            async move {
                let client = client?;
                let digest = client
                    .manifest_digest(repository_path_of(&repository), &reference.tag)
                    .await
                    .with_context(|| format!("cannot check {reference}"))?;
                anyhow::Ok((reference.clone(), digest))
            }
        });
        stream::iter(asks)
            .buffer_unordered(self.concurrency)
            .try_collect()
            .await
    }
}

fn short(digest: &Option<Digest>) -> String {
    digest
        .as_ref()
        .map(|d| d.short().to_string())
        .unwrap_or_else(|| "-".into())
}

/// The findings as a table, then each difference with its fix.
fn report(file: &ManifestFile, findings: &[Finding], adopted: &[Adopted]) -> String {
    let mut out = String::new();
    for change in adopted {
        writeln!(
            out,
            "adopted: {} {} (the registry serves {})",
            change.alias,
            change.outcome,
            short(&change.digest)
        )
        .ok();
    }
    if findings.is_empty() {
        writeln!(
            out,
            "{}: records nothing pushed; nothing to verify",
            file.path.display()
        )
        .ok();
        return out;
    }
    let mut rows = vec![["KIND", "NAME", "MANIFEST", "REGISTRY", "STATE"]
        .map(String::from)
        .to_vec()];
    for finding in findings {
        rows.push(vec![
            finding.subject.as_str().to_string(),
            finding.name.clone(),
            short(&finding.recorded),
            short(&finding.served),
            finding.state.as_str().to_string(),
        ]);
    }
    out.push_str(&table(&rows));
    let drifted: Vec<&Finding> = findings.iter().filter(|f| f.is_drift()).collect();
    for finding in &drifted {
        writeln!(
            out,
            "\n{} {} ({}): {}",
            finding.subject.as_str(),
            finding.name,
            finding
                .repository
                .as_deref()
                .unwrap_or("repository unknown"),
            finding.problem
        )
        .ok();
        if let Some(fix) = &finding.fix {
            writeln!(out, "  fix: {fix}").ok();
        }
    }
    writeln!(
        out,
        "\n{} checked against the registry, {} differ ({})",
        findings.len(),
        drifted.len(),
        file.path.display()
    )
    .ok();
    out
}
