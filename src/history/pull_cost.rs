//! What an upgrade costs a node and the registry, from the layers the manifest records of each
//! image (`ImageSize::parts`): no registry round trip. Pure.
//!
//! A node running Docker Engine with a graph driver (overlay2, fuse-overlayfs) keeps a layer by
//! its chain, the layers under it and its own: pulling image B where it holds image A, it reuses
//! A's layers up to the first of B's that differs, and downloads every layer of B above that one
//! (moby `distribution/xfer/download.go`: once a layer is missing, the rest are fetched). A node
//! with containerd's content store (Kubernetes, Docker Engine's containerd image store) fetches
//! only the blobs whose digest it lacks. Both figures are given; the first is the one imagegen
//! orders the layers for (`pipeline::venv_cut`) and the one it prints.

use std::collections::{BTreeMap, BTreeSet};

use imagegen_python::{PackageName, Version};
use serde::Serialize;

use crate::history::manifest::{human_bytes, LayerRecord, Manifest};
use crate::history::upgrade::AliasMove;
use crate::model::venv_holds::{self, group_of, VenvHolds};
use crate::resolve::image::ImageSpec;

/// The inputs whose change reaches only the layers of a venv made on the host (`wheels: host`:
/// its wheels' layers and the last one, which holds the lock) or the image's config (labels,
/// environment), never the base's or the Docker build's layers.
pub(crate) const VENV_ONLY_INPUTS: &[&str] = &[
    "lock",
    "requirements",
    "pip_indexes",
    "wheel_index",
    "torch",
    "torchvision",
    "torchaudio",
    "driver_min",
    "require_cuda",
    "labels",
    "ext.pip",
    "ext.extra_indexes",
    "ext.labels",
];

/// The inputs whose change may change the image's Python, and so its bytecode. The base's image
/// ID is not among them: a base rebuilt for a security fix keeps its Python's bytecode, which the
/// layers' fixed source time makes the same bytes (where it does not, the estimate is low by the
/// bytecode's layers).
pub(crate) const INTERPRETER_INPUTS: &[&str] = &["python", "os", "platform", "base_image"];

/// What an image's lock pins: each package's version, by name.
pub(crate) type Pins = BTreeMap<PackageName, Version>;

/// The cost of moving a node from one image to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct PullCost {
    /// Bytes a Docker Engine node (graph driver) downloads: the layers above the common chain.
    pub(crate) pulled_bytes: u64,
    /// How many layers that is.
    pub(crate) pulled_layers: usize,
    /// Bytes a containerd node downloads: the layers whose digest it does not hold.
    pub(crate) by_digest_bytes: u64,
    /// The new image's compressed size and layer count.
    pub(crate) image_bytes: u64,
    pub(crate) image_layers: usize,
}

impl PullCost {
    /// `pulled_bytes` as a share of the image, in percent.
    pub(crate) fn percent(&self) -> f64 {
        if self.image_bytes == 0 {
            return 0.0;
        }
        100.0 * self.pulled_bytes as f64 / self.image_bytes as f64
    }
}

impl std::fmt::Display for PullCost {
    /// `41.2 MB of 3.10 GB (1.3%, 9 of 44 layers; containerd 12.0 MB)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} ({:.1}%, {} of {} layers; containerd {})",
            human_bytes(self.pulled_bytes),
            human_bytes(self.image_bytes),
            self.percent(),
            self.pulled_layers,
            self.image_layers,
            human_bytes(self.by_digest_bytes)
        )
    }
}

/// What a node holding the image of `held` layers pulls for the image of `new` layers.
pub(crate) fn pull_cost(held: &[LayerRecord], new: &[LayerRecord]) -> PullCost {
    let common = held
        .iter()
        .zip(new)
        .take_while(|(held, new)| held.digest == new.digest)
        .count();
    let above = &new[common..];
    let held_digests: BTreeSet<&str> = held.iter().map(|layer| layer.digest.as_str()).collect();
    let mut fetched = BTreeSet::new();
    let by_digest_bytes = new
        .iter()
        .filter(|layer| !held_digests.contains(layer.digest.as_str()))
        .filter(|layer| fetched.insert(layer.digest.as_str()))
        .map(|layer| layer.compressed_bytes)
        .sum();
    PullCost {
        pulled_bytes: above.iter().map(|layer| layer.compressed_bytes).sum(),
        pulled_layers: above.len(),
        by_digest_bytes,
        image_bytes: new.iter().map(|layer| layer.compressed_bytes).sum(),
        image_layers: new.len(),
    }
}

