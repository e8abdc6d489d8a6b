//! The wheels of `imagegen build` (and `bake`) with `wheels: cache`: which files of each image's
//! lock go into its build context (the packages its install will fetch, for its Python and
//! platform; a devel image's packages its runtime image holds already are not sent again), from
//! which index with which of the host's credentials, fetched through the host-side cache
//! (`docker::wheel_cache`) with a progress line per phase: a rewriting line on a terminal, a line
//! every few seconds elsewhere (CI logs).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use imagegen_python::{PackageName, Target, Version};

use crate::docker::pypi_index::{credentials, locked_packages, netrc_credentials};
use crate::docker::wheel_cache::{fetch_all, FetchProgress, IndexSource, WheelCache, WheelNeed};
use crate::docker::{ContextFile, ContextWheels, DiskFile};
use crate::pipeline::wheel_install::{self, Venv, VENV_PREFIX};
use crate::resolve::image::ImageSpec;

/// The cache folder: `--wheel-cache`/`$IMAGEGEN_WHEEL_CACHE`, else `$XDG_CACHE_HOME/imagegen/wheels`,
/// else `~/.cache/imagegen/wheels`, else `.imagegen/wheels`.
pub(crate) fn cache_root(given: Option<&Path>) -> PathBuf {
    if let Some(given) = given {
        return given.to_path_buf();
    }
    let non_empty = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(cache) = non_empty("XDG_CACHE_HOME") {
        return PathBuf::from(cache).join("imagegen/wheels");
    }
    if let Some(home) = non_empty("HOME") {
        return PathBuf::from(home).join(".cache/imagegen/wheels");
    }
    PathBuf::from(".imagegen/wheels")
}

/// One locked package an image's build installs from its context, and where it comes from (the
/// index URLs only: credentials are attached by [`fetch_for_images`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Needed {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) hashes: Vec<String>,
    pub(crate) python: String,
    pub(crate) python_platform: String,
    pub(crate) indexes: Vec<String>,
}

/// The packages of `image`'s `lock` its build installs from the context: all of them, less (for a
/// devel image) those its runtime image's lock `parent_lock` pins at the same version, which pip
/// finds installed. Each from the lock's `# from` index, else the image's indexes and the
/// matrix's extra indexes, in that order.
pub(crate) fn needed(
    image: &ImageSpec,
    lock: &str,
    parent_lock: Option<&str>,
) -> Result<Vec<Needed>> {
    let Some(spec) = &image.lock else {
        return Ok(Vec::new());
    };
    let installed: BTreeSet<(PackageName, Version)> = parent_lock
        .map(locked_packages)
        .transpose()?
        .unwrap_or_default()
        .into_iter()
        .map(|package| (package.name, package.version))
        .collect();
    let mut default_indexes: Vec<String> =
        image.pip.all().iter().map(|url| url.to_string()).collect();
    default_indexes.extend(
        image
            .extensions
            .extra_indexes
            .iter()
            .map(|index| index.url.to_string()),
    );
    let mut needed = Vec::new();
    for package in locked_packages(lock)? {
        if installed.contains(&(package.name.clone(), package.version.clone())) {
            continue;
        }
        if package.sha256.is_empty() {
            anyhow::bail!(
                "{}: {}=={} has no sha256 in the lock\nhint: run `imagegen lock --upgrade --only {}`",
                image.name,
                package.name,
                package.version,
                image.name
            );
        }
        needed.push(Needed {
            indexes: match &package.index {
                Some(from) => vec![from.clone()],
                None => default_indexes.clone(),
            },
            name: package.name.to_string(),
            version: package.version.to_string(),
            hashes: package.sha256.iter().map(ToString::to_string).collect(),
            python: spec.python.clone(),
            python_platform: spec.python_platform.clone(),
        });
    }
    Ok(needed)
}

