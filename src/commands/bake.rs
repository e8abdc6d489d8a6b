//! `imagegen bake`: writes the `docker-bake.json` that `generate::bake` makes (or prints it with
//! `-`) and stages each image's build context: the files of `images/<name>/` (its lock, CA
//! bundle, ...) and the self-test binary of its CUDA major.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::BakeArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{count, emit, note};
use crate::commands::stages::{lock_problems, no_images, resolve_project};
use crate::commands::wheels;
use crate::docker::pypi_index::team_context_files;
use crate::generate::bake::{bake_file, staging_context};
use crate::model::matrix::WheelSource;
use crate::project::{
    image_files, read_bytes, stage_context, stage_linked, write_atomically, Project,
};
use crate::resolve::image::ResolveOptions;

/// `imagegen bake`: writes the bake file (`.imagegen/docker-bake.json` unless `--out`; `-`
/// prints it) and stages, under the working directory, each image's context as
/// `.imagegen/bake/<name>/`: the files of `images/<name>/` and
/// `<selftest_dir>/gpu-selftest-cuNN` as `gpu-selftest`.
pub(crate) fn run(project: &Project, args: &BakeArgs) -> Result<Outcome> {
    let (out, selftest_dir, stage) = (
        args.out.as_path(),
        args.selftest_dir.as_path(),
        !args.no_stage,
    );
    let resolution = resolve_project(project, ResolveOptions::default())?;
    if resolution.images.is_empty() {
        return Err(no_images(
            project,
            &resolution,
            " (a bake file would have no target; nothing was written)",
            "",
        ));
    }
    let images = &resolution.images;
    let text = bake_file(images)?.to_json();
    let to_stdout = out.as_os_str() == "-";
    // buildx reads a bake file's contexts against its working directory, not the file's folder
    // (docker/buildx#1028): the contexts are staged under the working directory, where
    // `docker buildx bake -f .imagegen/docker-bake.json` runs.
    let root = Path::new(".");
    if stage {
        // What BuildKit builds must be what was locked and reviewed, as for `imagegen build`.
        let problems = lock_problems(&resolution, &project.locks()?);
        if let Some(problem) = problems.first() {
            anyhow::bail!(
                "{}\nhint: run `imagegen lock` and `imagegen render`, and commit the result",
                problem.describe(&project.images_dir)
            );
        }
        let mut binaries: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
        for image in images {
            if !binaries.contains_key(image.selftest.as_str()) {
                let source = selftest_dir.join(&image.selftest);
                let bytes = read_bytes(&source).with_context(|| {
                    format!(
                        "cannot read the self-test binary {}\nhint: build it with `bash selftest/build.sh`, pass --selftest-dir, or use --no-stage and stage {}/ yourself",
                        source.display(),
                        staging_context(&image.name)
                    )
                })?;
                binaries.insert(&image.selftest, bytes);
            }
        }
        let wheel_source = project.matrix()?.wheels;
        if wheel_source == WheelSource::Host {
            anyhow::bail!(
                "matrix.yaml: wheels: host makes the runtime venv on the host, which only `imagegen build` does; bake builds with buildx from the staged contexts alone\nhint: set `wheels: cache` for `imagegen bake`"
            );
        }
        // The wheels of every image's lock, fetched on the host as `imagegen build` does.
        let wheels = if wheel_source == WheelSource::Cache {
            wheels::fetch_for_images(
                images,
                &project.locks()?,
                &wheels::cache_root(args.wheel_cache.as_deref()),
                args.wheel_jobs as usize,
            )?
        } else {
            BTreeMap::new()
        };
        for image in images {
            let context = root.join(staging_context(&image.name));
            let mut files = image_files(&project.images_dir, &image.name)?;
            if let Some(context_wheels) = wheels.get(&image.name) {
                for small in &context_wheels.small_files {
                    files.insert(format!("wheels/{}", small.path), small.contents.clone());
                }
            }
            // The team's wheels (extra_indexes), fetched on the host as `imagegen build` does.
            if wheel_source == WheelSource::Index && !image.extensions.extra_indexes.is_empty() {
                let locks = project.locks()?;
                let lock = locks
                    .get(&image.name)
                    .map(String::as_str)
                    .unwrap_or_default();
                let fetched = team_context_files(
                    lock,
                    &image.extensions.extra_indexes,
                    std::time::Duration::from_secs(120),
                )
                .with_context(|| format!("fetching the team's wheels of {}", image.name))?;
                files.extend(fetched);
            }
            stage_context(
                &context,
                files,
                ("gpu-selftest", &binaries[image.selftest.as_str()]),
            )?;
            for file in wheels
                .get(&image.name)
                .map(|w| w.files.as_slice())
                .unwrap_or_default()
            {
                stage_linked(&context, &format!("wheels/{}", file.path), &file.source)?;
            }
            note(format!("staged {}", context.display()));
        }
    }
    if to_stdout {
        emit(&text)?;
    } else {
        write_atomically(out, text.as_bytes())?;
        note(format!(
            "wrote {} ({}){}",
            out.display(),
            count(images.len(), "target"),
            if stage {
                ""
            } else {
                "; not staged: copy images/<name>/* and target/selftest/gpu-selftest-cuNN (as gpu-selftest) to .imagegen/bake/<name>/ before `docker buildx bake -f`"
            }
        ));
    }
    Ok(Outcome::Success)
}
