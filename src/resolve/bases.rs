//! What the base images' pins (`images/bases.lock`, `model::bases`) mean for the images. Pure:
//! what a Dockerfile's `FROM` says for a pinned base, which bases the images need and which of
//! them the pins lack, and how a fresh lookup compares with a pin (what moved, what vanished).
//! The lookups themselves (registry API, daemon) are `imagegen lock`'s.
//!
//! A registry pin goes into `FROM name:tag@sha256:…`: the tag stays for people, the digest
//! decides. A daemon pin leaves `FROM` as it is and `build` checks the image ID first. A re-pushed
//! tag does not move a pin: only `imagegen lock --bases` does, and it says what moved.

use std::collections::BTreeMap;
use std::str::FromStr;

use imagegen_oci::Reference;

pub(crate) use crate::model::bases::BasePin;
pub(crate) use crate::model::bases::{BasePins, BASES_FILE};
use crate::resolve::image::ImageSpec;

/// The base reference of a runtime image without the digest its pin added
/// (`nvidia/cuda:13.0.0-base-ubuntu24.04@sha256:…` → `nvidia/cuda:13.0.0-base-ubuntu24.04`);
/// `None` for a devel image (built on its runtime image, which imagegen builds) and `scratch`.
pub(crate) fn base_reference(image: &ImageSpec) -> Option<String> {
    if image.parent.is_some() || image.base_image == "scratch" {
        return None;
    }
    Some(match Reference::from_str(&image.base_image) {
        Ok(reference) => reference.without_digest(),
        // Not a reference by Docker's grammar: as written; looking it up then fails, naming it.
        Err(_) => image.base_image.clone(),
    })
}

/// What a Dockerfile's `FROM` names for `reference` with `pin`: the digest where a registry
/// serves it, the reference alone where only the daemon holds it (its ID is checked by `build`).
pub(crate) fn pinned_from(reference: &str, pin: Option<&BasePin>) -> String {
    match pin {
        Some(BasePin::Registry { digest, .. }) => format!("{reference}@{digest}"),
        _ => reference.to_string(),
    }
}

/// Every base reference the images are built on, once each, with the platforms asked of it.
pub(crate) fn bases_needed(images: &[ImageSpec]) -> BTreeMap<String, Vec<String>> {
    let mut needed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for image in images {
        if let Some(reference) = base_reference(image) {
            let platforms = needed.entry(reference).or_default();
            let platform = image.platform.as_str().to_string();
            if !platforms.contains(&platform) {
                platforms.push(platform);
            }
        }
    }
    needed
}

/// The bases the images need that `pins` lacks, and pinned indexes that lack a platform an image
/// needs, each as a sentence. Empty when there is no pins file at all (`pins` is `None`): pinning
/// starts with the first `imagegen lock` that reaches the bases.
pub(crate) fn pin_problems(images: &[ImageSpec], pins: Option<&BasePins>) -> Vec<String> {
    let Some(pins) = pins else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    for (reference, platforms) in bases_needed(images) {
        match pins.bases.get(&reference) {
            None => problems.push(format!("base {reference} is not pinned in {BASES_FILE}")),
            Some(BasePin::Registry {
                digest,
                platforms: pinned,
            }) if !pinned.is_empty() => {
                for platform in platforms {
                    if !pinned.keys().any(|key| platform_matches(key, &platform)) {
                        problems.push(format!(
                            "base {reference}@{digest} has no {platform} image (it has {})",
                            pinned.keys().cloned().collect::<Vec<_>>().join(", ")
                        ));
                    }
                }
            }
            Some(_) => {}
        }
    }
    problems
}

/// `linux/arm64/v8` serves `linux/arm64`; otherwise platforms match exactly.
fn platform_matches(pinned: &str, wanted: &str) -> bool {
    pinned == wanted
        || pinned
            .strip_prefix(wanted)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// What a fresh lookup found for one base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    Found(BasePin),
    /// The registry answers, and has no such tag (deleted, or never pushed).
    Vanished,
    /// Neither a registry nor the daemon could be asked: why.
    Unreachable(String),
}

/// How one base compares, after a lookup, with its pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BaseChange {
    /// Pinned for the first time.
    Pinned(BasePin),
    Unchanged(BasePin),
    /// The tag now names other bytes (re-pushed): from, to.
    Moved(BasePin, BasePin),
    /// The tag is gone; the pin (if any) is kept.
    Vanished(Option<BasePin>),
    /// Could not be asked; the pin (if any) is kept.
    Unreachable(Option<BasePin>, String),
}

impl BaseChange {
    /// The pin to keep after this change.
    pub(crate) fn kept(&self) -> Option<&BasePin> {
        match self {
            BaseChange::Pinned(pin) | BaseChange::Unchanged(pin) | BaseChange::Moved(_, pin) => {
                Some(pin)
            }
            BaseChange::Vanished(pin) | BaseChange::Unreachable(pin, _) => pin.as_ref(),
        }
    }

