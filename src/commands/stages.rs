//! The pure stages as the commands call them on a project: resolve its matrix against its
//! knowledge (with the digests of its images' locks and of its CA bundle, which fingerprints
//! cover), render its images with the templates it uses, and say which locks are stale. A matrix
//! that makes no image is an error for every command that would write or build from it
//! ([`no_images`]).

use std::collections::BTreeMap;

use anyhow::Result;

use crate::model::axes::Variant;
use crate::model::digest::Digest;
use crate::project::Project;
use crate::render::{render_all, RenderedImage};
use crate::resolve::image::{Resolution, ResolveOptions};
use crate::resolve::lock::{lock_status, locked_cuda, locked_ensurepip, LockStatus, LOCK_FILE};
use crate::resolve::resolve;

/// Resolves the project's matrix; `options.template_digest`, the lock digests and the CA bundle's
/// digest are filled in from the project, so a change to any of them changes the fingerprints.
pub(crate) fn resolve_project(project: &Project, options: ResolveOptions) -> Result<Resolution> {
    let locks = project.locks()?;
    resolve_with_locks(project, options, &locks)
}

/// `read` of each lock (by image name), a refusal named by the lock's path and line.
fn read_each_lock<T>(
    locks: &BTreeMap<String, String>,
    read: impl Fn(&str) -> Result<T, String>,
) -> Result<BTreeMap<String, T>> {
    locks
        .iter()
        .map(|(name, text)| {
            let value =
                read(text).map_err(|why| anyhow::anyhow!("images/{name}/{LOCK_FILE}:{why}"))?;
            Ok((name.clone(), value))
        })
        .collect()
}

/// Resolves with the locks given (by image name) instead of those on disk: `imagegen lock`
/// resolves again after each lock it writes.
pub(crate) fn resolve_with_locks(
    project: &Project,
    mut options: ResolveOptions,
    locks: &BTreeMap<String, String>,
) -> Result<Resolution> {
    let definition = project.definition()?;
    options.template_digest = definition.templates.digest();
    options.fragments = definition.templates.fragment_digests();
    options.no_lock = !locks_enabled(project)?;
    options.locks = if options.no_lock {
        BTreeMap::new()
    } else {
        locks
            .iter()
            .map(|(name, text)| (name.clone(), Digest::of(text.as_bytes())))
            .collect()
    };
    options.locked_cuda = read_each_lock(locks, locked_cuda)?;
    options.locked_ensurepip = read_each_lock(locks, locked_ensurepip)?;
    options.ca_bundle = project
        .ca_bundle()?
        .map(|bundle| Digest::of(bundle.text.as_bytes()));
    options.today = Some(today()?);
    options.recorded = project.recorded_fingerprints()?;
    options.base_pins = project
        .base_pins()?
        .map(|pins| pins.bases)
        .unwrap_or_default();
    Ok(resolve(&definition.matrix, &definition.knowledge, &options))
}

/// Today in days since 1970-01-01, from `IMAGEGEN_TODAY` (`YYYY-MM-DD`, for a build that must
/// judge ends of life as of a given day) or the clock.
fn today() -> Result<i64> {
    match std::env::var("IMAGEGEN_TODAY") {
        Ok(text) => crate::model::date::days_since_epoch(&text)
            .ok_or_else(|| anyhow::anyhow!("IMAGEGEN_TODAY={text:?} is not a day (YYYY-MM-DD)")),
        // Days are whole UTC days: the instant's seconds divided by a day's.
        Err(_) => Ok(jiff::Timestamp::now().as_second().div_euclid(86_400)),
    }
}

