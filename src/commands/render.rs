//! `imagegen render`: writes one directory per image under `images/`, or with `--check` writes
//! nothing and reports (as a unified diff) how `images/` differs from what the matrix makes.

use anyhow::Result;

use crate::cli::RenderArgs;
use crate::commands::outcome::Outcome;
use crate::commands::stages::render_project;
use crate::project::{self, Project};

pub fn run(project: &Project, args: &RenderArgs) -> Result<Outcome> {
    let (resolution, rendered) = render_project(project)?;
    let out = &args.out;
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
            println!("{}: {} images up to date", out.display(), rendered.len());
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
        "{} images in {} ({} changed, {} removed, {} cells rejected: see `imagegen resolve`)",
        rendered.len(),
        out.display(),
        changed.len(),
        removed.len(),
        resolution.rejected.len()
    );
    Ok(Outcome::Success)
}
