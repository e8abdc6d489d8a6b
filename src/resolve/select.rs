//! Which images a run acts on: `--only` (a full tag, an alias, an index tag, or part of a tag)
//! and `--shard I/N` (whole families, round-robin), with the runtime parents selected devel
//! images need, parents first. Pure, over image specs: `build`, `lock` and the CI generators
//! select the same way.

use std::collections::{BTreeMap, BTreeSet};

use crate::resolve::image::ImageSpec;
use crate::resolve::lookup::{closest_names, named_images, without_repository};

/// `--shard I/N`: this runner builds the I-th of N deterministic parts (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shard {
    pub(crate) index: usize,
    pub(crate) count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || format!("--shard {text:?}: write I/N with 1 ≤ I ≤ N, e.g. 2/4");
        let (index, count) = text.split_once('/').ok_or_else(error)?;
        let index: usize = index.trim().parse().map_err(|_| error())?;
        let count: usize = count.trim().parse().map_err(|_| error())?;
        if count == 0 || index == 0 || index > count {
            return Err(error());
        }
        Ok(Shard { index, count })
    }
}

/// Selects images by `only` and `shard`, adds the runtime parents that selected devel images
/// need, and orders parents first. `only` names images as `k8s` does (a full tag, an alias, an
/// index tag, with or without `repository:`), or matches full tags as a substring or a `*` glob.
///
/// Shards split whole families (a runtime image and the devel images on it), round-robin over the
/// families sorted by name, so every shard's work is self-contained and the split is the same on
/// every runner.
pub(crate) fn select(
    specs: &[ImageSpec],
    only: Option<&str>,
    shard: Option<Shard>,
) -> Vec<ImageSpec> {
    // A family is a root image and everything built on it, however deep (a devel image, a
    // flavour, a flavour FROM devel): one shard builds it all, parents first.
    let parent_of: BTreeMap<&str, &str> = specs
        .iter()
        .filter_map(|spec| Some((spec.name.as_str(), spec.parent.as_deref()?)))
        .collect();
    let root_of = |name: &str| -> String {
        let mut name = name;
        // Bounded: a parent chain is at most as long as the list of images.
        for _ in 0..specs.len() {
            match parent_of.get(name) {
                Some(parent) => name = parent,
                None => break,
            }
        }
        name.to_string()
    };
    let family_of = |spec: &ImageSpec| root_of(&spec.name);
    let families: BTreeSet<String> = specs.iter().map(family_of).collect();
    let in_shard: BTreeSet<String> = match shard {
        None => families,
        Some(shard) => families
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % shard.count == shard.index - 1)
            .map(|(_, f)| f)
            .collect(),
    };
    let mut wanted: BTreeSet<String> = specs
        .iter()
        .filter(|spec| in_shard.contains(&family_of(spec)))
        .filter(|spec| only.is_none_or(|pattern| only_matches(specs, pattern, spec)))
        .map(|spec| spec.name.clone())
        .collect();
    // Every parent of a wanted image, up to its root (a devel flavour needs its devel image and
    // that one's runtime image).
    let mut ancestors: Vec<String> = Vec::new();
    for name in &wanted {
        let mut name = name.as_str();
        while let Some(parent) = parent_of.get(name) {
            if ancestors.iter().any(|known| known == parent) {
                break;
            }
            ancestors.push(parent.to_string());
            name = parent;
        }
    }
    wanted.extend(ancestors);
    // Parents first (by depth); otherwise keep the resolver's order.
    let depth = |spec: &ImageSpec| {
        let mut depth = 0;
        let mut name = spec.name.as_str();
        while let Some(parent) = parent_of.get(name) {
            depth += 1;
            name = parent;
            if depth > specs.len() {
                break;
            }
        }
        depth
    };
    let mut selected: Vec<ImageSpec> = specs
        .iter()
        .filter(|s| wanted.contains(&s.name))
        .cloned()
        .collect();
    selected.sort_by_key(depth);
    selected
}

/// Whether `--only pattern` selects `spec`. A name (a full tag, an index tag or an alias, as
/// `k8s` takes them, or an image's folder in `images/`) selects the images it names and no other:
/// a runtime image's full tag is also the start of its flavours' tags, and selects none of them
/// (a flavour is selected by its own tag). Anything else is part of a full tag or a `*` glob,
/// matched against every image's full tag (its revision and date filled), index tag and folder.
fn only_matches(specs: &[ImageSpec], pattern: &str, spec: &ImageSpec) -> bool {
    let bare = without_repository(specs, pattern);
    let mut named = named_images(specs, pattern);
    if named.is_empty() {
        named = specs.iter().filter(|image| image.name == bare).collect();
    }
    if !named.is_empty() {
        return named.iter().any(|image| image.name == spec.name);
    }
    std::iter::once(&spec.tag)
        .chain(spec.index.as_ref())
        .chain(std::iter::once(&spec.name))
        .any(|text| matches_filter(bare, text))
}