/// The `wheels/` folder of every image's context: each needed wheel fetched once for all images
/// (on `jobs` threads, into the cache at `root`), and a `SOURCES` file naming each with its sha256.
pub(crate) fn fetch_for_images(
    images: &[ImageSpec],
    locks: &BTreeMap<String, String>,
    root: &Path,
    jobs: usize,
) -> Result<BTreeMap<String, ContextWheels>> {
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    let mut per_image: BTreeMap<String, Vec<Needed>> = BTreeMap::new();
    for image in images {
        let Some(lock) = locks.get(&image.name) else {
            continue;
        };
        let parent_lock = image
            .lock
            .as_ref()
            .and_then(|spec| spec.parent.as_ref())
            .and_then(|parent| locks.get(&parent.image))
            .map(String::as_str);
        per_image.insert(image.name.clone(), needed(image, lock, parent_lock)?);
    }
    let unique: BTreeSet<Needed> = per_image.values().flatten().cloned().collect();
    let unique: Vec<Needed> = unique.into_iter().collect();
    let mut needs = Vec::new();
    for wanted in &unique {
        let target = Target::parse(&wanted.python, &wanted.python_platform).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: the lock's Python {} on {} is not a target wheels can be chosen for",
                wanted.name,
                wanted.python,
                wanted.python_platform
            )
        })?;
        let mut indexes = Vec::new();
        for url in &wanted.indexes {
            let team = images
                .iter()
                .flat_map(|image| &image.extensions.extra_indexes)
                .find(|index| same(&index.url, url));
            let credentials = match team {
                Some(index) => credentials(index)?,
                None => netrc_credentials(url),
            };
            indexes.push(IndexSource {
                url: url.clone(),
                credentials,
            });
        }
        needs.push(WheelNeed {
            name: wanted.name.clone(),
            version: wanted.version.clone(),
            hashes: wanted.hashes.clone(),
            target: format!("Python {} on {}", wanted.python, wanted.python_platform),
            accepts: std::sync::Arc::new(move |wheel| target.accepts(wheel)),
            indexes,
        });
    }
    let cache = WheelCache::new(root);
    let progress = FetchProgress::default();
    let started = Instant::now();
    let done = AtomicBool::new(false);
    let fetched = std::thread::scope(|scope| {
        let reporter = scope.spawn(|| report(&progress, &done, started));
        let fetched = fetch_all(&cache, &needs, jobs, Duration::from_secs(120), &progress);
        done.store(true, Ordering::Relaxed);
        let _ = reporter.join();
        fetched
    })
    .context("fetching the wheels of the images' locks on the host")?;
    eprintln!(
        "{}",
        progress_line(&progress, started.elapsed(), true, root)
    );
    let by_need: BTreeMap<&Needed, _> = unique.iter().zip(fetched).collect();
    let mut contexts = BTreeMap::new();
    for (image, wanted) in per_image {
        let mut sources = String::from(
            "# The files of the image's lock its build installs, fetched by imagegen on the host and checked against the lock's sha256.\n",
        );
        let mut files = Vec::new();
        let mut names = BTreeSet::new();
        for need in &wanted {
            let wheel = &by_need[need];
            if names.insert(wheel.filename.clone()) {
                sources.push_str(&format!("{} sha256:{}\n", wheel.filename, wheel.sha256));
                files.push(DiskFile {
                    path: wheel.filename.clone(),
                    source: wheel.path.clone(),
                });
            }
        }
        contexts.insert(
            image,
            ContextWheels {
                files,
                small_files: vec![ContextFile {
                    path: "SOURCES".into(),
                    contents: sources.into_bytes(),
                    executable: false,
                }],
            },
        );
    }
    check_side_by_side(images, &contexts)?;
    Ok(contexts)
}

