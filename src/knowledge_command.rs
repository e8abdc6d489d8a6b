//! `imagegen knowledge derive torch X.Y.Z [--index URL] [--check]`: read a release's wheels
//! from a PyPI-style index, print the knowledge entry their metadata gives, and with `--check`
//! compare it with the knowledge in use (exit 1 on a difference).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::app::Outcome;
use crate::compat::derive::{self, DerivedRelease};
use crate::compat::Knowledge;
use crate::pypi_index::IndexClient;

pub const DEFAULT_INDEX: &str = "https://pypi.org/simple";

/// Runs the derivation and prints it; `knowledge_file` is the `--knowledge` override, if any.
pub fn derive_torch(
    version: &str,
    index: &str,
    check: bool,
    knowledge_file: Option<&Path>,
) -> Result<Outcome> {
    crate::version::TorchVersion::parse(version)
        .ok()
        .filter(|v| !v.is_series)
        .with_context(|| format!("`{version}` is not a torch release such as 2.13.0"))?;
    // Load the knowledge first: a broken override should fail before the network is used.
    let knowledge = match knowledge_file {
        Some(path) => Knowledge::with_override(path)?,
        None => Knowledge::embedded(),
    };
    let derived = fetch_and_derive(index, "torch", version)?;
    let read_on = crate::manifest::now_rfc3339()
        .chars()
        .take(10)
        .collect::<String>();
    print!("{}", derive::to_yaml(&derived, &read_on));
    if !check {
        return Ok(Outcome::Success);
    }
    let comparison = derive::compare(&derived, &knowledge);
    let against = knowledge_file
        .map(|p| format!("the embedded knowledge with {} over it", p.display()))
        .unwrap_or_else(|| "the embedded knowledge".into());
    let mut report = String::new();
    writeln!(
        report,
        "# --check against {against}: {} difference(s)",
        comparison.differences.len()
    )
    .ok();
    for note in &comparison.notes {
        writeln!(report, "# note: {note}").ok();
    }
    for difference in &comparison.differences {
        writeln!(report, "# difference: {difference}").ok();
    }
    print!("{report}");
    if comparison.differences.is_empty() {
        Ok(Outcome::Success)
    } else {
        eprintln!(
            "error: torch {version} as {} describes it differs from {against} in {} place(s)\nhint: correct knowledge.yaml from the wheels' metadata above, citing the index as the source",
            derived.page_url,
            comparison.differences.len()
        );
        Ok(Outcome::Failed)
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
    for (_, file) in wheels.values().flatten() {
        if let Some(text) = client
            .metadata(file)
            .with_context(|| format!("reading the metadata of {}", file.filename))?
        {
            metadata.insert(file.filename.clone(), text);
        }
    }
    Ok(derive::derive_release(
        project, version, &page_url, &wheels, &metadata,
    )?)
}
