//! `imagegen ci --github`: prints the build fan-out that `generate::github` makes, on one line
//! (what `$GITHUB_OUTPUT` takes), once it passed the `strategy.matrix` check.

use anyhow::{bail, Result};

use crate::cli::CiArgs;
use crate::commands::outcome::Outcome;
use crate::commands::stages::resolve_project;
use crate::generate::github::{github_matrix, output_line, FanOut};
use crate::project::Project;
use crate::resolve::image::ResolveOptions;

/// `imagegen ci --github`: prints the matrix on one line (what `$GITHUB_OUTPUT` takes).
pub fn run(project: &Project, args: &CiArgs) -> Result<Outcome> {
    let fan_out = args.shards.map_or(FanOut::PerImage, FanOut::Shards);
    let images = resolve_project(project, ResolveOptions::default())?.images;
    if images.is_empty() {
        bail!("the matrix makes no images, so there is nothing to fan out\nhint: `imagegen resolve` says why each cell was rejected");
    }
    // Checked against what `strategy.matrix` accepts before anything is printed.
    let line = output_line(&github_matrix(&images, fan_out))?;
    println!("{line}");
    Ok(Outcome::Success)
}
