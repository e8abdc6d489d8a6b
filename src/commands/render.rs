//! `imagegen render`: writes one directory per image under `images/`, or with `--check` writes
//! nothing and reports (as a unified diff) how `images/` differs from what the matrix makes, and
//! which images' locks are missing or stale (offline: each lock's first line records a digest of
//! its inputs, compared with what the matrix asks for now).

use anyhow::Result;

use crate::cli::RenderArgs;
use crate::commands::outcome::Outcome;
use crate::commands::stages::{lock_problems, render_project};
use crate::project::{self, Project};

pub fn run(project: &Project, args: &RenderArgs) -> Result<Outcome> {
    let (resolution, rendered) = render_project(project)?;
    let out = &args.out;
    if args.check {
        let drift = project::check(&rendered, out)?;
        let locks = lock_problems(&resolution, &project.locks()?);
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
        for file in &drift.stale_files {
            println!("stale: {}/{file} is no longer rendered", out.display());
        }
        for problem in &locks {
            println!("lock: {}", problem.describe(out));
        }
        if drift.is_clean() && locks.is_empty() {
            let locked = resolution
                .images
                .iter()
                .filter(|i| i.lock.is_some())
                .count();
            println!(
                "{}: {} images up to date{}",
                out.display(),
                rendered.len(),
                if locked > 0 {
                    format!(", {locked} locks fresh")
                } else {
                    String::new()
                }
            );
            return Ok(Outcome::Success);
        }
        let mut hints = Vec::new();
        if !drift.is_clean() {
            hints.push("run `imagegen render` and commit the result");
        }
        if !locks.is_empty() {
            hints.push("run `imagegen lock` (it needs uv and the package indexes) and commit the locks, then `imagegen render`");
        }
        eprintln!(
            "error: {} is out of date ({} files differ, {} stale images, {} stale files, {} locks missing or stale)\nhint: {}",
            out.display(),
            drift.diffs.len(),
            drift.stale.len(),
            drift.stale_files.len(),
            locks.len(),
            hints.join("; ")
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
