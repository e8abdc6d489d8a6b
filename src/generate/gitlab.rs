//! `imagegen ci --format gitlab`: the build fan-out as a GitLab CI child pipeline (YAML), made
//! from the same jobs as the GitHub matrix (`generate::github::github_matrix`): one `build` job
//! per shard (`imagegen build --shard I/N`, with `--platform` and a runner tag of the
//! architecture when the matrix builds per platform), each keeping its manifest as an artifact
//! under `shards/<artifact>/`, and one `record` job that merges them (`imagegen manifest merge`).
//! The parent pipeline writes it to a file and triggers it (`trigger: include: - artifact: ...`,
//! see docs/ci.md). Pure: jobs in, YAML text out.
//!
//! The keys used are those of GitLab's CI schema (`stages`, `variables`, and per job `stage`,
//! `tags`, `variables`, `script`, `needs`, `artifacts`); the CLI test validates the output
//! against the schema vendored in `tests/fixtures/gitlab-ci/` (its SOURCE.md names where from).

use std::collections::BTreeMap;

use serde::Serialize;

/// A `needs` entry: a job of an earlier stage whose artifacts this job downloads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Need {
    pub(crate) job: String,
    pub(crate) artifacts: bool,
}

/// The `artifacts` of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Artifacts {
    pub(crate) name: String,
    pub(crate) when: &'static str,
    pub(crate) paths: Vec<String>,
}

/// One job of the child pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct GitlabJob {
    pub(crate) stage: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tags: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) variables: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) needs: Vec<Need>,
    pub(crate) script: Vec<String>,
    pub(crate) artifacts: Artifacts,
}

/// The child pipeline: stages, global variables and jobs by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct GitlabPipeline {
    pub(crate) stages: Vec<&'static str>,
    pub(crate) variables: BTreeMap<String, String>,
    #[serde(flatten)]
    pub(crate) jobs: BTreeMap<String, GitlabJob>,
}

/// One shard of the build fan-out, as the GitHub matrix's jobs carry it
/// (`generate::github::Job`; the command hands them over, so this module needs no other).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardJob {
    /// The `--shard` argument of `imagegen build`.
    pub(crate) shard: String,
    /// The `--platform` argument, or empty.
    pub(crate) platform: String,
    /// The runner architecture (`x64`, `arm64`).
    pub(crate) runner_arch: String,
    /// The shard's artifact name (`manifest-shard-1-of-4`).
    pub(crate) artifact: String,
}

/// The child pipeline that runs `shards`: a build job per shard, then the record job.
pub(crate) fn gitlab_pipeline(shards: &[ShardJob]) -> GitlabPipeline {
    let mut jobs = BTreeMap::new();
    let mut needs = Vec::new();
    for job in shards {
        let name = format!("build {}", job.artifact.trim_start_matches("manifest-"));
        let mut variables = BTreeMap::from([("SHARD".to_string(), job.shard.clone())]);
        if !job.platform.is_empty() {
            variables.insert("PLATFORM".into(), job.platform.clone());
        }
        let folder = format!("shards/{}", job.artifact);
        jobs.insert(
            name.clone(),
            GitlabJob {
                stage: "build",
                // Runners of the architecture: GitLab selects runners by tag; the tag names the
                // architecture as the GitHub fan-out's runner label does (`x64`, `arm64`).
                tags: if job.platform.is_empty() {
                    Vec::new()
                } else {
                    vec![job.runner_arch.clone()]
                },
                variables,
                needs: Vec::new(),
                script: vec![
                    format!(
                        "\"$IMAGEGEN\" build {}--shard \"$SHARD\" $IMAGEGEN_BUILD_ARGS",
                        if job.platform.is_empty() {
                            ""
                        } else {
                            "--platform \"$PLATFORM\" "
                        }
                    ),
                    format!("mkdir -p {folder} && cp imagegen-manifest.json {folder}/"),
                ],
                artifacts: Artifacts {
                    name: job.artifact.clone(),
                    when: "always",
                    paths: vec![folder, ".imagegen/logs/".into()],
                },
            },
        );
        needs.push(Need {
            job: name,
            artifacts: true,
        });
    }
    jobs.insert(
        "record".into(),
        GitlabJob {
            stage: "record",
            tags: Vec::new(),
            variables: BTreeMap::new(),
            needs,
            script: vec![
                "\"$IMAGEGEN\" manifest merge imagegen-manifest.json shards/*/imagegen-manifest.json --out imagegen-manifest.json".into(),
            ],
            artifacts: Artifacts {
                name: "imagegen-manifest".into(),
                when: "always",
                paths: vec!["imagegen-manifest.json".into()],
            },
        },
    );
    GitlabPipeline {
        stages: vec!["build", "record"],
        variables: BTreeMap::from([
            // The imagegen binary the jobs run, and what `build` adds (`--push` by default).
            (
                "IMAGEGEN".to_string(),
                "./target/release/imagegen".to_string(),
            ),
            ("IMAGEGEN_BUILD_ARGS".to_string(), "--push".to_string()),
        ]),
        jobs,
    }
}

/// The child pipeline as YAML, with a header saying where it comes from.
pub(crate) fn pipeline_yaml(pipeline: &GitlabPipeline) -> Result<String, serde_yaml::Error> {
    Ok(format!(
        "# GENERATED by `imagegen ci --format gitlab`: a GitLab CI child pipeline, {} build job(s) and the record job.\n{}",
        pipeline.jobs.len() - 1,
        serde_yaml::to_string(pipeline)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::github::{github_matrix, FanOut};

    #[test]
    fn one_build_job_per_shard_and_a_record_job_that_needs_them_all() {
        let images = crate::resolve::test_images("registry: r.example\nrepository: t/p\ntorch: [\"2.7\", \"2.8\"]\ncuda: [\"12.6\", \"12.8\"]\nos: [ubuntu24.04]\n");
        let shards: Vec<ShardJob> = github_matrix(&images, FanOut::Shards(2))
            .include
            .into_iter()
            .map(|job| ShardJob {
                shard: job.shard,
                platform: job.platform,
                runner_arch: job.runner_arch,
                artifact: job.artifact,
            })
            .collect();
        let pipeline = gitlab_pipeline(&shards);
        let builds: Vec<&String> = pipeline
            .jobs
            .keys()
            .filter(|name| name.starts_with("build "))
            .collect();
        assert_eq!(builds.len(), 2);
        let record = &pipeline.jobs["record"];
        assert_eq!(record.needs.len(), 2);
        assert!(record.needs.iter().all(|need| need.artifacts));
        let first = &pipeline.jobs[builds[0]];
        assert_eq!(first.variables["SHARD"], "1/2");
        assert!(first.script[0].contains("--shard \"$SHARD\""));
        assert!(first.tags.is_empty(), "one platform: any runner");
    }
}
