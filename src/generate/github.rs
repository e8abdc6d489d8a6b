//! `imagegen ci --github`: the build fan-out as the JSON a GitHub Actions `strategy.matrix`
//! consumes (`{"include": [...]}`). Pure: image specs in, a JSON value out.
//!
//! Every job runs `imagegen build --shard I/N`, which selects whole families (a runtime image and
//! the devel images built on it) with `crate::pipeline::plan::select`, so devel always builds after its
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

use serde::Serialize;

use crate::pipeline::plan::{select, Shard};
use crate::resolve::image::ImageSpec;

/// The most jobs one GitHub Actions matrix may generate.
pub const GITHUB_MATRIX_LIMIT: usize = 256;

/// How the images are spread over jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanOut {
    /// At most this many jobs, families dealt round-robin.
    Shards(usize),
    /// One job per family (a runtime image and its devel images).
    PerImage,
}

/// One job of the GitHub matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Job {
    /// Shown as the job name: the shard and its first image.
    pub name: String,
    /// The `--shard` argument of `imagegen build`.
    pub shard: String,
    /// The `--platform` argument of `imagegen build` (`linux/arm64`) when the matrix builds per
    /// platform, so each job builds one architecture on a runner of it; empty otherwise.
    pub platform: String,
    /// The runner architecture label the job needs (`x64` or `arm64`, as GitHub labels runners).
    pub runner_arch: String,
    /// An artifact name for this shard's manifest (no `/`, which artifact names refuse).
    pub artifact: String,
    /// The images the job builds, runtime first.
    pub images: Vec<String>,
}

/// The `strategy.matrix` value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GithubMatrix {
    pub include: Vec<Job>,
}

/// Number of families (runtime image plus its devel images) among `images`.
pub fn family_count(images: &[ImageSpec]) -> usize {
    images.iter().filter(|image| image.parent.is_none()).count()
}

/// The architecture of a platform (`linux/arm64` → `arm64`).
fn architecture(platform: &str) -> &str {
    platform.rsplit('/').next().unwrap_or(platform)
}

/// GitHub's runner architecture label for a platform architecture.
pub fn runner_arch(architecture: &str) -> String {
    match architecture {
        "amd64" => "x64".into(),
        other => other.into(),
    }
}

/// The GitHub matrix for `images` spread as `fan_out` says, within [`GITHUB_MATRIX_LIMIT`] jobs.
/// With per-platform images (several platforms in the matrix), each platform is sharded on its
/// own, as `imagegen build --platform P --shard I/N` selects, so a job never mixes architectures.
pub fn github_matrix(images: &[ImageSpec], fan_out: FanOut) -> GithubMatrix {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::knowledge::Knowledge;
    use crate::model::matrix::Matrix;
    use crate::resolve::{resolve, ResolveOptions};
    use std::collections::BTreeSet;

    fn images() -> Vec<ImageSpec> {
        let matrix = Matrix::parse(
            "registry: r.example\nrepository: t/p\ntorch: [\"2.7\", \"2.8\"]\ncuda: [\"12.6\", \"12.8\"]\nos: [ubuntu22.04, ubuntu24.04]\n",
            "m.yaml",
        )
        .unwrap();
        resolve(
            &matrix,
            &Knowledge::test_fixture(),
            &ResolveOptions::default(),
        )
        .images
    }

    fn assert_partition(images: &[ImageSpec], matrix: &GithubMatrix) {
        let mut seen = BTreeSet::new();
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
                }
            }
        }
        assert_eq!(seen.len(), images.len(), "every image in exactly one job");
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
        assert_partition(&images, &matrix);
    }

    #[test]
    fn shards_cover_every_image_once_and_skip_empty_shards() {
        let images = images();
        for count in [1, 2, 3, 100] {
            let matrix = github_matrix(&images, FanOut::Shards(count));
            assert_partition(&images, &matrix);
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
        let matrix = Matrix::parse(
            "registry: r.example\nrepository: t/p\ntorch: [\"2.12\", \"2.13\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nplatforms: [linux/amd64, linux/arm64]\n",
            "m.yaml",
        )
        .unwrap();
        let images = resolve(
            &matrix,
            &Knowledge::test_fixture(),
            &ResolveOptions::default(),
        )
        .images;
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
    fn json_shape_is_what_strategy_matrix_reads() {
        let value = serde_json::to_value(github_matrix(&images(), FanOut::Shards(2))).unwrap();
        let include = value["include"].as_array().unwrap();
        assert_eq!(include.len(), 2);
        assert_eq!(include[0]["shard"], "1/2");
        assert_eq!(include[1]["artifact"], "manifest-shard-2-of-2");
    }
}