/// Refuses an image whose wheels would overwrite each other's files with other content (a devel
/// image's together with its runtime image's, which it installs over), before any build.
fn check_side_by_side(
    images: &[ImageSpec],
    contexts: &BTreeMap<String, ContextWheels>,
) -> Result<()> {
    for image in images {
        let Some(own) = contexts.get(&image.name) else {
            continue;
        };
        let parent = image
            .lock
            .as_ref()
            .and_then(|spec| spec.parent.as_ref())
            .and_then(|parent| contexts.get(&parent.image));
        let files: Vec<PathBuf> = parent
            .into_iter()
            .chain([own])
            .flat_map(|wheels| wheels.files.iter().map(|file| file.source.clone()))
            .collect();
        let venv = Venv {
            prefix: VENV_PREFIX.to_string(),
            python: image.python.to_string(),
        };
        let opened = crate::docker::wheel_cache::open_wheels(&files)?;
        wheel_install::check_side_by_side(opened, &venv).with_context(|| {
            format!(
                "{}: two wheels of its lock install one file with different content",
                image.name
            )
        })?;
    }
    Ok(())
}

/// Prints the progress line until `done`: rewritten in place every 200 ms on a terminal, a new
/// line every 5 s elsewhere.
fn report(progress: &FetchProgress, done: &AtomicBool, started: Instant) {
    let terminal = std::io::stderr().is_terminal();
    let every = if terminal {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(5)
    };
    let mut last = Instant::now();
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if last.elapsed() < every {
            continue;
        }
        last = Instant::now();
        let line = progress_line(progress, started.elapsed(), false, Path::new(""));
        let mut stderr = std::io::stderr().lock();
        if terminal {
            let _ = write!(stderr, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(stderr, "{line}");
        }
    }
    if terminal {
        let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
    }
}

/// `wheels: 12/41 files, 1.42 GB fetched at 112 MB/s, 0.96 GB (9 files) from the cache`.
pub(crate) fn progress_line(
    progress: &FetchProgress,
    elapsed: Duration,
    last: bool,
    root: &Path,
) -> String {
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    let seconds = elapsed.as_secs_f64().max(0.001);
    let fetched = load(&progress.bytes_fetched);
    let mut line = format!(
        "wheels: {}/{} files{}, {} fetched at {}/s, {} ({} files) from the cache",
        load(&progress.files_done),
        load(&progress.files_total),
        if last {
            format!(" ready in {seconds:.1} s")
        } else {
            String::new()
        },
        bytes(fetched),
        bytes((fetched as f64 / seconds) as u64),
        bytes(load(&progress.bytes_cached)),
        load(&progress.files_cached),
    );
    let refused = load(&progress.refused);
    if refused > 0 {
        line.push_str(&format!(
            ", {refused} cached file(s) refused (bytes not matching their sha256) and fetched again"
        ));
    }
    if last {
        line.push_str(&format!(" ({})", root.display()));
    }
    line
}

fn bytes(count: u64) -> String {
    match count {
        0..1_000_000 => format!("{:.1} kB", count as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", count as f64 / 1e6),
        _ => format!("{:.2} GB", count as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn the_progress_line_says_files_bytes_and_rate() {
        let progress = FetchProgress {
            files_total: AtomicU64::new(41),
            files_done: AtomicU64::new(12),
            files_cached: AtomicU64::new(9),
            bytes_cached: AtomicU64::new(960_000_000),
            files_fetched: AtomicU64::new(3),
            bytes_fetched: AtomicU64::new(1_420_000_000),
            refused: AtomicU64::new(0),
        };
        assert_eq!(
            progress_line(&progress, Duration::from_secs(10), false, Path::new("")),
            "wheels: 12/41 files, 1.42 GB fetched at 142.0 MB/s, 960.0 MB (9 files) from the cache"
        );
        progress.refused.store(1, Ordering::Relaxed);
        assert_eq!(
            progress_line(&progress, Duration::from_secs(10), true, Path::new("/c")),
            "wheels: 12/41 files ready in 10.0 s, 1.42 GB fetched at 142.0 MB/s, 960.0 MB (9 files) from the cache, 1 cached file(s) refused (bytes not matching their sha256) and fetched again (/c)"
        );
    }
}
