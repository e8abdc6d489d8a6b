//! Resolution: matrix + knowledge → image specs, and rejected cells with reasons a person can act
//! on. Pure: values in, values out, no I/O.
//!
//! A cell is one combination of the axes (torch × cuda × cudnn × python × os × variant), minus
//! `exclude` rules, plus `include` rules. Each cell is checked against the knowledge: does this
//! torch publish wheels for this CUDA, which cuDNN do they bundle, does the Python fit, does
//! NVIDIA publish a base image of that CUDA for that OS, is the glibc new enough, and (with
//! `--driver`) does the fleet's driver run it.

pub(crate) mod bases;
mod cells;
pub(crate) mod driver;
pub(crate) mod eol;
pub(crate) mod fingerprint;
mod flavour;
pub(crate) mod image;
pub(crate) mod known;
pub(crate) mod lock;
pub(crate) mod lookup;
mod rules;
pub(crate) mod select;
pub(crate) mod sources;
mod spec;
pub(crate) mod tags;

use std::collections::{BTreeMap, BTreeSet};

use crate::model::axes::{EndOfLifePolicy, Variant};
use crate::model::digest::Digest;
use crate::model::extensions::Extensions;
use crate::model::knowledge::Knowledge;
use crate::model::matrix::{tag_problem, Matrix};
use cells::expand;
use driver::driver_verdict;
use fingerprint::fingerprint;
use lock::ParentLock;
use rules::check_cell;
use spec::{build_spec, lock_spec};
use tags::TagFields;

use image::{Cell, ImageOrder, Resolved};
pub use image::{ImageSpec, Rejection, Resolution, ResolveOptions};

/// The images `matrix_yaml` resolves to on the small knowledge fixture of the tests
/// ([`Knowledge::test_fixture`]): for the tests of the stages after resolve.
#[cfg(test)]
pub(crate) fn test_images(matrix_yaml: &str) -> Vec<ImageSpec> {
    let matrix = Matrix::parse(matrix_yaml, "m.yaml").expect("a test matrix");
    resolve(
        &matrix,
        &Knowledge::test_fixture(),
        &ResolveOptions::default(),
    )
    .images
}

