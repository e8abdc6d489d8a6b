//! `imagegen bake`: writes the `docker-bake.json` that `generate::bake` makes (or prints it with
//! `-`) and stages the self-test binaries its build contexts need.

use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::BakeArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{count, emit, note};
use crate::commands::stages::{no_images, resolve_project};
use crate::generate::bake::{bake_file, selftest_builds, staging_context};
use crate::project::{write_atomically, Project};
use crate::resolve::image::ResolveOptions;

/// `imagegen bake`: writes the bake file (or prints it with `-`) and stages
/// `<selftest_dir>/gpu-selftest-cuNN` as `.imagegen/bake/gpu-selftest-cuNN/gpu-selftest` beside it.
pub fn run(project: &Project, args: &BakeArgs) -> Result<Outcome> {
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
    let images = resolution.images;
    let text = bake_file(&images)?.to_json();
    let to_stdout = out.as_os_str() == "-";
    let root = if to_stdout {
        Path::new(".")
    } else {
        out.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    };
    if stage {
        for selftest in selftest_builds(&images) {
            let source = selftest_dir.join(&selftest);
            let bytes = std::fs::read(&source).with_context(|| {
                format!(
                    "cannot read the self-test binary {}\nhint: build it with `bash selftest/build.sh`, pass --selftest-dir, or use --no-stage and copy it to {}/gpu-selftest yourself",
                    source.display(),
                    staging_context(&selftest)
                )
            })?;
            let target = root.join(staging_context(&selftest)).join("gpu-selftest");
            write_atomically(&target, &bytes)?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
                    .with_context(|| format!("cannot make {} executable", target.display()))?;
            }
            note(format!("staged {}", target.display()));
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
                "; not staged: copy target/selftest/gpu-selftest-cuNN to .imagegen/bake/gpu-selftest-cuNN/gpu-selftest before `docker buildx bake`"
            }
        ));
    }
    Ok(Outcome::Success)
}
