//! `imagegen bake`: the resolved matrix as a `docker-bake.json` for teams that build with BuildKit
//! (`docker buildx bake`) and remote builders instead of `imagegen build`. Pure: image specs in,
//! a JSON value out, with sorted keys, so the same matrix always gives the same bytes.
//!
//! One target per image. Bake target names allow only `[a-zA-Z0-9_-]`, so the image name's dots
//! become underscores (`2_7_1-cuda12_6-cudnn9-runtime-ubuntu24_04`). A devel target names its
//! runtime target in `contexts` under the exact reference its Dockerfile's `FROM` uses, so BuildKit
//! builds devel on the runtime target's result instead of pulling the runtime image.
//!
//! Each target builds its image's platform. With several platforms in the matrix, images are
//! per platform (`...-amd64`, `...-arm64`): a target pushes only that tag, since the full tag and
//! the aliases name the OCI image index of all platforms, which `imagegen publish` assembles
//! after the images passed their tests (two targets pushing one tag would overwrite each other).
//!
//! The build context: the rendered Dockerfiles `COPY` the image's lock (and CA bundle, libcuda
//! stub script) from `images/<name>/` and `gpu-selftest` from the main context, and the binary is
//! not in `images/<name>/` (it is built by `selftest/build.sh`, one per CUDA major). So each
//! target's context is a staging directory per image holding the files of `images/<name>/` and
//! `gpu-selftest` (`.imagegen/bake/<name>/`), and its `dockerfile` points back at
//! `images/<name>/Dockerfile` relative to that context (buildx joins the two). The command stages
//! those directories; this module only names them. It never touches Docker.
//!
//! The file is built as a [`BakeFile`] (`definition`), a typed mirror of buildx's own bake
//! definition, so it can only hold keys buildx knows.

pub(crate) mod definition;

use std::collections::{BTreeMap, BTreeSet};

pub use definition::{BakeFile, Group, Target};

use crate::model::axes::Variant;
use crate::resolve::image::ImageSpec;

/// Where `imagegen bake` stages one directory per image, relative to the bake file.
pub(crate) const STAGING_DIR: &str = ".imagegen/bake";

#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum BakeError {
    #[error("images {first} and {second} map to the same bake target name {target} (bake target names allow only letters, digits, '_' and '-')\nhint: make the full tags differ in more than '.' versus '_'")]
    TargetCollision {
        first: String,
        second: String,
        target: String,
    },
}

/// The bake target name of an image: its name with every character bake refuses turned into `_`.
pub(crate) fn target_name(image_name: &str) -> String {
    image_name
        .chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() || character == '-' || character == '_' {
                character
            } else {
                '_'
            }
        })
        .collect()
}

/// The staging directory (bake context) of the image `image_name`.
pub(crate) fn staging_context(image_name: &str) -> String {
    format!("{STAGING_DIR}/{image_name}")
}

/// A reference as BuildKit's Dockerfile frontend looks it up among named contexts: the familiar
/// form, without `docker.io/`, `library/` or a trailing `:latest`.
pub(crate) fn familiar_reference(reference: &str) -> String {
    let without_registry = reference.strip_prefix("docker.io/").unwrap_or(reference);
    let without_library = without_registry
        .strip_prefix("library/")
        .unwrap_or(without_registry);
    without_library
        .strip_suffix(":latest")
        .unwrap_or(without_library)
        .to_string()
}