    /// One line for people, naming the base.
    pub(crate) fn describe(&self, reference: &str) -> String {
        match self {
            BaseChange::Pinned(pin) => format!("pinned {reference}: {}", pin.describe()),
            BaseChange::Unchanged(pin) => format!("unchanged {reference}: {}", pin.describe()),
            BaseChange::Moved(from, to) => format!(
                "moved {reference}: {} -> {} (the tag was re-pushed)",
                from.describe(),
                to.describe()
            ),
            BaseChange::Vanished(Some(pin)) => format!(
                "vanished {reference}: the registry no longer has this tag; the pin ({}) is kept, and builds go on from it while a registry serves it",
                pin.describe()
            ),
            BaseChange::Vanished(None) => {
                format!("vanished {reference}: the registry has no such tag, and nothing pins it")
            }
            BaseChange::Unreachable(Some(pin), why) => format!(
                "unchecked {reference}: {why}; the pin ({}) is kept",
                pin.describe()
            ),
            BaseChange::Unreachable(None, why) => format!("not pinned {reference}: {why}"),
        }
    }
}

/// Compares a lookup with the pin it may replace.
pub(crate) fn compare(pinned: Option<&BasePin>, lookup: Lookup) -> BaseChange {
    match (pinned, lookup) {
        (None, Lookup::Found(pin)) => BaseChange::Pinned(pin),
        (Some(old), Lookup::Found(new)) if old.id() == new.id() => BaseChange::Unchanged(new),
        (Some(old), Lookup::Found(new)) => BaseChange::Moved(old.clone(), new),
        (pinned, Lookup::Vanished) => BaseChange::Vanished(pinned.cloned()),
        (pinned, Lookup::Unreachable(why)) => BaseChange::Unreachable(pinned.cloned(), why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::digest::Digest;

    fn digest(byte: u8) -> Digest {
        Digest::of(&[byte])
    }

    fn registry(byte: u8) -> BasePin {
        BasePin::Registry {
            digest: digest(byte),
            platforms: BTreeMap::new(),
        }
    }

    #[test]
    fn a_registry_pin_goes_into_from_and_a_daemon_pin_does_not() {
        assert_eq!(
            pinned_from("x/y:1", Some(&registry(1))),
            format!("x/y:1@{}", digest(1))
        );
        let daemon = BasePin::Daemon {
            image_id: digest(1),
        };
        assert_eq!(pinned_from("x/y:1", Some(&daemon)), "x/y:1");
        assert_eq!(pinned_from("x/y:1", None), "x/y:1");
    }

    #[test]
    fn a_lookup_is_new_unchanged_moved_vanished_or_unreachable() {
        assert_eq!(
            compare(None, Lookup::Found(registry(1))),
            BaseChange::Pinned(registry(1))
        );
        assert_eq!(
            compare(Some(&registry(1)), Lookup::Found(registry(1))),
            BaseChange::Unchanged(registry(1))
        );
        let moved = compare(Some(&registry(1)), Lookup::Found(registry(2)));
        assert_eq!(moved, BaseChange::Moved(registry(1), registry(2)));
        assert_eq!(moved.kept(), Some(&registry(2)));
        let line = moved.describe("x/y:1");
        assert!(
            line.starts_with("moved x/y:1: registry digest sha256:"),
            "{line}"
        );
        let vanished = compare(Some(&registry(1)), Lookup::Vanished);
        assert_eq!(vanished.kept(), Some(&registry(1)), "the pin holds");
        assert!(vanished.describe("x/y:1").contains("vanished x/y:1"));
        let unreachable = compare(None, Lookup::Unreachable("no route".into()));
        assert_eq!(unreachable.kept(), None);
        assert_eq!(unreachable.describe("x/y:1"), "not pinned x/y:1: no route");
    }

    #[test]
    fn unpinned_bases_are_problems_only_once_the_images_are_pinned() {
        let images = crate::resolve::test_images(
            "registry: r.example\nrepository: team/pytorch\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime, devel]\n",
        );
        let needed = bases_needed(&images);
        assert_eq!(
            needed.keys().collect::<Vec<_>>(),
            ["nvidia/cuda:12.6.3-base-ubuntu24.04"],
            "a devel image's base is its runtime image"
        );
        assert!(pin_problems(&images, None).is_empty());
        let empty = BasePins::new(BTreeMap::new());
        assert_eq!(
            pin_problems(&images, Some(&empty)),
            ["base nvidia/cuda:12.6.3-base-ubuntu24.04 is not pinned in bases.lock"]
        );
        let arm_only = BasePins::new(BTreeMap::from([(
            "nvidia/cuda:12.6.3-base-ubuntu24.04".to_string(),
            BasePin::Registry {
                digest: digest(1),
                platforms: BTreeMap::from([("linux/arm64".to_string(), digest(2))]),
            },
        )]));
        assert!(platform_matches("linux/arm64/v8", "linux/arm64"));
        assert!(!platform_matches("linux/arm64", "linux/amd64"));
        let problems = pin_problems(&images, Some(&arm_only));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("has no linux/amd64 image (it has linux/arm64)"));
    }
}
