//! `imagegen lock`: resolves each image's Python packages to exact versions and sha256 hashes with
//! uv (`uv pip compile --generate-hashes` for the image's Python and platform, against its
//! indexes) and writes `images/<name>/requirements.lock`, then renders again (each image's
//! fingerprint covers its lock). Runtime images are locked first: a devel image's lock is
//! resolved against its runtime image's, a flavour's against its parent's (a devel flavour's
//! after its devel image's). Missing and stale locks are made; fresh ones are kept
//! unless `--upgrade`; a stale lock keeps the versions it had where they still fit.
//!
//! This is the one command that needs the network (the package indexes). uv runs in a temporary
//! folder holding fixed file names, with no user configuration and none of the `UV_*` settings
//! that would change what it resolves, so the same inputs and indexes give the same lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cli::LockImagesArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::count;
use crate::commands::stages::{locks_enabled, render_project, resolve_with_locks};
use crate::docker::pypi_index::env_credentials;
use crate::docker::{repository_path_of, Engine, Registries, RetryPolicy};
use crate::model::bases::registry_pin;
use crate::model::digest::Digest;
use crate::pipeline::plan::select_named;
use crate::project::{self, Project};
use crate::resolve::bases::{
    bases_needed, compare, BaseChange, BasePin, BasePins, Lookup, BASES_FILE,
};
use crate::resolve::image::{ImageSpec, ResolveOptions};
use crate::resolve::lock::{lock_status, LockSpec, LockStatus, LOCK_FILE};

/// uv's environment variables that may stay: where its cache is and how it talks to the network.
/// Every other `UV_*` (indexes, constraints, resolution strategy, ...) is removed.
const UV_ENV_KEPT: &[&str] = &[
    "UV_CACHE_DIR",
    "UV_NATIVE_TLS",
    "UV_HTTP_TIMEOUT",
    "UV_CONCURRENT_DOWNLOADS",
    "UV_INSECURE_HOST",
];

pub(crate) fn run(project: &Project, args: &LockImagesArgs) -> Result<Outcome> {
    if args.bases {
        let outcome = pin_bases(project, args, true)?;
        let (_, rendered) = render_project(project)?;
        let (changed, _) = project::write(&rendered, &args.out)?;
        println!(
            "{} rendered again in {}",
            count(changed.len(), "Dockerfile"),
            args.out.display()
        );
        return Ok(outcome);
    }
    if !locks_enabled(project)? {
        bail!(
            "{} installs without locks (`lock: false`, templates of your own): there is nothing to lock\nhint: set `lock: true` to lock and check the images' Python packages",
            project.matrix_path.display()
        );
    }
    let uv = Uv::find(args.uv.as_deref())?;
    let out = &args.out;
    let mut locks = project.locks()?;
    let resolution = resolve_with_locks(project, ResolveOptions::default(), &locks)?;
    let selected: Vec<String> = select_named(&resolution.images, args.only.as_deref())?
        .into_iter()
        .map(|image| image.name.clone())
        .collect();
    eprintln!(
        "locking with {} ({})",
        uv.version,
        count(selected.len(), "image")
    );
    let (mut written, mut kept) = (0, 0);
    // Parents first: runtime images, then what builds on them (devel images, runtime flavours),
    // then what builds on those (devel flavours). Each lock is resolved against its parent's, so
    // the specs of a pass are computed again once the locks of the pass before are on disk.
    for depth in 0..=2 {
        let resolution = resolve_with_locks(project, ResolveOptions::default(), &locks)?;
        let images = &resolution.images;
        for image in images
            .iter()
            .filter(|image| parent_depth(image, images) == depth && selected.contains(&image.name))
        {
            let Some(spec) = &image.lock else { continue };
            let current = locks.get(&image.name).map(String::as_str);
            let status = lock_status(spec, current);
            if status == LockStatus::Fresh && !args.upgrade {
                kept += 1;
                continue;
            }
            let parent_lock = match &spec.parent {
                None => None,
                Some(parent) => Some(locks.get(&parent.image).cloned().with_context(|| {
                    format!(
                        "{} has no lock yet, and the lock of {} is resolved against it\nhint: run `imagegen lock --only {}` first (or without --only)",
                        out.join(&parent.image).join(LOCK_FILE).display(),
                        image.name,
                        parent.image
                    )
                })?),
            };
            let started = Instant::now();
            // A stale lock keeps its versions where they still fit; --upgrade starts afresh.
            let previous = if args.upgrade { None } else { current };
            let body = uv
                .compile(spec, previous, parent_lock.as_deref())
                .with_context(|| format!("locking {}", image.name))?;
            let text = format!("{}{body}", spec.header(&uv.version));
            let changed = current != Some(text.as_str());
            if changed {
                project::write_lock(out, &image.name, &text)?;
                written += 1;
            } else {
                kept += 1;
            }
            eprintln!(
                "{} {}/{}/{LOCK_FILE}: {} packages ({}, {:.1} s)",
                if changed { "locked" } else { "unchanged" },
                out.display(),
                image.name,
                package_count(&body),
                match status {
                    LockStatus::Fresh => "upgrade",
                    LockStatus::Missing => "was missing",
                    LockStatus::Stale { .. } => "was stale",
                },
                started.elapsed().as_secs_f64()
            );
            locks.insert(image.name.clone(), text);
        }
    }
    // Bases not pinned yet are looked up once (a pinned one moves only with --bases); a base
    // that cannot be reached is said, and the packages' locks stand.
    if !args.no_bases {
        pin_bases(project, args, false)?;
    }
    // The fingerprints (in the Dockerfiles) cover the locks: render again.
    let (_, rendered) = render_project(project)?;
    let (changed, _) = project::write(&rendered, out)?;
    println!(
        "{written} locks written, {kept} unchanged; {} Dockerfiles rendered again in {}",
        changed.len(),
        out.display()
    );
    Ok(Outcome::Success)
}