/// Why a build selected nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SelectError {
    #[error("--platform {platform}: the matrix makes no image for it (it makes {available})")]
    NoImageForPlatform { platform: String, available: String },
    #[error("--only {only:?} names no image of the matrix\nhint: closest tags and aliases: {}; `--only` takes a full tag, an alias, or part of a tag (`*` matches anything); `imagegen resolve` lists them all", closest.join(", "))]
    NoMatch { only: String, closest: Vec<String> },
    #[error("--only {only:?} selects {matched}, but none of them is in shard {shard}\nhint: drop --shard, or use the shard that holds it")]
    NotInShard {
        only: String,
        matched: String,
        shard: String,
    },
    #[error("the matrix makes no image to build")]
    NoImages,
    #[error("shard {shard} has no image: the matrix makes {families} image famil{} (a runtime image and the devel images on it), and shards deal whole families\nhint: use at most {families} shards (`imagegen ci --format github --shards N` leaves out empty ones)", if *families == 1 { "y" } else { "ies" })]
    EmptyShard { shard: String, families: usize },
}

/// The images one `imagegen build` builds: those of `platform` (all when `None`), then
/// [`select`]ed by `only` and `shard`. Selecting nothing is an error, never an empty build.
pub(crate) fn select_for_build(
    specs: &[ImageSpec],
    only: Option<&str>,
    shard: Option<Shard>,
    platform: Option<&str>,
) -> Result<Vec<ImageSpec>, SelectError> {
    let candidates: Vec<ImageSpec> = match platform {
        None => specs.to_vec(),
        Some(platform) => {
            let of_platform: Vec<ImageSpec> = specs
                .iter()
                .filter(|spec| spec.platform == platform)
                .cloned()
                .collect();
            if of_platform.is_empty() {
                let available: BTreeSet<&str> =
                    specs.iter().map(|spec| spec.platform.as_str()).collect();
                return Err(SelectError::NoImageForPlatform {
                    platform: platform.to_string(),
                    available: available.into_iter().collect::<Vec<_>>().join(", "),
                });
            }
            of_platform
        }
    };
    let selected = select(&candidates, only, shard);
    if !selected.is_empty() {
        return Ok(selected);
    }
    let shard_text = |shard: Shard| format!("{}/{}", shard.index, shard.count);
    match (only, shard) {
        (Some(pattern), shard) => {
            let everywhere = select(&candidates, Some(pattern), None);
            match (everywhere.is_empty(), shard) {
                (false, Some(shard)) => Err(SelectError::NotInShard {
                    only: pattern.to_string(),
                    matched: everywhere
                        .iter()
                        .map(|spec| spec.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    shard: shard_text(shard),
                }),
                _ => Err(no_match(&candidates, pattern)),
            }
        }
        (None, Some(shard)) => Err(SelectError::EmptyShard {
            shard: shard_text(shard),
            families: candidates
                .iter()
                .filter(|spec| spec.parent.is_none())
                .count(),
        }),
        (None, None) => Err(SelectError::NoImages),
    }
}

/// The images `only` names, alone: the matching of [`select`] and the error of
/// [`select_for_build`], without the runtime parents (for `lock`, which acts on each image by
/// itself and says when a devel image's runtime lock is missing).
pub(crate) fn select_named<'a>(
    specs: &'a [ImageSpec],
    only: Option<&str>,
) -> Result<Vec<&'a ImageSpec>, SelectError> {
    let Some(pattern) = only else {
        return Ok(specs.iter().collect());
    };
    let named: Vec<&ImageSpec> = specs
        .iter()
        .filter(|spec| only_matches(specs, pattern, spec))
        .collect();
    if named.is_empty() {
        return Err(no_match(specs, pattern));
    }
    Ok(named)
}

fn no_match(specs: &[ImageSpec], pattern: &str) -> SelectError {
    SelectError::NoMatch {
        only: pattern.to_string(),
        closest: closest_names(specs, pattern)
            .into_iter()
            .map(String::from)
            .collect(),
    }
}

/// `*` matches any run of characters; without `*` the pattern matches as a substring.
pub(crate) fn matches_filter(pattern: &str, name: &str) -> bool {
    if !pattern.contains('*') {
        return name.contains(pattern);
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let mut rest = name;
    for (index, part) in parts.iter().enumerate() {
        if index == 0 {
            match rest.strip_prefix(part) {
                Some(after) => rest = after,
                None => return false,
            }
        } else if index == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    rest.is_empty()
}