/// Bytes of `new`'s layers that none of `held` holds (each blob once): what pushing it adds to a
/// registry that holds the images of `held`.
pub(crate) fn new_to_registry<'a>(
    held: impl IntoIterator<Item = &'a [LayerRecord]>,
    new: &[LayerRecord],
) -> u64 {
    let held: BTreeSet<&str> = held
        .into_iter()
        .flatten()
        .map(|layer| layer.digest.as_str())
        .collect();
    let mut sent = BTreeSet::new();
    new.iter()
        .filter(|layer| !held.contains(layer.digest.as_str()))
        .filter(|layer| sent.insert(layer.digest.as_str()))
        .map(|layer| layer.compressed_bytes)
        .sum()
}

/// What a node holding the image of `held` layers will pull for an image not built yet, as far
/// as the plan can tell: a layer of `held` stays where nothing it holds changes. A venv layer's
/// wheels (read back from what it holds) must all be pinned at the same version in the new lock
/// (`pins`), and a group must hold the same packages; the base's and the build's layers stay
/// where only [`VENV_ONLY_INPUTS`] changed (`changed`) and the image makes its venv on the host;
/// a bytecode layer where also none of [`INTERPRETER_INPUTS`] changed; the last layer (the loader
/// cache and the lock) changes with any input. The new layers' sizes
/// are taken as the old ones': an estimate, which the plan says.
pub(crate) fn estimated_pull(held: &[LayerRecord], changed: &[String], pins: &Pins) -> PullCost {
    let parsed: Vec<Option<VenvHolds>> = held
        .iter()
        .map(|layer| venv_holds::parse(&layer.holds))
        .collect();
    let host_venv = parsed.iter().any(Option::is_some);
    let build_same = changed.is_empty()
        || (host_venv
            && changed
                .iter()
                .all(|input| VENV_ONLY_INPUTS.contains(&input.as_str())));
    let interpreter_same = !changed
        .iter()
        .any(|input| INTERPRETER_INPUTS.contains(&input.as_str()));
    // The packages with a layer of their own stay out of the groups.
    let own: BTreeSet<&PackageName> = parsed
        .iter()
        .filter_map(|holds| match holds {
            Some(VenvHolds::Files {
                group: None,
                wheels,
            }) => Some(wheels.iter().map(|wheel| wheel.name())),
            _ => None,
        })
        .flatten()
        .collect();
    let pinned_same = |wheels: &[imagegen_python::WheelFilename]| {
        wheels
            .iter()
            .all(|wheel| pins.get(wheel.name()) == Some(wheel.version()))
    };
    let group_same = |group: Option<usize>, wheels: &[imagegen_python::WheelFilename]| match group {
        None => true,
        Some(group) => {
            let recorded: BTreeSet<&PackageName> =
                wheels.iter().map(|wheel| wheel.name()).collect();
            let pinned: BTreeSet<&PackageName> = pins
                .keys()
                .filter(|name| !own.contains(name) && group_of(name.as_ref()) == group)
                .collect();
            recorded == pinned
        }
    };
    let same: Vec<bool> = parsed
        .iter()
        .map(|holds| match holds {
            None => build_same,
            Some(VenvHolds::Others) => changed.is_empty(),
            Some(VenvHolds::Files { group, wheels }) => {
                pinned_same(wheels) && group_same(*group, wheels)
            }
            Some(VenvHolds::Compiled { group, wheels }) => {
                interpreter_same && pinned_same(wheels) && group_same(*group, wheels)
            }
        })
        .collect();
    let common = same.iter().take_while(|same| **same).count();
    let above = &held[common..];
    PullCost {
        pulled_bytes: above.iter().map(|layer| layer.compressed_bytes).sum(),
        pulled_layers: above.len(),
        by_digest_bytes: held
            .iter()
            .zip(&same)
            .filter(|(_, same)| !**same)
            .map(|(layer, _)| layer.compressed_bytes)
            .sum(),
        image_bytes: held.iter().map(|layer| layer.compressed_bytes).sum(),
        image_layers: held.len(),
    }
}