/// The number of pinned packages in a lock body.
fn package_count(body: &str) -> usize {
    body.lines()
        .filter(|line| !line.starts_with([' ', '#']) && line.contains("=="))
        .count()
}

/// The uv executable and its version.
struct Uv {
    program: PathBuf,
    /// `uv 0.13.9`: recorded in each lock's header (not an input of the lock).
    version: String,
}

impl Uv {
    /// `explicit` (--uv, IMAGEGEN_UV) or `uv` on PATH; an error with a hint when it cannot run.
    fn find(explicit: Option<&Path>) -> Result<Uv> {
        let mut program = explicit
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("uv"));
        // uv runs in a temporary folder: a relative path must not change meaning there.
        if program.is_relative() && program.components().count() > 1 {
            program = std::env::current_dir()
                .context("cannot read the current folder")?
                .join(program);
        }
        let output = Command::new(&program)
            .arg("--version")
            .output()
            .map_err(|error| {
                anyhow::anyhow!(
                    "cannot run uv ({}): {error}\nhint: `imagegen lock` resolves the locks with uv: install it (e.g. `python3 -m venv .venv-uv && .venv-uv/bin/pip install uv`; `bash .ci/install-deps.sh` puts one in .ci/venv/bin) and put it on PATH or name it with --uv or IMAGEGEN_UV",
                    program.display()
                )
            })?;
        if !output.status.success() {
            bail!(
                "`{} --version` failed: {}",
                program.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        // `uv 0.13.9 (x86_64-unknown-linux-gnu)`: the host's triple is left out of the locks.
        let version = stdout
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        if !version.starts_with("uv ") {
            bail!(
                "{} does not look like uv: `--version` printed {:?}",
                program.display(),
                stdout.trim()
            );
        }
        Ok(Uv { program, version })
    }

    /// Resolves `spec` and returns the lock's body (uv's output without a header). `previous`: a
    /// lock whose versions uv keeps where they fit; `parent`: the runtime lock a devel lock is
    /// resolved against. With extras (`pip:` in the matrix), the requirements are resolved first
    /// alone, and then with the extras within every pin of that first lock: an extra that would
    /// move a package of the torch stack fails the lock, named, with uv's reason.
    fn compile(
        &self,
        spec: &LockSpec,
        previous: Option<&str>,
        parent: Option<&str>,
    ) -> Result<String> {
        let failed = |requirements: &[String], reason: String| {
            anyhow::anyhow!(
                "uv could not resolve {} for Python {} on {} from {}:\n{reason}\nhint: uv needs the package indexes (the one command that does); a requirement no index has is a knowledge or matrix problem",
                requirements.join(" "),
                spec.python,
                spec.python_platform,
                spec.indexes.all().join(" "),
            )
        };
        let stack = match self.compile_with(spec, &spec.requirements, previous, parent, None)? {
            Ok(body) => body,
            Err(reason) => return Err(failed(&spec.requirements, reason)),
        };
        if spec.extras.is_empty() {
            return Ok(stack);
        }
        let mut all = spec.requirements.clone();
        all.extend(spec.extras.iter().cloned());
        match self.compile_with(spec, &all, previous, parent, Some(&stack))? {
            Ok(body) => Ok(body),
            // Not a resolution conflict (an index unreachable, a credential refused): as it is.
            Err(reason) if !is_conflict(&reason) => Err(failed(&all, reason)),
            Err(together) => {
                // Which extra it is: each one alone within the stack's pins.
                let mut culprits = Vec::new();
                for extra in &spec.extras {
                    let mut one = spec.requirements.clone();
                    one.push(extra.clone());
                    if let Err(reason) =
                        self.compile_with(spec, &one, None, parent, Some(&stack))?
                    {
                        if !is_conflict(&reason) {
                            return Err(failed(&one, reason));
                        }
                        culprits.push(format!("- `{extra}`:\n{}", indent(&reason)));
                    }
                }
                if culprits.is_empty() {
                    culprits.push(format!(
                        "- the extras together ({}):\n{}",
                        spec.extras.join(", "),
                        indent(&together)
                    ));
                }
                bail!("{}", conflict_message(spec, &culprits))
            }
        }
    }

    /// One `uv pip compile` of `requirements` with the spec's constraints (and `pins`, a lock
    /// whose every version must stay): the lock's body, or uv's reason when it cannot resolve.
    fn compile_with(
        &self,
        spec: &LockSpec,
        requirements: &[String],
        previous: Option<&str>,
        parent: Option<&str>,
        pins: Option<&str>,
    ) -> Result<std::result::Result<String, String>> {
        let folder = project::ScratchDir::new("uv")?;
        let dir = folder.path();
        let lines =
            |items: &[String]| -> String { items.iter().map(|item| format!("{item}\n")).collect() };
        folder.write("requirements.in", &lines(requirements))?;
        folder.write("constraints.txt", &lines(&spec.constraints))?;
        if let Some(previous) = previous {
            folder.write(LOCK_FILE, previous)?;
        }
        let mut command = Command::new(&self.program);
        command
            .current_dir(dir)
            .args(["pip", "compile", "requirements.in"])
            .args(["--constraints", "constraints.txt"]);
        if let Some(parent) = parent {
            folder.write("runtime.lock", parent)?;
            command.args(["--constraints", "runtime.lock"]);
        }
        if let Some(pins) = pins {
            folder.write("stack.lock", pins)?;
            command.args(["--constraints", "stack.lock"]);
        }
        command
            .args(["--output-file", LOCK_FILE])
            .args(["--python-version", &spec.python])
            .args(["--python-platform", &spec.python_platform])
            .args(["--generate-hashes", "--no-header", "--only-binary", ":all:"])
            .args(["--no-config", "--no-progress", "--quiet"]);
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("UV_") && !UV_ENV_KEPT.contains(&key.as_ref()) {
                command.env_remove(key.as_ref());
            }
        }
        // The first index wins for a package it has (uv's default, against dependency confusion):
        // PyTorch's index, then the team's own (`extra_indexes`), then the plain one. The team's
        // credentials go to uv through its environment (or netrc, which uv reads): never on its
        // command line, never into the lock. The lock then says which index each package is
        // from, so `imagegen build` fetches the team's packages on the host.
        if let Some(plain) = &spec.indexes.extra_index_url {
            command.args(["--index", &spec.indexes.index_url]);
            self.extra_indexes(&mut command, spec)?;
            command.args(["--default-index", plain]);
        } else {
            self.extra_indexes(&mut command, spec)?;
            command.args(["--default-index", &spec.indexes.index_url]);
        }
        if !spec.extra_indexes.is_empty() {
            command.arg("--emit-index-annotation");
        }
        command.env("UV_PYTHON_DOWNLOADS", "never");
        let output = command
            .output()
            .with_context(|| format!("cannot run {}", self.program.display()))?;
        if !output.status.success() {
            return Ok(Err(String::from_utf8_lossy(&output.stderr)
                .trim()
                .to_string()));
        }
        let body = folder
            .read(LOCK_FILE)
            .context("uv wrote no requirements.lock")?;
        // uv keeps comment lines of a previous output file at its top; the header is ours.
        let body: String = body
            .lines()
            .skip_while(|line| line.starts_with('#') || line.is_empty())
            .map(|line| format!("{line}\n"))
            .collect();
        if package_count(&body) == 0 {
            bail!("uv resolved no packages:\n{body}");
        }
        Ok(Ok(body))
    }