/// Resolves `matrix` against `knowledge`.
pub fn resolve(matrix: &Matrix, knowledge: &Knowledge, options: &ResolveOptions) -> Resolution {
    let mut resolution = Resolution::default();
    let mut resolved: Vec<(Cell, Resolved)> = Vec::new();
    // End-of-life findings by what reaches it, with how many cells meet it.
    let mut end_of_life: BTreeMap<String, (eol::EolFinding, usize)> = BTreeMap::new();
    for cell in expand(matrix, &mut resolution) {
        match check_cell(&cell, matrix, knowledge) {
            Ok(found) => {
                let findings = options
                    .today
                    .map(|today| eol::eol_findings(&found, matrix, knowledge, today))
                    .unwrap_or_default();
                if matrix.end_of_life == EndOfLifePolicy::Refuse && !findings.is_empty() {
                    let reasons: Vec<String> =
                        findings.iter().map(eol::EolFinding::describe).collect();
                    resolution.rejected.push(
                        cell.reject(format!("{} (end_of_life: refuse)", reasons.join("; and "))),
                    );
                    continue;
                }
                for finding in findings {
                    end_of_life
                        .entry(finding.subject.clone())
                        .or_insert((finding, 0))
                        .1 += 1;
                }
                resolved.push((cell, found));
            }
            Err(reason) => resolution.rejected.push(cell.reject(reason)),
        }
    }
    for (finding, cells) in end_of_life.into_values() {
        resolution.warnings.push(format!(
            "{} ({cells} cell{}; `end_of_life: refuse` in the matrix refuses them)",
            finding.describe(),
            if cells == 1 { "" } else { "s" }
        ));
    }

    // Devel images build on their runtime image: make sure it is there.
    let runtime_keys: BTreeSet<_> = resolved
        .iter()
        .filter(|(c, _)| c.variant == Variant::Runtime)
        .map(|(_, r)| r.key())
        .collect();
    let mut implied = Vec::new();
    for (cell, found) in &resolved {
        if cell.variant == Variant::Devel && !runtime_keys.contains(&found.key()) {
            let mut runtime_cell = cell.clone();
            runtime_cell.variant = Variant::Runtime;
            resolution.warnings.push(format!(
                "torch {} CUDA {} {}: the runtime image is added because the devel image builds on it",
                found.release.torch, found.variant.cuda, cell.os
            ));
            implied.push((
                runtime_cell,
                Resolved {
                    variant_kind: Variant::Runtime,
                    ..found.clone()
                },
            ));
        }
    }
    resolved.extend(implied);
    for (cell, found) in &mut resolved {
        found.variant_kind = cell.variant;
    }

    // The same image may be asked for twice (`2.7` and `2.7.1`): keep the first.
    let mut seen = BTreeSet::new();
    resolved.retain(|(_, found)| seen.insert((found.key(), found.variant_kind)));
    resolved.sort_by_key(|(_, found)| sort_key(found));

    let mut images: Vec<ImageSpec> = resolved
        .iter()
        .map(|(_, found)| build_spec(found, matrix, knowledge, options))
        .collect();

    // Devel images point at their runtime image, their fingerprint covers the parent's, and their
    // lock is resolved against the parent's lock.
    let runtime_extensions: BTreeMap<_, Extensions> = images
        .iter()
        .zip(&resolved)
        .filter(|(image, _)| image.variant == Variant::Runtime)
        .map(|(image, (_, found))| (found.key(), image.extensions.clone()))
        .collect();
    let runtime_by_key: BTreeMap<_, (String, String, Digest, Vec<String>)> = images
        .iter()
        .zip(&resolved)
        .filter(|(image, _)| image.variant == Variant::Runtime)
        .map(|(image, (_, found))| {
            (
                found.key(),
                (
                    image.name.clone(),
                    format!("{}:{}", image.repository, image.tag),
                    image.fingerprint.clone(),
                    image.requirements.clone(),
                ),
            )
        })
        .collect();
    for (image, (_, found)) in images.iter_mut().zip(&resolved) {
        if image.variant == Variant::Devel {
            if let Some((name, reference, parent_fingerprint, parent_requirements)) =
                runtime_by_key.get(&found.key())
            {
                image.parent = Some(name.clone());
                image.base_image = reference.clone();
                image.base_image_id = None;
                image.inputs.remove("base_image_id");
                // The runtime image installed its additions; the devel image adds what differs.
                if let Some(parent_extensions) = runtime_extensions.get(&found.key()) {
                    image.extensions = image.extensions.beyond(parent_extensions);
                    image.inputs.retain(|key, _| !key.starts_with("ext."));
                    image
                        .inputs
                        .extend(spec::extension_inputs(&image.extensions, options));
                }
                if let Some(own) = &image.lock {
                    let parent = ParentLock {
                        image: name.clone(),
                        digest: options.locks.get(name).cloned(),
                    };
                    image.lock = Some(lock_spec(
                        image,
                        own.python_platform.clone(),
                        Some((parent, parent_requirements.clone())),
                    ));
                }
                image.inputs.insert("base_image".into(), reference.clone());
                image
                    .inputs
                    .insert("parent_fingerprint".into(), parent_fingerprint.to_string());
                image.fingerprint = fingerprint(&image.inputs);
            }
        }
    }
    // Flavours build on the runtime (or devel) images, each after its parent; their tags take
    // `{revision}` and `{date}` from the manifest like any other (below), so a flavour's folder
    // leaves them out and a change to a flavour alone gives it the next revision.
    let mut images = flavour::with_flavours(images, matrix, options);
    assign_recorded_fields(&mut images, options);
    apt_mirror_warnings(&images, matrix, &mut resolution);

    reject_tag_collisions(&mut images, &mut resolution);
    reject_invalid_tags(&mut images, matrix, &mut resolution);

    if let Some(driver) = &options.driver {
        let mut kept = Vec::new();
        for image in images {
            match driver_verdict(&image, driver, options.forward_compat, knowledge) {
                None => kept.push(image),
                Some(reason) => resolution
                    .rejected
                    .push(Rejection::of_image(&image, "driver", reason)),
            }
        }
        images = kept;
    }

    assign_aliases(&mut images, matrix);
    flavour::assign_flavour_aliases(&mut images);
    while reject_alias_collisions(&mut images, matrix, &mut resolution) {
        for image in &mut images {
            image.aliases.clear();
        }
        assign_aliases(&mut images, matrix);
        flavour::assign_flavour_aliases(&mut images);
    }
    resolution.images = images;
    resolution
}

