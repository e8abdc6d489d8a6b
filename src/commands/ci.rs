//! `imagegen ci --format github`: prints the build fan-out that `generate::github` makes, on one
//! line (what `$GITHUB_OUTPUT` takes), once it passed the `strategy.matrix` check; with `--tests`,
//! the test fan-out instead (one self-hosted GPU job per GPU model of the test policy).

use anyhow::Result;

use crate::cli::{CiArgs, CiFormat};
use crate::commands::outcome::Outcome;
use crate::commands::output::emit;
use crate::commands::stages::{no_images, resolve_project};
use crate::generate::github::{github_matrix, output_line, test_matrix, test_output_line, FanOut};
use crate::project::Project;
use crate::resolve::image::ResolveOptions;

/// `imagegen ci --format github`: prints the matrix on one line (what `$GITHUB_OUTPUT` takes).
pub fn run(project: &Project, args: &CiArgs) -> Result<Outcome> {
    let fan_out = args.shards.map_or(FanOut::PerImage, FanOut::Shards);
    let resolution = resolve_project(project, ResolveOptions::default())?;
    if resolution.images.is_empty() {
        return Err(no_images(
            project,
            &resolution,
            ", so there is nothing to fan out",
            "",
        ));
    }
    // Checked against what `strategy.matrix` accepts before anything is printed.
    let line = match (args.format, args.tests) {
        (CiFormat::Github, false) => output_line(&github_matrix(&resolution.images, fan_out))?,
        (CiFormat::Github, true) => test_output_line(&test_matrix(
            &resolution.images,
            &project.matrix()?.tests.require,
        ))?,
    };
    emit(format!("{line}\n"))?;
    Ok(Outcome::Success)
}
