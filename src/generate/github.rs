//! `imagegen ci --github`: the build fan-out as the JSON a GitHub Actions `strategy.matrix`
//! consumes (`{"include": [...]}`). Pure: image specs in, a JSON value out.
//!
//! Every job runs `imagegen build --shard I/N`, which selects whole families (a runtime image and
//! the devel images built on it) with `crate::resolve::select::select`, so devel always builds after its
//! runtime in the same job, and every runner computes the same split. `--per-image` is the same
//! thing with one shard per family (the families sorted by name, dealt round-robin over as many
//! shards as there are families, give exactly one family per shard). Shards that would select
//! nothing are left out, so no runner starts for nothing. GitHub runs at most
//! [`GITHUB_MATRIX_LIMIT`] jobs per matrix: past that many families, `--per-image` deals them over
//! that many shards.
//!
//! With several platforms in the matrix, images are built per platform (`...-amd64`, `...-arm64`)
//! and a GPU self-test only runs on a GPU of the image's architecture, so the fan-out is per
//! platform: `imagegen build --platform linux/arm64 --shard I/N` shards that platform's families
//! (the same selection `imagegen build` makes), on a runner labelled `arm64` (`runner_arch`,
//! GitHub's `x64`/`arm64` label).
//!
//! What `strategy.matrix` accepts is checked on the printed line before it is printed
//! ([`check_strategy_matrix`]), so a matrix GitHub would refuse fails here, at `imagegen ci`,
//! instead of in the workflow's build job:
//! - at most [`GITHUB_MATRIX_LIMIT`] jobs: "A job matrix can generate a maximum of 256 jobs per
//!   workflow run" (github/docs `data/reusables/actions/usage-matrix-limits.md`,
//!   <https://docs.github.com/en/actions/reference/workflow-syntax-for-github-actions#jobsjob_idstrategymatrix>);
//! - the shape of GitHub's workflow schema (actions/languageservices
//!   `workflow-parser/src/workflow-v1.0.json` at 4043eda1: `matrix` is a mapping whose keywords
//!   are `include` and `exclude`, `include` a sequence of `matrix-filter-item` mappings with
//!   non-empty string keys and values of any type). imagegen writes `include` only, so every
//!   entry is one job; the entries' keys must not be the keywords, and the list must not be
//!   empty (a matrix of no job fails the workflow instead of skipping the build);
//! - the line is the setup job's `matrix` output: "Outputs can be a maximum of 1 MB per job
//!   ... Size is approximated based on UTF-16 encoding" (github/docs
//!   `data/reusables/actions/output-limitations.md`), so its UTF-16 size stays under
//!   [`GITHUB_JOB_OUTPUT_LIMIT`], and it is one line (`$GITHUB_OUTPUT` takes `name=value` lines).

use serde::Serialize;

use crate::resolve::image::ImageSpec;
use crate::resolve::select::{select, Shard};

/// The most jobs one GitHub Actions matrix may generate.
pub(crate) const GITHUB_MATRIX_LIMIT: usize = 256;
/// The most one job's outputs may hold, in bytes of UTF-16 (1 MB, counted as 10^6 to stay on
/// the safe side of however GitHub rounds it).
pub(crate) const GITHUB_JOB_OUTPUT_LIMIT: usize = 1_000_000;
/// The keywords of a `strategy.matrix` mapping.
pub(crate) const MATRIX_KEYWORDS: [&str; 2] = ["include", "exclude"];

