//! What earlier runs of `build` left behind when they were killed before their own cleanup
//! (SIGKILL, a crash): their containers, and the images of the build steps they had finished,
//! from their journals under `.imagegen/runs`. Removed only where this machine can tell the run
//! is gone (the caller's `gone` judges a run id); a live run's and another host's are left
//! alone. Run before this run's first build.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::docker::run_journal;
use crate::docker::{Engine, Removal};

/// Removes the containers (labelled `run_label`, the run's id its value) earlier runs left behind when they were killed before their own
/// cleanup (SIGKILL, a crash): those labelled with a run of this machine's boot whose process is
/// gone. A live run's containers, and those of runs this machine cannot judge (another host on a
/// shared daemon, an earlier boot, an older imagegen's run id), are left alone.
pub(super) async fn remove_leftovers_of_dead_runs(
    engine: &Engine,
    run_label: &str,
    gone: impl Fn(&str) -> bool,
) {
    let containers = match engine.containers_labelled(run_label).await {
        Ok(containers) => containers,
        Err(error) => {
            eprintln!("warning: could not look for containers earlier runs left behind: {error}");
            return;
        }
    };
    let dead: std::collections::BTreeSet<String> = containers
        .iter()
        .map(|(_, run)| run.clone())
        .filter(|run| gone(run))
        .collect();
    for run in dead {
        match engine.remove_containers_with_label(run_label, &run).await {
            Ok(0) => {}
            Ok(count) => {
                eprintln!("removed {count} container(s) left behind by run {run}, which is gone")
            }
            Err(error) => eprintln!(
                "warning: could not remove the containers of run {run}, which is gone: {error}"
            ),
        }
    }
}

/// Where runs write their journals of step images: `runs/` beside the build logs
/// (`.imagegen/runs`).
pub(super) fn journal_dir(log_dir: &Path) -> PathBuf {
    state_dir(log_dir).join("runs")
}

/// How long a run waits, before its builds, for the daemon to let go of the images of a run killed
/// mid-build: it stops and removes the killed step's container on its own time, and refuses to
/// remove that container's image ("being used by running container") for a moment even after
/// the container has left its list.
const DEAD_RUN_IMAGES_PATIENCE: Duration = Duration::from_secs(15);

/// Removes the images that builds of runs killed mid-build left (the classic builder's images of
/// the steps finished before the kill), from those runs' journals: only runs of this machine's
/// boot whose process is gone, and only images with no tag that no image is built on and no
/// container uses (the daemon judges that; nothing is forced). A live run's journal, and one of
/// a run this machine cannot judge, stay.
///
/// It runs before this run's builds and waits (within [`DEAD_RUN_IMAGES_PATIENCE`]) while a
/// container still holds one: a build started meanwhile would take the killed run's step images
/// as its cache and build on them, and an image built on is no longer a leftover to remove.
pub(super) async fn remove_images_of_dead_runs(
    engine: &Engine,
    dir: &Path,
    gone: impl Fn(&str) -> bool,
) {
    let found = match run_journal::journals(dir) {
        Ok(found) => found,
        Err(error) => {
            eprintln!(
                "warning: could not read the image journals of earlier runs in {}: {error}",
                dir.display()
            );
            return;
        }
    };
    let deadline = std::time::Instant::now() + DEAD_RUN_IMAGES_PATIENCE;
    for entry in found {
        if !gone(&entry.run) {
            continue;
        }
        let mut removed = 0;
        let (in_use, failed) = loop {
            // Kept for a later run to try again when the daemon failed or a container still
            // holds an image past the patience.
            let mut failed = false;
            let mut in_use = None;
            // Newest first: each step's image is the parent of the next. One built on by an
            // image that is not the run's (a later build took it as cache) is that image's
            // layer now, and stays, like a tagged one.
            for image in entry.images.iter().rev() {
                match engine.remove_untagged_image(image).await {
                    Ok(Removal::Removed) => removed += 1,
                    Ok(Removal::Absent | Removal::Tagged | Removal::HasChildren(_)) => {}
                    Ok(Removal::InUse(reason)) => {
                        in_use = Some(format!("{image}: {reason}"));
                        // Its parents are held by it: they are tried with it next time.
                        break;
                    }
                    Err(error) => {
                        failed = true;
                        eprintln!(
                            "warning: could not remove image {image} left behind by run {}, which is gone: {error}",
                            entry.run
                        );
                    }
                }
            }
            if in_use.is_none() || std::time::Instant::now() >= deadline {
                break (in_use, failed);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        if removed > 0 {
            eprintln!(
                "removed {removed} image(s) left behind by run {}, which is gone",
                entry.run
            );
        }
        if let Some(reason) = &in_use {
            eprintln!(
                "note: a container still uses an image left behind by run {}, which is gone ({reason}); a later run removes its images",
                entry.run
            );
        }
        if in_use.is_none() && !failed {
            if let Err(error) = run_journal::remove(&entry.path) {
                eprintln!(
                    "warning: could not remove {}: {error}",
                    entry.path.display()
                );
            }
        }
    }
}

/// The folder of imagegen's state beside the logs (`.imagegen/`): the run journals and the
/// layer store.
pub(super) fn state_dir(log_dir: &Path) -> PathBuf {
    log_dir
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}