    /// `--index extraN=URL` for each of the team's indexes, with its credentials from the
    /// variables the matrix names (uv reads netrc itself for the others).
    fn extra_indexes(&self, command: &mut Command, spec: &LockSpec) -> Result<()> {
        for (number, index) in spec.extra_indexes.iter().enumerate() {
            command.args(["--index", &format!("extra{number}={}", index.url)]);
            if let Some(credentials) = env_credentials(index)? {
                command.env(
                    format!("UV_INDEX_EXTRA{number}_USERNAME"),
                    credentials.username,
                );
                command.env(
                    format!("UV_INDEX_EXTRA{number}_PASSWORD"),
                    credentials.password,
                );
            }
        }
        Ok(())
    }
}

/// Looks up the bases the images are built on and writes `bases.lock`: every one with `refresh`
/// (`--bases`), else only those not pinned yet. Prints one line per base looked up (pinned,
/// unchanged, moved, vanished, unreachable). With `refresh`, a base that vanished or could not be
/// looked up fails the command (its pin, if any, is kept); without, it is a warning.
fn pin_bases(project: &Project, args: &LockImagesArgs, refresh: bool) -> Result<Outcome> {
    let resolution = resolve_with_locks(project, ResolveOptions::default(), &project.locks()?)?;
    let needed = bases_needed(&resolution.images);
    let existing = project.base_pins()?;
    let pinned = existing
        .as_ref()
        .map(|pins| pins.bases.clone())
        .unwrap_or_default();
    let to_look_up: Vec<&String> = needed
        .keys()
        .filter(|reference| refresh || !pinned.contains_key(*reference))
        .collect();
    if to_look_up.is_empty() {
        return Ok(Outcome::Success);
    }
    // Plain `lock` asks once (an offline machine locks packages without waiting on retries).
    let retry = if refresh {
        RetryPolicy::default()
    } else {
        RetryPolicy::no_retries()
    };
    let registries = Registries::new(Duration::from_secs(args.registry_timeout), retry);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let changes: Vec<(String, BaseChange)> = runtime.block_on(async {
        // The daemon is asked first (a base only it holds has no registry to ask); without one,
        // only registries are.
        let engine = Engine::connect_with_timeout(Duration::from_secs(30))
            .await
            .ok();
        let mut changes = Vec::new();
        for reference in to_look_up {
            let lookup = look_up(engine.as_ref(), &registries, reference).await;
            let change = compare(pinned.get(reference), lookup);
            let mut line = change.describe(reference);
            if let BaseChange::Vanished(Some(BasePin::Registry { digest, .. })) = &change {
                line.push_str(&still_served(&registries, reference, digest).await);
            }
            eprintln!("{line}");
            changes.push((reference.clone(), change));
        }
        changes
    });
    // The pins of bases still needed: those looked up as they now stand, the others as they were.
    let mut bases: BTreeMap<String, BasePin> = pinned
        .into_iter()
        .filter(|(reference, _)| needed.contains_key(reference))
        .collect();
    for (reference, change) in &changes {
        if let Some(pin) = change.kept() {
            bases.insert(reference.clone(), pin.clone());
        }
    }
    let pins = BasePins::new(bases);
    if !pins.bases.is_empty() || existing.is_some() {
        if existing.as_ref() != Some(&pins) {
            project::write_base_pins(&args.out, &pins)?;
        }
        let moved = changes
            .iter()
            .filter(|(_, change)| matches!(change, BaseChange::Moved(..)))
            .count();
        println!(
            "{}/{BASES_FILE}: {} pinned, {moved} moved",
            args.out.display(),
            count(pins.bases.len(), "base"),
        );
    }
    let failed = changes
        .iter()
        .filter(|(_, change)| {
            matches!(
                change,
                BaseChange::Vanished(_) | BaseChange::Unreachable(..)
            )
        })
        .count();
    if failed > 0 {
        eprintln!(
            "{}: {} could not be pinned as the tag stands now\nhint: a base that vanished needs a new tag in the matrix (or `base_images`); an unreachable one needs its registry (or `docker load` of it)",
            if refresh { "error" } else { "warning" },
            count(failed, "base")
        );
        if refresh {
            return Ok(Outcome::Failed);
        }
    }
    Ok(Outcome::Success)
}