/// The `docker-bake.json` for `images` (in resolver order; devel images name their runtime in
/// `parent`).
pub(crate) fn bake_file(images: &[ImageSpec]) -> Result<BakeFile, BakeError> {
    let mut target_of: BTreeMap<String, String> = BTreeMap::new();
    let mut image_of_target: BTreeMap<String, String> = BTreeMap::new();
    for image in images {
        let target = target_name(&image.name);
        if let Some(first) = image_of_target.insert(target.clone(), image.name.clone()) {
            return Err(BakeError::TargetCollision {
                first,
                second: image.name.clone(),
                target,
            });
        }
        target_of.insert(image.name.clone(), target);
    }
    // `../` once per component of the staging context, back to the bake file's directory.
    let back_to_root = "../".repeat(STAGING_DIR.split('/').count() + 1);

    let mut targets = BTreeMap::new();
    let mut runtime_targets = BTreeSet::new();
    let mut devel_targets = BTreeSet::new();
    let mut flavour_targets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for image in images {
        let target = target_of[&image.name].clone();
        let mut tags = vec![format!("{}:{}", image.repository, image.tag)];
        if image.index.is_none() {
            tags.extend(
                image
                    .aliases
                    .iter()
                    .map(|alias| format!("{}:{alias}", image.repository)),
            );
        }
        let labels = [
            (
                "imagegen.fingerprint".to_string(),
                Some(image.fingerprint.to_string()),
            ),
            ("imagegen.bake.target".to_string(), Some(target.clone())),
        ]
        .into();
        let mut body = Target {
            context: Some(staging_context(&image.name)),
            dockerfile: Some(format!("{back_to_root}images/{}/Dockerfile", image.name)),
            tags,
            labels,
            platforms: vec![image.platform.to_string()],
            ..Default::default()
        };
        match (&image.flavour, image.variant) {
            (Some(flavour), _) => {
                flavour_targets
                    .entry(flavour.name.clone())
                    .or_default()
                    .insert(target.clone());
            }
            (None, Variant::Runtime) => {
                runtime_targets.insert(target.clone());
            }
            (None, Variant::Devel) => {
                devel_targets.insert(target.clone());
            }
        }
        // Devel and flavour images build FROM their runtime image: bake builds it first.
        if let Some(parent_target) = image
            .parent
            .as_ref()
            .and_then(|parent| target_of.get(parent))
        {
            body.contexts.insert(
                familiar_reference(&image.base_image),
                format!("target:{parent_target}"),
            );
        }
        targets.insert(target, body);
    }
    let mut all: BTreeSet<String> = runtime_targets.union(&devel_targets).cloned().collect();
    for flavour in flavour_targets.values() {
        all.extend(flavour.iter().cloned());
    }
    let group = |targets: BTreeSet<String>| Group {
        description: None,
        targets: targets.into_iter().collect(),
    };
    let mut groups: BTreeMap<String, Group> = [
        ("default".to_string(), group(all)),
        ("runtime".to_string(), group(runtime_targets)),
        ("devel".to_string(), group(devel_targets)),
    ]
    .into();
    // One group per flavour (`docker buildx bake jupyter`), unless its name is taken.
    for (name, flavour) in flavour_targets {
        groups.entry(name).or_insert_with(|| group(flavour));
    }
    Ok(BakeFile {
        group: groups,
        target: targets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images() -> Vec<ImageSpec> {
        crate::resolve::test_images("registry: docker.io\nrepository: team/pytorch\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n")
    }

    #[test]
    fn target_names_keep_only_what_bake_accepts() {
        assert_eq!(
            target_name("2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04"),
            "2_7_1-cuda12_6-cudnn9-runtime-ubuntu24_04"
        );
    }

    #[test]
    fn familiar_references_drop_docker_hub_prefixes() {
        assert_eq!(
            familiar_reference("docker.io/library/ubuntu:latest"),
            "ubuntu"
        );
        assert_eq!(familiar_reference("docker.io/team/p:1"), "team/p:1");
        assert_eq!(
            familiar_reference("ghcr.io/team/p:2.7.1-runtime"),
            "ghcr.io/team/p:2.7.1-runtime"
        );
    }

    #[test]
    fn devel_builds_on_the_runtime_target_and_groups_split_variants() {
        let images = images();
        let bake = bake_file(&images).unwrap();
        let runtime = images
            .iter()
            .find(|i| i.variant == Variant::Runtime)
            .unwrap();
        let devel = images.iter().find(|i| i.variant == Variant::Devel).unwrap();
        let devel_target = &bake.target[&target_name(&devel.name)];
        assert_eq!(devel_target.contexts.len(), 1);
        // The Dockerfile says FROM docker.io/team/pytorch:...; BuildKit looks it up familiar.
        let key = format!("team/pytorch:{}", runtime.tag);
        assert_eq!(
            devel_target.contexts[&key],
            format!("target:{}", target_name(&runtime.name))
        );
        assert_eq!(bake.group["runtime"].targets, [target_name(&runtime.name)]);
        assert_eq!(bake.group["devel"].targets, [target_name(&devel.name)]);
        assert_eq!(bake.group["default"].targets.len(), 2);
        assert_eq!(
            devel_target.dockerfile,
            Some(format!("../../../images/{}/Dockerfile", devel.name))
        );
        assert_eq!(
            devel_target.context,
            Some(format!(".imagegen/bake/{}", devel.name))
        );
        assert_eq!(
            devel_target.labels["imagegen.fingerprint"].as_deref(),
            Some(devel.fingerprint.as_str())
        );
        let tags = &bake.target[&target_name(&runtime.name)].tags;
        assert_eq!(tags[0], format!("docker.io/team/pytorch:{}", runtime.tag));
        assert_eq!(tags.len(), 1 + runtime.aliases.len());
    }

    #[test]
    fn the_dockerfile_path_joined_with_the_context_is_the_rendered_dockerfile() {
        let images = images();
        assert_eq!(images.len(), 2, "a runtime and a devel image");
        let bake = bake_file(&images).unwrap();
        for image in &images {
            let target = &bake.target[&target_name(&image.name)];
            let joined = format!(
                "{}/{}",
                target.context.as_deref().unwrap(),
                target.dockerfile.as_deref().unwrap()
            );
            // Clean the path as buildx does (path.Join).
            let mut parts: Vec<&str> = Vec::new();
            for part in joined.split('/') {
                if part == ".." {
                    parts.pop();
                } else {
                    parts.push(part);
                }
            }
            assert_eq!(parts.join("/"), format!("images/{}/Dockerfile", image.name));
        }
    }

    #[test]
    fn per_platform_images_push_only_their_own_tag_for_their_platform() {
        let images = crate::resolve::test_images("registry: r.example\nrepository: team/pytorch\ntorch: [\"2.13\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nplatforms: [linux/amd64, linux/arm64]\n");
        assert!(images.iter().any(|i| i.platform == "linux/arm64"));
        let bake = bake_file(&images).unwrap();
        for image in &images {
            let target = &bake.target[&target_name(&image.name)];
            assert!(image.index.is_some());
            assert_eq!(target.platforms, [image.platform.to_string()]);
            assert_eq!(
                target.tags,
                [format!("r.example/team/pytorch:{}", image.tag)],
                "the index tag and aliases are not pushed per platform"
            );
            assert!(target.context.as_deref().unwrap().ends_with(&image.name));
        }
    }

    #[test]
    fn the_written_file_reads_back_through_the_bake_definition() {
        let bake = bake_file(&images()).unwrap();
        let text = bake.to_json();
        let read = BakeFile::from_json(&text).unwrap();
        assert_eq!(read, bake);
        assert_eq!(read.to_json(), text, "byte-identical when written again");
        // What buildx would refuse as an unsupported argument, the definition refuses too.
        let typo = text.replacen("\"platforms\"", "\"platform\"", 1);
        assert!(BakeFile::from_json(&typo)
            .unwrap_err()
            .to_string()
            .contains("unknown field `platform`"));
    }

    #[test]
    fn colliding_target_names_are_refused() {
        let mut images = images();
        let mut twin = images[0].clone();
        twin.name = twin.name.replace('.', "_");
        images.push(twin);
        assert!(matches!(
            bake_file(&images),
            Err(BakeError::TargetCollision { .. })
        ));
    }
}