/// Why a matrix would not be accepted as `strategy.matrix`.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MatrixError {
    #[error("the matrix is not one line of JSON: {message}")]
    NotJson { message: String },
    #[error("the matrix must be a JSON object with an `include` list")]
    NotAnObject,
    #[error("the matrix has a key {key:?} beside `include`: imagegen's matrix lists every job in `include`, and a vector would multiply them")]
    UnexpectedKey { key: String },
    #[error("the matrix has no `include` list")]
    NoInclude,
    #[error("the matrix's `include` is empty: a matrix of no job fails the workflow")]
    EmptyInclude,
    #[error("include[{index}] is not an object (GitHub takes a list of key: value objects)")]
    EntryNotAnObject { index: usize },
    #[error("include[{index}] has an empty key")]
    EmptyKey { index: usize },
    #[error("include[{index}] has the key {key:?}, a keyword of strategy.matrix")]
    KeywordKey { index: usize, key: String },
    #[error("the matrix makes {jobs} jobs; GitHub runs at most {GITHUB_MATRIX_LIMIT} per matrix\nhint: use --shards N with N <= {GITHUB_MATRIX_LIMIT}")]
    TooManyJobs { jobs: usize },
    #[error("the matrix is {bytes} bytes as GitHub counts them (UTF-16), over the {GITHUB_JOB_OUTPUT_LIMIT} a job's outputs may hold")]
    TooLarge { bytes: usize },
}

/// How the images are spread over jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FanOut {
    /// At most this many jobs, families dealt round-robin.
    Shards(usize),
    /// One job per family (a runtime image and its devel images).
    PerImage,
}

/// One job of the GitHub matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Job {
    /// Shown as the job name: the shard and its first image.
    pub(crate) name: String,
    /// The `--shard` argument of `imagegen build`.
    pub(crate) shard: String,
    /// The `--platform` argument of `imagegen build` (`linux/arm64`) when the matrix builds per
    /// platform, so each job builds one architecture on a runner of it; empty otherwise.
    pub(crate) platform: String,
    /// The runner architecture label the job needs (`x64` or `arm64`, as GitHub labels runners).
    pub(crate) runner_arch: String,
    /// An artifact name for this shard's manifest (no `/`, which artifact names refuse).
    pub(crate) artifact: String,
    /// The images the job builds, runtime first.
    pub(crate) images: Vec<String>,
}

/// The `strategy.matrix` value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct GithubMatrix {
    pub(crate) include: Vec<Job>,
}

/// Number of families (runtime image plus its devel images) among `images`.
pub(crate) fn family_count(images: &[ImageSpec]) -> usize {
    images.iter().filter(|image| image.parent.is_none()).count()
}

/// The architecture of a platform (`linux/arm64` → `arm64`).
fn architecture(platform: &str) -> &str {
    platform.rsplit('/').next().unwrap_or(platform)
}

/// GitHub's runner architecture label for a platform architecture.
pub(crate) fn runner_arch(architecture: &str) -> String {
    match architecture {
        "amd64" => "x64".into(),
        other => other.into(),
    }
}

/// The GitHub matrix for `images` spread as `fan_out` says, within [`GITHUB_MATRIX_LIMIT`] jobs.
/// With per-platform images (several platforms in the matrix), each platform is sharded on its
/// own, as `imagegen build --platform P --shard I/N` selects, so a job never mixes architectures.
pub(crate) fn github_matrix(images: &[ImageSpec], fan_out: FanOut) -> GithubMatrix {
    let per_platform = images.iter().any(|image| image.index.is_some());
    let mut platforms: Vec<&str> = images.iter().map(|image| image.platform.as_str()).collect();
    platforms.sort();
    platforms.dedup();
    let groups: Vec<(String, Vec<ImageSpec>)> = if per_platform {
        platforms
            .iter()
            .map(|platform| {
                let of_platform = images
                    .iter()
                    .filter(|image| image.platform == *platform)
                    .cloned()
                    .collect();
                (platform.to_string(), of_platform)
            })
            .collect()
    } else {
        vec![(String::new(), images.to_vec())]
    };
    let limit_per_group = (GITHUB_MATRIX_LIMIT / groups.len().max(1)).max(1);
    let mut include = Vec::new();
    for (platform, group) in &groups {
        let architecture_of_group = if platform.is_empty() {
            platforms
                .first()
                .map(|p| architecture(p))
                .unwrap_or("amd64")
        } else {
            architecture(platform)
        };
        let runner = runner_arch(architecture_of_group);
        let count = match fan_out {
            FanOut::PerImage => family_count(group),
            FanOut::Shards(count) => count,
        }
        .clamp(1, limit_per_group);
        for index in 1..=count {
            let selected = select(group, None, Some(Shard { index, count }));
            if selected.is_empty() {
                continue;
            }
            let names: Vec<String> = selected.iter().map(|image| image.name.clone()).collect();
            let prefix = match fan_out {
                FanOut::PerImage => String::new(),
                FanOut::Shards(_) => format!("{index}/{count} "),
            };
            let name = if family_count(&selected) == 1 && matches!(fan_out, FanOut::PerImage) {
                names[0].clone()
            } else if names.len() == 1 {
                format!("{prefix}{}", names[0])
            } else {
                format!("{prefix}{} (+{} more)", names[0], names.len() - 1)
            };
            let artifact = if platform.is_empty() {
                format!("manifest-shard-{index}-of-{count}")
            } else {
                format!("manifest-shard-{index}-of-{count}-{runner}")
            };
            include.push(Job {
                name,
                shard: format!("{index}/{count}"),
                platform: platform.clone(),
                runner_arch: runner.clone(),
                artifact,
                images: names,
            });
        }
    }
    GithubMatrix { include }
}