/// Whether the project's images install from locks: `lock:` in the matrix, by default whenever
/// an image the matrix asks for renders from an embedded template (which installs from one).
pub(crate) fn locks_enabled(project: &Project) -> Result<bool> {
    let definition = project.definition()?;
    let matrix = &definition.matrix;
    let mut variants: Vec<Variant> = matrix
        .variants
        .iter()
        .chain(
            matrix
                .include
                .iter()
                .filter_map(|rule| rule.variants.as_ref())
                .flatten(),
        )
        .copied()
        .collect();
    // A devel image builds on its runtime image, which resolution adds.
    if variants.contains(&Variant::Devel) {
        variants.push(Variant::Runtime);
    }
    let embedded = variants
        .iter()
        .any(|variant| definition.templates.embedded_for(*variant));
    match definition.matrix.lock {
        Some(false) if embedded => anyhow::bail!(
            "{}: `lock: false`, but the embedded runtime or devel template installs from images/<name>/{LOCK_FILE}\nhint: drop `lock: false` and run `imagegen lock`, or replace both templates with your own (`templates:`)",
            project.matrix_path.display()
        ),
        Some(enabled) => Ok(enabled),
        None => Ok(embedded),
    }
}

/// Resolves and renders every image the project's matrix makes.
pub(crate) fn render_project(project: &Project) -> Result<(Resolution, Vec<RenderedImage>)> {
    let definition = project.definition()?;
    let resolution = resolve_project(project, ResolveOptions::default())?;
    let ca_bundle = project.ca_bundle()?;
    let rendered = render_all(
        &resolution.images,
        &definition.matrix,
        &definition.templates,
        ca_bundle.as_ref(),
    )?;
    Ok((resolution, rendered))
}

/// One problem with an image's lock, for `render --check` and `build`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockProblem {
    pub(crate) image: String,
    pub(crate) status: LockStatus,
}

impl LockProblem {
    /// What to tell a person, with the lock's path under `images_dir`.
    pub(crate) fn describe(&self, images_dir: &std::path::Path) -> String {
        let path = images_dir.join(&self.image).join(LOCK_FILE);
        match &self.status {
            LockStatus::Fresh => format!("{} is up to date", path.display()),
            LockStatus::Missing => format!("{} is missing", path.display()),
            LockStatus::Stale { found, wanted } => {
                let mut text = format!(
                    "{} is stale: the matrix asks for other inputs",
                    path.display()
                );
                for line in found.iter().filter(|line| !wanted.contains(line)) {
                    text.push_str(&format!("\n  - {}", line.trim_start_matches("# ")));
                }
                for line in wanted.iter().filter(|line| !found.contains(line)) {
                    text.push_str(&format!("\n  + {}", line.trim_start_matches("# ")));
                }
                text
            }
        }
    }
}

/// The images of `resolution` whose lock is missing or stale.
pub(crate) fn lock_problems(
    resolution: &Resolution,
    locks: &BTreeMap<String, String>,
) -> Vec<LockProblem> {
    resolution
        .images
        .iter()
        .filter_map(|image| {
            let spec = image.lock.as_ref()?;
            let status = lock_status(spec, locks.get(&image.name).map(String::as_str));
            (status != LockStatus::Fresh).then(|| LockProblem {
                image: image.name.clone(),
                status,
            })
        })
        .collect()
}

/// The error of a command that needs images when the matrix makes none: every cell was rejected,
/// and the first reason is shown (`imagegen resolve` lists them all). `consequence` says what the
/// command would have done; `extra_hint` names the way to go on anyway, where there is one.
pub(crate) fn no_images(
    project: &Project,
    resolution: &Resolution,
    consequence: &str,
    extra_hint: &str,
) -> anyhow::Error {
    let first = resolution
        .rejected
        .first()
        .map(|rejection| {
            format!(
                " (the first: torch {} cuda {} {} {}: {})",
                rejection.torch, rejection.cuda, rejection.os, rejection.variant, rejection.reason
            )
        })
        .unwrap_or_default();
    let rejected = resolution.rejected.len();
    anyhow::anyhow!(
        "{} makes no images{consequence}: {rejected} cell{} rejected{first}\nhint: `imagegen resolve` lists every rejected cell and why{extra_hint}",
        project.matrix_path.display(),
        if rejected == 1 { " is" } else { "s are" },
    )
}