/// Fills `{revision}` and `{date}` of every full tag from the manifest's records (see
/// [`tags::read_back`]). The images published under one tag (one per platform) share them: a
/// recorded date and revision is kept when those of them recorded there (a platform may not be
/// built yet) all have their present fingerprint; otherwise the tag gets today's date and one more than the highest revision
/// recorded (under today's date, when the tag has one). An image built on another (a devel
/// image, a flavour) is built `FROM` its parent's filled tag, which it keeps as `parent_tag`; its
/// fingerprint covers the parent's content, not its revision, and its own revision counts its own
/// content (a flavour changed alone takes its next revision; its parent keeps its own).
fn assign_recorded_fields(images: &mut [ImageSpec], options: &ResolveOptions) {
    let today = crate::model::date::compact_date(options.today.unwrap_or(0));
    let published = |image: &ImageSpec| image.index.clone().unwrap_or_else(|| image.tag.clone());
    let groups: BTreeSet<String> = images
        .iter()
        .filter(|image| tags::has_recorded_fields(&image.tag))
        .map(published)
        .collect();
    for group in groups {
        let members: Vec<usize> = (0..images.len())
            .filter(|&i| published(&images[i]) == group)
            .collect();
        // What each (date, revision) holds: by member, whether its fingerprint is the present one.
        let mut found: BTreeMap<(Option<String>, Option<u32>), BTreeMap<usize, bool>> =
            BTreeMap::new();
        for &member in &members {
            for (tag, fingerprint) in &options.recorded {
                if let Some(fields) = tags::read_back(&images[member].tag, tag) {
                    found
                        .entry(fields)
                        .or_default()
                        .insert(member, *fingerprint == images[member].fingerprint);
                }
            }
        }
        let kept = found
            .iter()
            .filter(|(_, by_member)| by_member.values().all(|same| *same))
            .map(|(fields, _)| fields.clone())
            .max_by_key(|(date, revision)| (date.clone(), *revision));
        let (date, revision) = match kept {
            Some((date, revision)) => {
                (date.unwrap_or_else(|| today.clone()), revision.unwrap_or(1))
            }
            None => {
                let highest = found
                    .keys()
                    .filter(|(date, _)| date.as_ref().is_none_or(|d| *d == today))
                    .filter_map(|(_, revision)| *revision)
                    .max()
                    .unwrap_or(0);
                (today.clone(), highest + 1)
            }
        };
        for &member in &members {
            let image = &mut images[member];
            image.tag = tags::fill_recorded(&image.tag, &date, revision);
            image.index = image
                .index
                .as_ref()
                .map(|index| tags::fill_recorded(index, &date, revision));
        }
    }
    let pushed_as: BTreeMap<String, (String, String)> = images
        .iter()
        .map(|image| {
            (
                image.name.clone(),
                (image.repository.clone(), image.tag.clone()),
            )
        })
        .collect();
    for image in images.iter_mut() {
        if let Some((repository, tag)) = image.parent.as_ref().and_then(|p| pushed_as.get(p)) {
            image.base_image = format!("{repository}:{tag}");
            image.parent_tag = Some(tag.clone());
        }
    }
}

/// Tags Docker would refuse (over 128 characters, a first character that is not a letter, digit
/// or `_`) are rejected here, at `tags.full`, not later by the daemon or a registry.
fn reject_invalid_tags(images: &mut Vec<ImageSpec>, matrix: &Matrix, resolution: &mut Resolution) {
    let location = matrix.locations.line_of("tags.full");
    images.retain(|image| {
        let Some(problem) = std::iter::once(&image.tag)
            .chain(image.index.as_ref())
            .find_map(|tag| tag_problem(tag))
        else {
            return true;
        };
        let mut rejection =
            Rejection::of_image(image, "tags", format!("{problem}; shorten tags.full"));
        rejection.location = location.clone();
        resolution.rejected.push(rejection);
        false
    });
}