/// What `reference` names now: a base only the daemon holds (no registry digest) by its image
/// ID, else what its registry serves under the tag.
async fn look_up(engine: Option<&Engine>, registries: &Registries, reference: &str) -> Lookup {
    let (name, tag) = split_tag(reference);
    if let Some(engine) = engine {
        if let Ok(Some(local)) = engine.image(reference).await {
            // Pulled or pushed under this name, it has a registry digest of it (an image ID
            // carries the registry digests of every name it was pushed under).
            let from_registry = local.repo_digests.iter().any(|entry| {
                entry
                    .parse::<imagegen_oci::Reference>()
                    .is_ok_and(|pinned| pinned.name() == name)
            });
            if !from_registry {
                return match Digest::parse(&local.id) {
                    Ok(image_id) => Lookup::Found(BasePin::Daemon { image_id }),
                    Err(error) => Lookup::Unreachable(format!(
                        "the daemon reports image ID {:?}: {error}",
                        local.id
                    )),
                };
            }
        }
    }
    let client = match registries.client(&name) {
        Ok(client) => client,
        Err(error) => return Lookup::Unreachable(error.to_string()),
    };
    match client.get_manifest(repository_path_of(&name), &tag).await {
        Ok(Some(manifest)) => match registry_pin(manifest.digest, &manifest.bytes) {
            Ok(pin) => Lookup::Found(pin),
            Err(why) => Lookup::Unreachable(format!("{} answered: {why}", client.host())),
        },
        Ok(None) => Lookup::Vanished,
        Err(error) => Lookup::Unreachable(error.to_string()),
    }
}

