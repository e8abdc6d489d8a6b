//! Flavour images: for each runtime image (or devel image, for a flavour `from: devel`) and each
//! flavour the matrix names FROM that variant, an image built FROM it (`…-runtime-jupyter`,
//! `…-devel-build`), with its own tag (and index tag), lock, fingerprint and, once the parent's
//! aliases are known, aliases of its own (`latest-jupyter`). Pure.
//!
//! A flavour's lock is resolved like a devel image's: the runtime image's requirements, with the
//! runtime image's lock as constraints (so no package of it changes version), and the flavour's
//! packages as extras within those pins (a conflict names the package and uv's reason). Its
//! fingerprint covers the flavour's definition part by part, the runtime image's fingerprint and
//! its own lock, so changing a flavour rebuilds exactly its images and `plan` names the part.

use std::collections::BTreeMap;

use crate::model::digest::Digest;
use crate::model::flavours::Flavour;
use crate::model::matrix::Matrix;
use crate::resolve::fingerprint::fingerprint;
use crate::resolve::image::{ImageSpec, LockSpec, ParentLock, ResolveOptions};
use crate::resolve::lock::cuda_line_constraints;
use crate::resolve::spec::extension_inputs;
use crate::resolve::tags;

/// `images` with, right after each runtime or devel image, one image per flavour of the matrix
/// built FROM that variant.
pub(super) fn with_flavours(
    images: Vec<ImageSpec>,
    matrix: &Matrix,
    options: &ResolveOptions,
) -> Vec<ImageSpec> {
    let flavours = matrix.flavours();
    if flavours.is_empty() {
        return images;
    }
    let mut all = Vec::with_capacity(images.len() * (1 + flavours.len()));
    for image in images {
        // The matrix's own runtime and devel images (a devel image's parent is its runtime image;
        // a flavour image is never a parent).
        let children: Vec<ImageSpec> = if image.flavour.is_none() {
            flavours
                .iter()
                .filter(|flavour| flavour.from.as_str() == image.variant.as_str())
                .map(|flavour| flavour_image(&image, flavour, matrix, options))
                .collect()
        } else {
            Vec::new()
        };
        all.push(image);
        all.extend(children);
    }
    all
}

/// The full tag (and index tag) of `flavour` on `parent`: the flavour's name ends the published
/// tag (`…-runtime-debian12-jupyter`), before a per-platform image's `-amd64`.
pub(crate) fn flavour_tags(parent: &ImageSpec, flavour: &str) -> (String, Option<String>) {
    match &parent.index {
        Some(index) => {
            let platform_suffix = parent.tag.strip_prefix(index.as_str()).unwrap_or_default();
            let flavour_index = format!("{index}-{flavour}");
            (
                format!("{flavour_index}{platform_suffix}"),
                Some(flavour_index),
            )
        }
        None => (format!("{}-{flavour}", parent.tag), None),
    }
}

fn flavour_image(
    parent: &ImageSpec,
    flavour: &Flavour,
    matrix: &Matrix,
    options: &ResolveOptions,
) -> ImageSpec {
    let (tag, index) = flavour_tags(parent, &flavour.name);
    let reference = format!("{}:{}", parent.repository, parent.tag);
    let mut image = ImageSpec {
        // The folder leaves out the tag's revision and date, as every image's does.
        name: tags::folder_name(&tag),
        tag,
        index,
        aliases: Vec::new(),
        base_image: reference.clone(),
        base_image_id: None,
        parent: Some(parent.name.clone()),
        // Set with the parent's filled tag, once the manifest decided its revision.
        parent_tag: None,
        // The flavour's own packages are in `flavour.pip`; the runtime's requirements stay its.
        requirements: Vec::new(),
        lock: None,
        lock_digest: None,
        toolkit: None,
        // What the runtime image installed stays; the user, working folder, labels and the
        // team's indexes (its lock names their packages) carry over.
        extensions: parent.extensions.beyond(&parent.extensions),
        flavour: Some(flavour.clone()),
        // Said once, of the runtime image, whose knowledge the flavour shares.
        unverified: Vec::new(),
        fingerprint: Digest::of(b""),
        inputs: BTreeMap::new(),
        ..parent.clone()
    };
    if let Some(parent_lock) = &parent.lock {
        let mut extras = parent_lock.extras.clone();
        for item in &flavour.pip {
            if !extras.contains(item) {
                extras.push(item.clone());
            }
        }
        image.lock = Some(
            LockSpec::new(
                parent_lock.requirements.clone(),
                cuda_line_constraints(&parent.cuda),
                parent.pip.clone(),
                &parent.python,
                parent_lock.python_platform.clone(),
                Some(ParentLock {
                    image: parent.name.clone(),
                    digest: options.locks.get(&parent.name).cloned(),
                }),
            )
            .with_extras(extras, parent_lock.extra_indexes.clone()),
        );
        image.lock_digest = options.locks.get(&image.name).cloned();
    }
    let mut inputs: BTreeMap<String, String> = BTreeMap::new();
    let mut insert = |key: &str, value: String| {
        inputs.insert(key.to_string(), value);
    };
    insert("variant", format!("{} flavour", parent.variant));
    insert("platform", parent.platform.to_string());
    insert("base_image", reference);
    insert("parent_fingerprint", parent.fingerprint.to_string());
    insert(
        "lock",
        match (&image.lock, &image.lock_digest) {
            (None, _) => "none".to_string(),
            (Some(_), None) => "missing".to_string(),
            (Some(_), Some(digest)) => digest.to_string(),
        },
    );
    insert(
        "apt_mirrors",
        parent
            .apt_rewrites
            .iter()
            .map(|rewrite| format!("{}\n", rewrite.expression))
            .collect(),
    );
    insert(
        "labels",
        matrix
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect(),
    );
    insert("templates", options.template_digest.clone());
    inputs.extend(flavour.fingerprint_inputs());
    if let Some(steps) = &flavour.steps {
        inputs.insert(
            "flavour.steps".to_string(),
            format!(
                "{steps} {}",
                options
                    .fragments
                    .get(steps)
                    .map(Digest::as_str)
                    .unwrap_or("unread")
            ),
        );
    }
    inputs.extend(extension_inputs(&image.extensions, options));
    image.fingerprint = fingerprint(&inputs);
    image.inputs = inputs;
    image
}

/// The aliases of flavour images: their runtime image's, each with `-<flavour>` (`latest` →
/// `latest-jupyter`), so a flavour follows its runtime image's moves.
pub(super) fn assign_flavour_aliases(images: &mut [ImageSpec]) {
    let aliases_of: BTreeMap<String, Vec<String>> = images
        .iter()
        .filter(|image| image.flavour.is_none())
        .map(|image| (image.name.clone(), image.aliases.clone()))
        .collect();
    for image in images.iter_mut() {
        let (Some(flavour), Some(parent)) = (&image.flavour, &image.parent) else {
            continue;
        };
        image.aliases = aliases_of
            .get(parent)
            .map(|aliases| {
                aliases
                    .iter()
                    .map(|alias| format!("{alias}-{}", flavour.name))
                    .collect()
            })
            .unwrap_or_default();
    }
}