/// What moving one alias costs a node that runs its current image.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AliasPull {
    pub(crate) alias: String,
    pub(crate) from_tag: String,
    pub(crate) to_tag: String,
    /// `None` where the records lack their layers (written before imagegen recorded them).
    pub(crate) cost: Option<PullCost>,
    /// Estimated before the build ([`estimated_pull`]), not computed from both images' layers.
    pub(crate) estimated: bool,
    /// Bytes the push adds to the registry: the new image's layers no recorded image holds
    /// (estimated as the layers that change where the image is not built yet).
    pub(crate) new_to_registry: Option<u64>,
}

impl AliasPull {
    /// `about 41.2 MB of 3.10 GB (1.3%, …)`, or why it is not known.
    pub(crate) fn describe(&self) -> String {
        match &self.cost {
            Some(cost) if self.estimated => format!("about {cost}"),
            Some(cost) => cost.to_string(),
            None => "unknown: the manifest records no layers of these images (written before issue 48; rebuilt images record them)".into(),
        }
    }
}

/// What each alias move of a plan costs a node holding the alias's current image: computed from
/// both images' recorded layers where the new one is recorded (`to_digest` known), else
/// estimated from the current image's layers, the inputs that changed and the new lock's pins
/// (`pins`, by image name). A new alias (no current image) costs nothing to compare with.
pub(crate) fn alias_pulls(
    moves: &[AliasMove],
    manifest: &Manifest,
    specs: &[ImageSpec],
    pins: &BTreeMap<String, Pins>,
) -> Vec<AliasPull> {
    let layers_of = |tag: &str| {
        manifest
            .images
            .get(tag)
            .and_then(|record| record.size.as_ref())
            .map(|size| size.parts.clone())
            .filter(|parts| !parts.is_empty())
    };
    let recorded: Vec<Vec<LayerRecord>> = manifest
        .images
        .values()
        .filter_map(|record| record.size.as_ref().map(|size| size.parts.clone()))
        .collect();
    moves
        .iter()
        .filter_map(|change| {
            let from_tag = change.from_tag.clone()?;
            let held = layers_of(&from_tag);
            let built = change
                .to_digest
                .as_ref()
                .and_then(|_| layers_of(&change.to_tag));
            let (cost, estimated, new_to_registry) = match (held, built) {
                (Some(held), Some(new)) => (
                    Some(pull_cost(&held, &new)),
                    false,
                    Some(new_to_registry(
                        recorded
                            .iter()
                            .filter(|parts| **parts != new)
                            .map(Vec::as_slice),
                        &new,
                    )),
                ),
                (Some(held), None) => {
                    let spec = specs.iter().find(|spec| spec.tag == change.to_tag)?;
                    let from = manifest.images.get(&from_tag)?;
                    let mut changed: Vec<String> = spec
                        .inputs
                        .iter()
                        .filter(|(key, value)| from.inputs.get(*key) != Some(*value))
                        .map(|(key, _)| key.clone())
                        .collect();
                    changed.extend(
                        from.inputs
                            .keys()
                            .filter(|key| !spec.inputs.contains_key(*key))
                            .cloned(),
                    );
                    let empty = Pins::new();
                    let cost =
                        estimated_pull(&held, &changed, pins.get(&spec.name).unwrap_or(&empty));
                    (Some(cost), true, Some(cost.by_digest_bytes))
                }
                _ => (None, false, None),
            };
            Some(AliasPull {
                alias: change.alias.clone(),
                from_tag,
                to_tag: change.to_tag.clone(),
                cost,
                estimated,
                new_to_registry,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layers(spec: &[(&str, u64)]) -> Vec<LayerRecord> {
        spec.iter()
            .map(|(digest, size)| LayerRecord {
                digest: format!("sha256:{digest}"),
                compressed_bytes: *size,
                holds: String::new(),
            })
            .collect()
    }

    fn venv_image(einops: &str) -> Vec<LayerRecord> {
        let torch = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl";
        let group = venv_holds::unit_name(
            Some(group_of("einops")),
            &[&format!("einops-{einops}-py3-none-any.whl")],
        );
        let holds = [
            (venv_holds::files_holds(torch, "/opt/venv", "3.11"), 2_000),
            (venv_holds::compiled_holds(torch, "/opt/venv", "3.11"), 40),
            ("the base".to_string(), 50),
            ("RUN /bin/sh -c apt-get install python3".to_string(), 30),
            (venv_holds::files_holds(&group, "/opt/venv", "3.11"), 3),
            (venv_holds::compiled_holds(&group, "/opt/venv", "3.11"), 2),
            (venv_holds::OTHERS_HOLDS.to_string(), 1),
        ];
        holds
            .into_iter()
            .enumerate()
            .map(|(number, (holds, size))| LayerRecord {
                digest: format!("sha256:{number}-{einops}"),
                compressed_bytes: size,
                holds,
            })
            .collect()
    }

    fn pins(spec: &[(&str, &str)]) -> Pins {
        spec.iter()
            .map(|(name, version)| {
                (
                    PackageName::new(name.to_string()).unwrap(),
                    version.parse().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn the_plan_estimates_that_a_bumped_package_pulls_its_group_and_what_lies_above() {
        let held = venv_image("0.8.0");
        let lock = |einops: &str| pins(&[("torch", "2.13.0"), ("einops", einops)]);
        let inputs = |names: &[&str]| {
            names
                .iter()
                .map(|name| name.to_string())
                .collect::<Vec<_>>()
        };
        // einops bumped: its group's two layers and the last one.
        let bumped = estimated_pull(&held, &inputs(&["lock"]), &lock("0.8.1"));
        assert_eq!((bumped.pulled_bytes, bumped.pulled_layers), (6, 3));
        assert_eq!(bumped.image_bytes, 2_126);
        // Nothing changed: nothing to pull.
        let same = estimated_pull(&held, &[], &lock("0.8.0"));
        assert_eq!(same.pulled_bytes, 0);
        // The base rebuilt (its image ID changed): the base and everything above it, never
        // torch's files nor its bytecode; on containerd the group's layers stay.
        let rebased = estimated_pull(&held, &inputs(&["base_image_id"]), &lock("0.8.0"));
        assert_eq!((rebased.pulled_bytes, rebased.pulled_layers), (86, 5));
        assert_eq!(rebased.by_digest_bytes, 81);
        // Another base (another Python, maybe): torch's bytecode too.
        let moved = estimated_pull(&held, &inputs(&["base_image"]), &lock("0.8.0"));
        assert_eq!((moved.pulled_bytes, moved.pulled_layers), (126, 6));
        // torch bumped: from its own layer up, everything.
        let torch = estimated_pull(
            &held,
            &inputs(&["lock", "torch"]),
            &pins(&[("torch", "2.13.1"), ("einops", "0.8.0")]),
        );
        assert_eq!(torch.pulled_bytes, 2_126);
        // A new package in einops's group changes the group.
        let name = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"]
            .into_iter()
            .find(|name| group_of(name) == group_of("einops"))
            .unwrap();
        let added = estimated_pull(
            &held,
            &inputs(&["lock"]),
            &pins(&[("torch", "2.13.0"), ("einops", "0.8.0"), (name, "1.0")]),
        );
        assert_eq!(added.pulled_layers, 3);
        // An image whose venv pip made in the build (no venv layers): a lock change changes
        // the build's layers.
        let plain: Vec<LayerRecord> = held
            .iter()
            .map(|layer| LayerRecord {
                holds: "RUN pip install".into(),
                ..layer.clone()
            })
            .collect();
        let cost = estimated_pull(&plain, &inputs(&["lock"]), &lock("0.8.1"));
        assert_eq!(cost.pulled_bytes, 2_126);
    }

    #[test]
    fn each_alias_move_of_a_plan_says_what_a_node_pulls() {
        use crate::history::manifest::ImageSize;
        use crate::history::upgrade::upgrade_plan;
        use crate::pipeline::record::test_support::{manifest_with, specs_for};
        let old = specs_for("2.7.1", "12.6");
        let tag = old[0].tag.clone();
        let mut manifest = manifest_with(&old, &[("latest", &tag)]);
        let parts = venv_image("0.8.0");
        manifest.images.get_mut(&tag).unwrap().size = Some(ImageSize {
            compressed_bytes: parts.iter().map(|part| part.compressed_bytes).sum(),
            unpacked_bytes: 0,
            layers: parts.len() as u32,
            parts,
        });
        // The lock changed (einops bumped): the image is rebuilt, `latest` moves to it.
        let mut new = old.clone();
        new[0].inputs.insert("lock".into(), "sha256:new".into());
        new[0].fingerprint = crate::model::digest::Digest::of(b"new inputs");
        let plan = upgrade_plan(&new, &manifest, &BTreeMap::new());
        let pins: BTreeMap<String, Pins> = [(
            new[0].name.clone(),
            pins(&[("torch", "2.13.0"), ("einops", "0.8.1")]),
        )]
        .into();
        let pulls = alias_pulls(&plan.alias_moves, &manifest, &new, &pins);
        let latest = pulls
            .iter()
            .find(|pull| pull.alias == "latest")
            .expect("latest moves");
        assert!(latest.estimated);
        assert_eq!(latest.cost.unwrap().pulled_bytes, 6);
        assert_eq!(latest.new_to_registry, Some(6));
        assert!(
            latest.describe().starts_with("about 6 B of 2.1 kB"),
            "{}",
            latest.describe()
        );
        // Without the layers recorded: unknown, and said so.
        let bare = manifest_with(&old, &[("latest", &tag)]);
        let pulls = alias_pulls(
            &upgrade_plan(&new, &bare, &BTreeMap::new()).alias_moves,
            &bare,
            &new,
            &pins,
        );
        let latest = pulls.iter().find(|pull| pull.alias == "latest").unwrap();
        assert!(latest.cost.is_none());
        assert!(latest
            .describe()
            .starts_with("unknown: the manifest records no layers"));
    }

    #[test]
    fn a_node_pulls_the_layers_above_the_first_that_differs() {
        let held = layers(&[
            ("torch", 900),
            ("base", 50),
            ("apt", 30),
            ("group1", 5),
            ("group2", 4),
            ("ld", 1),
        ]);
        // A small package bumped: its group and what lies above it.
        let bumped = layers(&[
            ("torch", 900),
            ("base", 50),
            ("apt", 30),
            ("group1", 5),
            ("group2b", 4),
            ("ld2", 1),
        ]);
        let cost = pull_cost(&held, &bumped);
        assert_eq!((cost.pulled_bytes, cost.pulled_layers), (5, 2));
        assert_eq!(cost.by_digest_bytes, 5);
        assert_eq!((cost.image_bytes, cost.image_layers), (990, 6));
        assert_eq!(
            cost.to_string(),
            "5 B of 990 B (0.5%, 2 of 6 layers; containerd 5 B)"
        );
        // A rebuilt base: everything above it on a graph-driver node, only the changed blobs
        // on containerd (here the build's layers changed with it).
        let rebased = layers(&[
            ("torch", 900),
            ("base2", 50),
            ("apt2", 30),
            ("group1", 5),
            ("group2", 4),
            ("ld", 1),
        ]);
        let cost = pull_cost(&held, &rebased);
        assert_eq!((cost.pulled_bytes, cost.pulled_layers), (90, 5));
        assert_eq!(cost.by_digest_bytes, 80);
        // The same image: nothing; a node holding nothing: everything.
        assert_eq!(pull_cost(&held, &held).pulled_bytes, 0);
        let fresh = pull_cost(&[], &held);
        assert_eq!((fresh.pulled_bytes, fresh.by_digest_bytes), (990, 990));
        assert_eq!(pull_cost(&[], &[]).percent(), 0.0);
    }

    #[test]
    fn the_registry_gains_only_blobs_it_does_not_hold() {
        let a = layers(&[("torch", 900), ("base", 50)]);
        let b = layers(&[("torch", 900), ("base2", 50), ("x", 3), ("x", 3)]);
        assert_eq!(new_to_registry([a.as_slice()], &b), 53);
        assert_eq!(new_to_registry([a.as_slice(), b.as_slice()], &b), 0);
        assert_eq!(new_to_registry(std::iter::empty(), &b), 953);
    }
}