/// One test job of `imagegen ci --github --tests`: the self-test of the pushed digests on a
/// self-hosted GPU runner of one GPU model of the test policy (`tests.require`), or of any GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TestJob {
    /// Shown as the job name.
    pub(crate) name: String,
    /// The policy's GPU model (`H100`), or `any` under the default policy.
    pub(crate) gpu_model: String,
    /// The runner label that names a runner with this GPU model: `gpu-h100`; `gpu` for any.
    pub(crate) runner_label: String,
    /// The runner architecture label (`x64`, `arm64`) of the images it tests.
    pub(crate) runner_arch: String,
    /// The `--platform` of the images it tests when the matrix builds per platform; else empty.
    pub(crate) platform: String,
    /// An artifact name for the manifest with this job's results.
    pub(crate) artifact: String,
}

/// The `strategy.matrix` of the test jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TestMatrix {
    pub(crate) include: Vec<TestJob>,
}

/// The runner label for a GPU model: `gpu-` and the model in lowercase, other characters `-`.
pub(crate) fn gpu_runner_label(model: &str) -> String {
    let words: Vec<String> = model
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    format!("gpu-{}", words.join("-"))
}

/// One test job per GPU model of the policy (one `any` job when it names none) and per
/// architecture of the images: each pulls every pushed digest of its architecture and tests it.
pub(crate) fn test_matrix(images: &[ImageSpec], require: &[String]) -> TestMatrix {
    let per_platform = images.iter().any(|image| image.index.is_some());
    let mut platforms: Vec<&str> = images.iter().map(|image| image.platform.as_str()).collect();
    platforms.sort();
    platforms.dedup();
    let models: Vec<(String, String)> = if require.is_empty() {
        vec![("any".into(), "gpu".into())]
    } else {
        require
            .iter()
            .map(|model| (model.clone(), gpu_runner_label(model)))
            .collect()
    };
    let mut include = Vec::new();
    for platform in &platforms {
        let runner = runner_arch(architecture(platform));
        for (model, label) in &models {
            include.push(TestJob {
                name: if per_platform {
                    format!("test on {model} ({runner})")
                } else {
                    format!("test on {model}")
                },
                gpu_model: model.clone(),
                runner_label: label.clone(),
                runner_arch: runner.clone(),
                platform: if per_platform {
                    platform.to_string()
                } else {
                    String::new()
                },
                artifact: format!("test-shard-{label}-{runner}"),
            });
        }
    }
    TestMatrix { include }
}

/// The test matrix as one checked line, as [`output_line`] prints the build matrix.
pub(crate) fn test_output_line(matrix: &TestMatrix) -> Result<String, MatrixError> {
    let line = serde_json::to_string(matrix).map_err(|error| MatrixError::NotJson {
        message: error.to_string(),
    })?;
    check_strategy_matrix(&line)?;
    Ok(line)
}

/// The matrix as the one line `imagegen ci --github` prints, checked by
/// [`check_strategy_matrix`].
pub(crate) fn output_line(matrix: &GithubMatrix) -> Result<String, MatrixError> {
    let line = serde_json::to_string(matrix).map_err(|error| MatrixError::NotJson {
        message: error.to_string(),
    })?;
    check_strategy_matrix(&line)?;
    Ok(line)
}

