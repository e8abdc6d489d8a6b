//! `imagegen ci --format github`: prints the build fan-out that `generate::github` makes, on one
//! line (what `$GITHUB_OUTPUT` takes), once it passed the `strategy.matrix` check; with `--tests`,
//! the test fan-out instead (one self-hosted GPU job per GPU model of the test policy).
//! `--format gitlab` prints the same build fan-out as a GitLab CI child pipeline
//! (`generate::gitlab`).

use anyhow::Result;

use crate::cli::{CiArgs, CiFormat};
use crate::commands::outcome::Outcome;
use crate::commands::output::emit;
use crate::commands::stages::{no_images, render_project};
use crate::generate::github::{github_matrix, output_line, test_matrix, test_output_line, FanOut};
use crate::generate::gitlab::{gitlab_pipeline, pipeline_yaml, ShardJob};
use crate::project::Project;

/// `imagegen ci --format github`: prints the matrix on one line (what `$GITHUB_OUTPUT` takes).
pub(crate) fn run(project: &Project, args: &CiArgs) -> Result<Outcome> {
    let fan_out = args.shards.map_or(FanOut::PerImage, FanOut::Shards);
    // Rendered in memory, not only resolved: what `render` and `build` would refuse (a step
    // fragment, a template) is refused here too, at its file and line.
    let (resolution, _) = render_project(project)?;
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
        (CiFormat::Gitlab, false) => {
            let shards: Vec<ShardJob> = github_matrix(&resolution.images, fan_out)
                .include
                .into_iter()
                .map(|job| ShardJob {
                    shard: job.shard,
                    platform: job.platform,
                    runner_arch: job.runner_arch,
                    artifact: job.artifact,
                })
                .collect();
            let yaml = pipeline_yaml(&gitlab_pipeline(&shards))?;
            emit(yaml)?;
            return Ok(Outcome::Success);
        }
        (CiFormat::Gitlab, true) => anyhow::bail!(
            "--tests has a GitHub Actions fan-out only (self-hosted GPU runners by label); with GitLab, run `imagegen test --no-move` in a job on a GPU runner\nhint: `imagegen ci --format github --tests` shows the jobs it would make"
        ),
    };
    emit(format!("{line}\n"))?;
    Ok(Outcome::Success)
}
