//! `imagegen render`: writes one directory per image under `images/`, or with `--check` writes
//! nothing and reports (as a unified diff) how `images/` differs from what the matrix makes, and
//! which images' locks are missing or stale (offline: each lock's first line records a digest of
//! its inputs, compared with what the matrix asks for now). A matrix that makes no image is an
//! error (rendering it would remove every image) unless `--allow-empty` says so.

use anyhow::Result;

use crate::cli::RenderArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{count, emit, note};
use crate::commands::stages::{lock_problems, no_images, render_project};
use crate::project::{self, Project};
use crate::resolve::bases::{pin_problems, BASES_FILE};
use crate::resolve::lock::LockStatus;

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
        let locks = lock_problems(&resolution, &project.locks()?);
        let pins = pin_problems(&resolution.images, project.base_pins()?.as_ref());
        for diff in &drift.diffs {
            emit(diff)?;
        }
        for name in &drift.stale {
            emit(format!(
                "stale: {}/{name} is no longer made by {}\n",
                out.display(),
                project.matrix_path.display()
            ))?;
        }
        for file in &drift.stale_files {
            emit(format!(
                "stale: {}/{file} is no longer rendered\n",
                out.display()
            ))?;
        }
        for problem in &locks {
            emit(format!("lock: {}\n", problem.describe(out)))?;
        }
        for problem in &pins {
            emit(format!(
                "base: {problem} ({}/{BASES_FILE})\n",
                out.display()
            ))?;
        }
        if drift.is_clean() && locks.is_empty() && pins.is_empty() {
            let locked = resolution
                .images
                .iter()
                .filter(|image| image.lock.is_some())
                .count();
            emit(format!(
                "{}: {} up to date{}\n",
                out.display(),
                count(rendered.len(), "image"),
                if locked > 0 {
                    format!(", {} fresh", count(locked, "lock"))
                } else {
                    String::new()
                }
            ))?;
            return Ok(Outcome::Success);
        }
        let mut hints = Vec::new();
        if !drift.is_clean() {
            hints.push("run `imagegen render` and commit the result");
        }
        if !locks.is_empty() {
            hints.push("run `imagegen lock` (it needs uv and the package indexes) and commit the locks, then `imagegen render`");
        }
        if !pins.is_empty() {
            hints.push("run `imagegen lock --bases` (it needs the bases' registry or the daemon that holds them) and commit images/bases.lock");
        }
        note(format!(
            "error: {} is out of date ({} differ, {} stale, {} stale, {} missing or stale{})\nhint: {}",
            out.display(),
            count(drift.diffs.len(), "file"),
            count(drift.stale.len(), "image"),
            count(drift.stale_files.len(), "file"),
            count(locks.len(), "lock"),
            if pins.is_empty() {
                String::new()
            } else {
                format!(", {} unpinned", count(pins.len(), "base"))
            },
            hints.join("; ")
        ));
        return Ok(Outcome::Failed);
    }
    let (changed, removed) = project::write(&rendered, out)?;
    for name in &changed {
        emit(format!("wrote {}/{name}/Dockerfile\n", out.display()))?;
    }
    for name in &removed {
        emit(format!("removed {}/{name}\n", out.display()))?;
    }
    emit(format!(
        "{} in {} ({} changed, {} removed, {} rejected: see `imagegen resolve`)\n",
        count(rendered.len(), "image"),
        out.display(),
        changed.len(),
        removed.len(),
        count(resolution.rejected.len(), "cell")
    ))?;
    // Rendering does not lock: say so where a lock is missing or stale, since `build` refuses them.
    let locks = lock_problems(&resolution, &project.locks()?);
    if !locks.is_empty() {
        let missing = locks
            .iter()
            .filter(|p| matches!(p.status, LockStatus::Missing))
            .count();
        note(format!(
            "note: {} of {}: {} missing, {} stale (first: {}); `imagegen build` refuses those images\nhint: run `imagegen lock` (it needs uv and the package indexes) and commit the locks; `imagegen render --check` lists them",
            count(locks.len(), "lock"),
            count(rendered.len(), "image"),
            missing,
            locks.len() - missing,
            locks[0].describe(out)
        ));
    }
    Ok(Outcome::Success)
}
