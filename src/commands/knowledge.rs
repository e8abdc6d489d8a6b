//! `imagegen knowledge derive torch X.Y.Z [--index URL] [--check]`: read a release's wheels
//! from a PyPI-style index, print the knowledge entry their metadata gives, and with `--check`
//! compare it with the knowledge in use: checked, unchecked and different facts are counted
//! (exit 1 on a difference, 4 when nothing differs but something could not be checked). A wheel
//! whose `.metadata` the index does not serve is read by byte ranges (its zip directory, then the
//! METADATA member).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cli::{DerivePackage, KnowledgeAction, KnowledgeArgs};
use crate::commands::outcome::Outcome;
use crate::docker::pypi_index::{IndexClient, MetadataFrom};
use crate::history::manifest::now_rfc3339;
use crate::model::knowledge::derive::{self, DerivedRelease};
use crate::model::version::TorchVersion;
use crate::project::Project;

pub(crate) fn run(project: &Project, args: &KnowledgeArgs) -> Result<Outcome> {
    match &args.action {
        KnowledgeAction::Derive(derive) => match derive.package {
            DerivePackage::Torch => {
                derive_torch(project, &derive.version, &derive.index, derive.check)
            }
        },
    }
}

/// Runs the derivation and prints it, against the project's knowledge (the embedded one, or
/// with the `--knowledge` override).
fn derive_torch(project: &Project, version: &str, index: &str, check: bool) -> Result<Outcome> {
    let torch = TorchVersion::parse(version)
        .ok()
        .filter(|v| !v.is_series)
        .with_context(|| format!("`{version}` is not a torch release such as 2.13.0"))?;
    // Load the knowledge first: a broken override should fail before the network is used.
    let knowledge = project.knowledge()?;
    let derived = fetch_and_derive(index, "torch", version)?;
    let read_on = now_rfc3339().chars().take(10).collect::<String>();
    print!("{}", derive::to_yaml(&derived, &read_on));
    if !check {
        return Ok(Outcome::Success);
    }
    let comparison = derive::compare(&derived, &torch, &knowledge);
    let against = project
        .knowledge_path
        .as_ref()
        .map(|p| format!("the embedded knowledge with {} over it", p.display()))
        .unwrap_or_else(|| "the embedded knowledge".into());
    let mut report = String::new();
    writeln!(
        report,
        "# --check against {against}: {} checked, {} unchecked, {} different",
        comparison.checked.len(),
        comparison.unchecked.len(),
        comparison.differences.len()
    )
    .ok();
    for note in &comparison.notes {
        writeln!(report, "# note: {note}").ok();
    }
    for unchecked in &comparison.unchecked {
        writeln!(report, "# unchecked: {unchecked}").ok();
    }
    for difference in &comparison.differences {
        writeln!(report, "# difference: {difference}").ok();
    }
    print!("{report}");
    if !comparison.differences.is_empty() {
        eprintln!(
            "error: torch {version} as {} describes it differs from {against} in {} place(s)\nhint: correct knowledge.yaml from the wheels' metadata above, citing the index as the source",
            derived.page_url,
            comparison.differences.len()
        );
        Ok(Outcome::Failed)
    } else if !comparison.unchecked.is_empty() {
        eprintln!(
            "error: torch {version}: {} fact(s) could not be checked against {against} (none differs)\nhint: the index serves neither .metadata files nor byte ranges of the wheels; give --index for one that does",
            comparison.unchecked.len()
        );
        Ok(Outcome::Unchecked)
    } else {
        Ok(Outcome::Success)
    }
}

/// Reads the project page and every Linux wheel's metadata, then derives the release.
fn fetch_and_derive(index: &str, project: &str, version: &str) -> Result<DerivedRelease> {
    let client = IndexClient::new(index, Duration::from_secs(60));
    let page_url = client.page_url(project);
    let files = client.project_files(project).with_context(|| {
        format!("reading the {project} page of {index}\nhint: `knowledge derive` reads the index over the network; give --index for a mirror")
    })?;
    let wheels = derive::linux_wheels(&files, project, version)?;
    let mut metadata = BTreeMap::new();
    let mut from_wheels = BTreeSet::new();
    for (_, file) in wheels.values().flatten() {
        if let Some((text, from)) = client
            .metadata_or_ranges(file)
            .with_context(|| format!("reading the metadata of {}", file.filename))?
        {
            if from == MetadataFrom::WheelRanges {
                from_wheels.insert(file.filename.clone());
            }
            metadata.insert(file.filename.clone(), text);
        }
    }
    Ok(derive::derive_release(
        project,
        version,
        &page_url,
        &wheels,
        &metadata,
        &from_wheels,
    )?)
}