/// A full tag never moves and an alias does: one name cannot be both (`rollback` would move
/// what is meant to be immutable). Images whose full tag (or index tag) is also an alias's name
/// are rejected at `tags.full`; whether any were, so the caller gives the aliases again over
/// the images left.
fn reject_alias_collisions(
    images: &mut Vec<ImageSpec>,
    matrix: &Matrix,
    resolution: &mut Resolution,
) -> bool {
    let mut alias_of: BTreeMap<String, String> = BTreeMap::new();
    for image in images.iter() {
        for alias in &image.aliases {
            let published = image.index.clone().unwrap_or_else(|| image.tag.clone());
            alias_of.entry(alias.clone()).or_insert(published);
        }
    }
    let location = matrix.locations.line_of("tags.full");
    let before = images.len();
    images.retain(|image| {
        let published = image.index.as_ref().unwrap_or(&image.tag);
        let Some((name, owner)) = [published, &image.tag]
            .into_iter()
            .find_map(|name| alias_of.get(name).map(|owner| (name, owner)))
        else {
            return true;
        };
        let reason = format!(
            "its full tag {name} is also the name of an alias (of {owner}): a full tag never moves and an alias does; change tags.full so full tags and aliases differ"
        );
        let mut rejection = Rejection::of_image(image, "tags", reason);
        rejection.location = location.clone();
        resolution.rejected.push(rejection);
        false
    });
    images.len() != before
}

/// With any apt mirror set (an air-gapped build), every apt host a build reaches should have one:
/// a warning per uncovered host names the images and the `mirrors.*` key.
fn apt_mirror_warnings(images: &[ImageSpec], matrix: &Matrix, resolution: &mut Resolution) {
    if !sources::any_apt_mirror(&matrix.mirrors) {
        return;
    }
    let mut uncovered: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for image in images {
        if image.variant != Variant::Runtime || image.flavour.is_some() {
            continue;
        }
        let hosts = sources::uncovered_apt_hosts(
            &image.os,
            image.platform.arch(),
            !image.os.is_debian(),
            &matrix.mirrors,
        );
        for host in hosts {
            uncovered.entry(host).or_default().push(&image.name);
        }
    }
    for ((key, host), names) in uncovered {
        resolution.warnings.push(format!(
            "{host} has no mirror (set mirrors.{key}): the builds of {} reach it",
            names.join(", ")
        ));
    }
}

/// Images in order: torch, CUDA, OS (each as parsed when the cell was checked), then Python as
/// written, variant and platform.
fn sort_key(found: &Resolved) -> (ImageOrder, String, Variant, String) {
    (
        found.order.clone(),
        found.python.to_string(),
        found.variant_kind,
        found.platform.to_string(),
    )
}

/// Two images must never share a full tag; when a custom template makes them, both are rejected.
fn reject_tag_collisions(images: &mut Vec<ImageSpec>, resolution: &mut Resolution) {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for image in images.iter() {
        *count.entry(image.tag.clone()).or_default() += 1;
    }
    images.retain(|image| {
        if count[&image.tag] == 1 {
            return true;
        }
        let reason = format!("several images would share the full tag {}; add the differing placeholder (e.g. {{python}}, {{cudnn}}) to tags.full", image.tag);
        resolution.rejected.push(Rejection::of_image(image, "tags", reason));
        false
    });
}

fn assign_aliases(images: &mut [ImageSpec], matrix: &Matrix) {
    // Aliases name what a user pulls: the image, or with several platforms the index. Compute
    // them once per published tag, then give them to every platform image of that tag.
    let published = |image: &ImageSpec| image.index.clone().unwrap_or_else(|| image.tag.clone());
    let mut unique: Vec<&ImageSpec> = Vec::new();
    // Flavour images take their runtime image's aliases (flavour::assign_flavour_aliases).
    for image in images.iter().filter(|image| image.flavour.is_none()) {
        if !unique.iter().any(|u| published(u) == published(image)) {
            unique.push(image);
        }
    }
    let fields: Vec<TagFields> = unique
        .iter()
        .map(|image| image.tag_fields.clone())
        .collect();
    let default_os = tags::default_os(&fields, matrix.tags.default_os.as_ref().map(|o| o.as_str()));
    let by_published: BTreeMap<String, Vec<String>> =
        tags::aliases(&fields, default_os.as_deref(), matrix.tags.latest)
            .into_iter()
            .map(|(index, list)| (published(unique[index]), list))
            .collect();
    for image in images.iter_mut() {
        if let Some(list) = by_published.get(&published(image)) {
            image.aliases = list.clone();
        }
    }
}

#[cfg(test)]
mod tests;
