//! `imagegen render`: writes one directory per image under `images/`, or with `--check` writes
//! nothing and reports (as a unified diff) how `images/` differs from what the matrix makes, and
//! which images' locks are missing or stale (offline: each lock's first line records a digest of
//! its inputs, compared with what the matrix asks for now). A matrix that makes no image is an
//! error (rendering it would remove every image) unless `--allow-empty` says so.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;

use crate::cli::RenderArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{count, emit, note};
use crate::commands::stages::{lock_problems, no_images, render_project};
use crate::model::digest::Digest;
use crate::project::{self, Project};
use crate::resolve::bases::{pin_problems, BASES_FILE};
use crate::resolve::image::ImageSpec;
use crate::resolve::lock::{carried_lock, LockStatus, LOCK_FILE};

pub(crate) fn run(project: &Project, args: &RenderArgs) -> Result<Outcome> {
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
    // A tag rename keeps the locks: a folder the matrix no longer makes hands its lock to the
    // image whose lock inputs it matches (read before `write` removes the folder).
    let locks_before = project::read_locks(out)?;
    let carried = carried_locks(&resolution.images, &locks_before);
    let (changed, removed) = project::write(&rendered, out)?;
    for name in &changed {
        emit(format!("wrote {}/{name}/Dockerfile\n", out.display()))?;
    }
    for (from, to, text) in &carried {
        project::write_lock(out, to, text)?;
        emit(format!(
            "kept the lock of {}/{from} as {}/{to}/{LOCK_FILE} (same inputs under a new name)\n",
            out.display(),
            out.display()
        ))?;
    }
    // What a devel image renders depends on its runtime lock: rendered again with the carried ones.
    let (resolution, rendered) = if carried.is_empty() {
        (resolution, rendered)
    } else {
        let again = render_project(project)?;
        project::write(&again.1, out)?;
        again
    };
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

/// The locks a rename carries: for each image without a lock of its own, the lock of a folder the
/// matrix no longer makes that serves it unchanged (`resolve::lock::carried_lock`), as
/// (old folder, image, lock text). Runtime images come first, so a devel image is judged against
/// the runtime lock carried for it.
fn carried_locks(
    images: &[ImageSpec],
    locks: &BTreeMap<String, String>,
) -> Vec<(String, String, String)> {
    let made: BTreeSet<&str> = images.iter().map(|image| image.name.as_str()).collect();
    let mut carried: Vec<(String, String, String)> = Vec::new();
    let mut ordered: Vec<&ImageSpec> = images.iter().collect();
    ordered.sort_by_key(|image| image.parent.is_some());
    for image in ordered {
        if locks.contains_key(&image.name) {
            continue;
        }
        let Some(spec) = image.lock.as_ref() else {
            continue;
        };
        let parent_carried = image.parent.as_ref().and_then(|parent| {
            carried
                .iter()
                .find(|(_, to, _)| to == parent)
                .map(|(_, _, text)| Digest::of(text.as_bytes()))
        });
        let spec = match parent_carried {
            Some(digest) => spec.with_parent_digest(digest),
            None => spec.clone(),
        };
        let found = locks
            .iter()
            .filter(|(name, _)| !made.contains(name.as_str()))
            .find_map(|(name, text)| {
                carried_lock(&spec, text).map(|text| (name.clone(), image.name.clone(), text))
            });
        carried.extend(found);
    }
    carried
}