/// For a vanished tag: whether its registry still serves the pinned digest.
async fn still_served(registries: &Registries, reference: &str, digest: &Digest) -> String {
    let (name, _) = split_tag(reference);
    let Ok(client) = registries.client(&name) else {
        return String::new();
    };
    match client
        .manifest_digest(repository_path_of(&name), digest.as_str())
        .await
    {
        Ok(Some(_)) => format!(" (the registry still serves {digest})"),
        Ok(None) => format!(" (the registry no longer serves {digest} either: builds on it fail)"),
        Err(_) => String::new(),
    }
}

/// `name:tag` → (`name`, `tag`); no tag is `latest`. Parsed as Docker reads a reference (a `:`
/// in the registry is its port); one that does not parse is all name, and its lookup fails.
fn split_tag(reference: &str) -> (String, String) {
    match reference.parse::<imagegen_oci::Reference>() {
        Ok(parsed) => (parsed.name(), parsed.tag().unwrap_or("latest").to_string()),
        Err(_) => (reference.to_string(), "latest".to_string()),
    }
}

/// What `imagegen lock` says when extras (the matrix's `pip:`, a flavour's packages) would move a
/// pin of the torch stack (or of the runtime lock a devel or flavour lock is resolved against):
/// each culprit with uv's reason (`culprits`: `- `extra`:` and the reason indented).
fn conflict_message(spec: &LockSpec, culprits: &[String]) -> String {
    let parent_pins = spec
        .parent
        .as_ref()
        .map(|parent| {
            format!(
                " and every package of ../{}/{LOCK_FILE} stays as that lock pins it",
                parent.image
            )
        })
        .unwrap_or_default();
    format!(
        "the pip extras would change the pins of the torch stack ({}), which stay as those requirements alone resolve them{parent_pins}:\n{}\nhint: loosen or drop the extra in `pip:` of the matrix or of the flavour (an extra must fit the torch stack's versions, never move them)",
        spec.requirements.join(" "),
        culprits.join("\n")
    )
}