/// Whether `line` is a `strategy.matrix` GitHub accepts, in the include-only form imagegen
/// writes (see the module documentation for the rules and their sources).
pub fn check_strategy_matrix(line: &str) -> Result<(), MatrixError> {
    if line.contains(['\n', '\r']) {
        return Err(MatrixError::NotJson {
            message: "it spans several lines".into(),
        });
    }
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|error| MatrixError::NotJson {
            message: error.to_string(),
        })?;
    let object = value.as_object().ok_or(MatrixError::NotAnObject)?;
    if let Some(key) = object.keys().find(|key| key.as_str() != "include") {
        return Err(MatrixError::UnexpectedKey { key: key.clone() });
    }
    let include = object
        .get("include")
        .ok_or(MatrixError::NoInclude)?
        .as_array()
        .ok_or(MatrixError::NoInclude)?;
    if include.is_empty() {
        return Err(MatrixError::EmptyInclude);
    }
    for (index, entry) in include.iter().enumerate() {
        let entry = entry
            .as_object()
            .ok_or(MatrixError::EntryNotAnObject { index })?;
        for key in entry.keys() {
            if key.is_empty() {
                return Err(MatrixError::EmptyKey { index });
            }
            if MATRIX_KEYWORDS.contains(&key.as_str()) {
                return Err(MatrixError::KeywordKey {
                    index,
                    key: key.clone(),
                });
            }
        }
    }
    if include.len() > GITHUB_MATRIX_LIMIT {
        return Err(MatrixError::TooManyJobs {
            jobs: include.len(),
        });
    }
    // The output as GitHub sizes it: UTF-16 code units of two bytes, plus `matrix=`.
    let bytes = ("matrix=".len() + line.encode_utf16().count()) * 2;
    if bytes > GITHUB_JOB_OUTPUT_LIMIT {
        return Err(MatrixError::TooLarge { bytes });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn images() -> Vec<ImageSpec> {
        crate::resolve::test_images("registry: r.example\nrepository: t/p\ntorch: [\"2.7\", \"2.8\"]\ncuda: [\"12.6\", \"12.8\"]\nos: [ubuntu22.04, ubuntu24.04]\n")
    }

    /// Checks that the jobs share out `images`, each devel after its runtime in one job; returns
    /// how many devel images it checked so.
    fn assert_partition(images: &[ImageSpec], matrix: &GithubMatrix) -> usize {
        let mut seen = BTreeSet::new();
        let mut devels_checked = 0;
        for job in &matrix.include {
            for (position, name) in job.images.iter().enumerate() {
                assert!(seen.insert(name.clone()), "{name} in two jobs");
                let spec = images.iter().find(|i| &i.name == name).unwrap();
                if let Some(parent) = &spec.parent {
                    let parent_position = job.images.iter().position(|n| n == parent);
                    assert!(
                        parent_position.is_some_and(|p| p < position),
                        "{name} must come after its runtime {parent} in the same job"
                    );
                    devels_checked += 1;
                }
            }
        }
        assert_eq!(seen.len(), images.len(), "every image in exactly one job");
        devels_checked
    }

    #[test]
    fn per_image_gives_one_job_per_family_with_devel_after_runtime() {
        let images = images();
        let matrix = github_matrix(&images, FanOut::PerImage);
        assert_eq!(matrix.include.len(), family_count(&images));
        assert!(matrix.include.len() > 1);
        for job in &matrix.include {
            let runtimes = job
                .images
                .iter()
                .filter(|name| name.contains("runtime"))
                .count();
            assert_eq!(runtimes, 1, "{job:?}");
        }
        assert_eq!(assert_partition(&images, &matrix), images.len() / 2);
    }

    #[test]
    fn shards_cover_every_image_once_and_skip_empty_shards() {
        let images = images();
        for count in [1, 2, 3, 100] {
            let matrix = github_matrix(&images, FanOut::Shards(count));
            assert_eq!(assert_partition(&images, &matrix), images.len() / 2);
            assert_eq!(
                matrix.include.len(),
                count.min(family_count(&images)),
                "{count} shards"
            );
            for job in &matrix.include {
                assert!(job.shard.ends_with(&format!("/{count}")));
                assert!(!job.artifact.contains('/'));
                let shard: Shard = job.shard.parse().unwrap();
                assert_eq!(job.platform, "");
                assert_eq!(job.runner_arch, "x64");
                assert_eq!(
                    select(&images, None, Some(shard))
                        .iter()
                        .map(|i| i.name.clone())
                        .collect::<Vec<_>>(),
                    job.images,
                    "what imagegen build --shard {} selects",
                    job.shard
                );
            }
        }
    }

    #[test]
    fn per_image_past_the_github_limit_deals_families_over_the_limit() {
        let template = images().remove(0);
        let many: Vec<ImageSpec> = (0..GITHUB_MATRIX_LIMIT + 44)
            .map(|index| ImageSpec {
                name: format!("family-{index:03}"),
                parent: None,
                ..template.clone()
            })
            .collect();
        let matrix = github_matrix(&many, FanOut::PerImage);
        assert_eq!(matrix.include.len(), GITHUB_MATRIX_LIMIT);
        assert_partition(&many, &matrix);
        assert_eq!(
            matrix.include[0].images.len(),
            2,
            "300 families over 256 jobs"
        );
        assert!(matrix.include[0].name.contains("(+1 more)"));
    }

    #[test]
    fn per_platform_images_fan_out_by_architecture_too() {
        let images = crate::resolve::test_images("registry: r.example\nrepository: t/p\ntorch: [\"2.12\", \"2.13\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nplatforms: [linux/amd64, linux/arm64]\n");
        assert!(images.iter().any(|i| i.platform == "linux/arm64"));
        for fan_out in [FanOut::PerImage, FanOut::Shards(1), FanOut::Shards(2)] {
            let github = github_matrix(&images, fan_out);
            assert_partition(&images, &github);
            for job in &github.include {
                let arch = architecture(&job.platform);
                assert_eq!(job.runner_arch, runner_arch(arch));
                assert!(job.artifact.ends_with(&job.runner_arch));
                // What `imagegen build --platform P --shard I/N` selects.
                let of_platform: Vec<ImageSpec> = images
                    .iter()
                    .filter(|i| i.platform == job.platform)
                    .cloned()
                    .collect();
                let shard: Shard = job.shard.parse().unwrap();
                let selected: Vec<String> = select(&of_platform, None, Some(shard))
                    .iter()
                    .map(|i| i.name.clone())
                    .collect();
                assert_eq!(selected, job.images, "{job:?}");
            }
            let artifacts: BTreeSet<&String> = github.include.iter().map(|j| &j.artifact).collect();
            assert_eq!(
                artifacts.len(),
                github.include.len(),
                "artifact names are unique"
            );
        }
        assert_eq!(
            github_matrix(&images, FanOut::PerImage).include.len(),
            family_count(&images)
        );
        assert_eq!(
            github_matrix(&images, FanOut::Shards(1)).include.len(),
            2,
            "one per architecture"
        );
    }

    #[test]
    fn test_jobs_are_one_per_gpu_model_of_the_policy_and_architecture() {
        let images = images();
        let any = test_matrix(&images, &[]);
        assert_eq!(any.include.len(), 1);
        assert_eq!(any.include[0].runner_label, "gpu");
        assert_eq!(any.include[0].gpu_model, "any");
        let models = test_matrix(&images, &["H100".into(), "H100 NVL".into()]);
        let labels: Vec<&str> = models
            .include
            .iter()
            .map(|job| job.runner_label.as_str())
            .collect();
        assert_eq!(labels, ["gpu-h100", "gpu-h100-nvl"]);
        assert!(test_output_line(&models).is_ok());
    }

    #[test]
    fn json_shape_is_what_strategy_matrix_reads() {
        let value = serde_json::to_value(github_matrix(&images(), FanOut::Shards(2))).unwrap();
        let include = value["include"].as_array().unwrap();
        assert_eq!(include.len(), 2);
        assert_eq!(include[0]["shard"], "1/2");
        assert_eq!(include[1]["artifact"], "manifest-shard-2-of-2");
    }

    /// A matrix line of `jobs` include entries shaped like imagegen's.
    fn include_line(jobs: usize) -> String {
        let include: Vec<serde_json::Value> = (1..=jobs)
            .map(|index| {
                serde_json::json!({"name": format!("job {index}"), "shard": format!("{index}/{jobs}"),
                    "platform": "", "runner_arch": "x64", "artifact": format!("a-{index}"),
                    "images": [format!("image-{index}")]})
            })
            .collect();
        serde_json::json!({ "include": include }).to_string()
    }

    #[test]
    fn what_imagegen_writes_passes_the_strategy_matrix_check() {
        for fan_out in [FanOut::PerImage, FanOut::Shards(3)] {
            let matrix = github_matrix(&images(), fan_out);
            let line = output_line(&matrix).unwrap();
            assert_eq!(line, serde_json::to_string(&matrix).unwrap());
        }
        assert_eq!(
            check_strategy_matrix(&include_line(GITHUB_MATRIX_LIMIT)),
            Ok(())
        );
        // Values of any type are fine (GitHub's schema: `loose-value-type: any`).
        assert_eq!(
            check_strategy_matrix(
                r#"{"include":[{"n":1,"b":true,"o":{"k":"v"},"l":[1],"z":null}]}"#
            ),
            Ok(())
        );
    }

    #[test]
    fn more_jobs_than_github_runs_are_refused() {
        assert_eq!(
            check_strategy_matrix(&include_line(GITHUB_MATRIX_LIMIT + 1)),
            Err(MatrixError::TooManyJobs { jobs: 257 })
        );
    }

    #[test]
    fn shapes_strategy_matrix_does_not_take_are_refused() {
        for (line, error) in [
            (r#"{"include":[]}"#, MatrixError::EmptyInclude),
            ("{}", MatrixError::NoInclude),
            (r#"{"include":{"name":"a"}}"#, MatrixError::NoInclude),
            ("[]", MatrixError::NotAnObject),
            (
                r#"{"include":[{"a":"1"}],"os":["x64"]}"#,
                MatrixError::UnexpectedKey { key: "os".into() },
            ),
            (
                r#"{"include":[{"a":"1"},"b"]}"#,
                MatrixError::EntryNotAnObject { index: 1 },
            ),
            (
                r#"{"include":[{"":"1"}]}"#,
                MatrixError::EmptyKey { index: 0 },
            ),
            (
                r#"{"include":[{"exclude":"1"}]}"#,
                MatrixError::KeywordKey {
                    index: 0,
                    key: "exclude".into(),
                },
            ),
        ] {
            assert_eq!(check_strategy_matrix(line), Err(error), "{line}");
        }
        assert!(matches!(
            check_strategy_matrix("{\"include\":\n[{\"a\":\"1\"}]}"),
            Err(MatrixError::NotJson { .. })
        ));
        assert!(matches!(
            check_strategy_matrix("include: [a]"),
            Err(MatrixError::NotJson { .. })
        ));
    }

    #[test]
    fn a_matrix_over_the_job_output_limit_is_refused() {
        // 200 jobs of 300 images each: few enough jobs, and under 1 MB as UTF-8, but GitHub
        // sizes outputs as UTF-16, where it is about 1.7 MB.
        let images: Vec<String> = (0..300).map(|i| format!("image-{i:05}")).collect();
        let include: Vec<serde_json::Value> = (0..200)
            .map(|index| serde_json::json!({"shard": format!("{index}/200"), "images": images}))
            .collect();
        let line = serde_json::json!({ "include": include }).to_string();
        assert!(line.len() < GITHUB_JOB_OUTPUT_LIMIT);
        assert!(matches!(
            check_strategy_matrix(&line),
            Err(MatrixError::TooLarge { bytes }) if bytes > GITHUB_JOB_OUTPUT_LIMIT
        ));
        let just_under = format!(r#"{{"include":[{{"a":"{}"}}]}}"#, "x".repeat(499_900));
        assert_eq!(check_strategy_matrix(&just_under), Ok(()));
    }
}
