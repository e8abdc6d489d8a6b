//! `imagegen render`: writes one directory per image under `images/`, or with `--check` writes
//! nothing and reports (as a unified diff) how `images/` differs from what the matrix makes. A
//! matrix that makes no image is an error (rendering it would remove every image) unless
//! `--allow-empty` says so.

use anyhow::Result;

use crate::cli::RenderArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::count;
use crate::commands::stages::{no_images, render_project};
use crate::project::{self, Project};

pub fn run(project: &Project, args: &RenderArgs) -> Result<Outcome> {
    let (resolution, rendered) = render_project(project)?;
    let out = &args.out;
    if rendered.is_empty() && !args.allow_empty {
        let consequence = if args.check {
            format!(" (there is nothing to check {}/ against)", out.display())
        } else {
            format!(
                " (rendering would remove every image in {}/)",
                out.display()
            )
        };
        return Err(no_images(
            project,
            &resolution,
            &consequence,
            &format!(
                "; to empty {}/ on purpose, pass --allow-empty",
                out.display()
            ),
        ));
    }
    if args.check {
        let drift = project::check(&rendered, out)?;
        for diff in &drift.diffs {
            print!("{diff}");
        }
        for name in &drift.stale {
            println!(
                "stale: {}/{name} is no longer made by {}",
                out.display(),
                project.matrix_path.display()
            );
        }
        if drift.is_clean() {
            println!(
                "{}: {} up to date",
                out.display(),
                count(rendered.len(), "image")
            );
            return Ok(Outcome::Success);
        }
        eprintln!(
            "error: {} is out of date ({} files differ, {} stale images)\nhint: run `imagegen render` and commit the result",
            out.display(),
            drift.diffs.len(),
            drift.stale.len()
        );
        return Ok(Outcome::Failed);
    }
    let (changed, removed) = project::write(&rendered, out)?;
    for name in &changed {
        println!("wrote {}/{name}/Dockerfile", out.display());
    }
    for name in &removed {
        println!("removed {}/{name}", out.display());
    }
    println!(
        "{} in {} ({} changed, {} removed, {} rejected: see `imagegen resolve`)",
        count(rendered.len(), "image"),
        out.display(),
        changed.len(),
        removed.len(),
        count(resolution.rejected.len(), "cell")
    );
    Ok(Outcome::Success)
}