/// Whether uv's message is a resolution that has no solution (not a network or index failure).
fn is_conflict(reason: &str) -> bool {
    reason.contains("No solution found")
}

/// `text` indented by four spaces, for uv's reasons under a list item.
fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("    {line}\n"))
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// How many parents `image` builds on: 0 for a runtime image, 1 for a devel image or a runtime
/// flavour, 2 for a devel flavour.
fn parent_depth(image: &ImageSpec, images: &[ImageSpec]) -> usize {
    match &image.parent {
        None => 0,
        Some(parent) => images
            .iter()
            .find(|candidate| &candidate.name == parent)
            .map_or(1, |parent| 1 + parent_depth(parent, images)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::image::PipIndexes;

    /// uv's reason as `imagegen lock` got it in the real build (`tests/it/real_build.rs`, the
    /// team-conflict wheel of `tests/fixtures/real-build/team_index.py`).
    const UV_REASON: &str = "error: No solution found when resolving dependencies\n  cause: Because all versions of team-conflict depend on sympy<1.0 and torch==2.13.0 depends on sympy==1.14.0, we can conclude that all versions of team-conflict and torch==2.13.0 are incompatible.\n         And because you require torch==2.13.0 and team-conflict==0.1.0, we can conclude that your requirements are unsatisfiable.";

    /// The message a user sees when an extra would move torch's pins: snapshot, and
    /// docs/extensions.md ("Your own images") quotes it as it is.
    #[test]
    fn the_conflict_message_names_the_extra_and_uvs_reason_as_the_docs_show() {
        let spec = LockSpec::new(
            vec![
                "torch==2.13.0".into(),
                "torchvision==0.28.0".into(),
                "torchaudio==2.11.0".into(),
            ],
            Vec::new(),
            PipIndexes {
                index_url: "https://pypi.org/simple".into(),
                extra_index_url: None,
            },
            "3.11",
            "x86_64-manylinux_2_36".into(),
            None,
        );
        let culprits = vec![format!("- `team-conflict==0.1.0`:\n{}", indent(UV_REASON))];
        let message = conflict_message(&spec, &culprits);
        insta::assert_snapshot!("extras_conflict_message", message);
        let page = include_str!("../../docs/extensions.md");
        for line in message.lines() {
            assert!(page.contains(line), "docs/extensions.md lacks {line:?}");
        }
        // A flavour's lock (resolved against its runtime lock) says that lock stays too.
        let flavour = LockSpec::new(
            spec.requirements.clone(),
            Vec::new(),
            spec.indexes.clone(),
            "3.11",
            "x86_64-manylinux_2_36".into(),
            Some(crate::resolve::lock::ParentLock {
                image: "2.13.0-cuda13.0-cudnn9-runtime-debian12".into(),
                digest: None,
            }),
        );
        assert!(conflict_message(&flavour, &culprits).contains(
            "and every package of ../2.13.0-cuda13.0-cudnn9-runtime-debian12/requirements.lock stays as that lock pins it:"
        ));
    }
}
