//! Where a `wheels: host` venv's files go among an image's layers (issue 48): cut along the
//! wheels, so that a layer's bytes depend only on the wheels it holds and a rolling upgrade pulls
//! only what changed. Pure: wheel file names and sizes in, units out.
//!
//! **The rule.** A wheel of [`OWN_LAYER_MIN_BYTES`] or more (its file, compressed) gets a layer of
//! its own, the [`MOST_OWN_LAYERS`] largest at most: torch, triton and the large `nvidia-*`
//! libraries of a CUDA image. Every other wheel goes into one of [`GROUPS`] groups chosen by a
//! hash of its project name (PEP 503 normalized), not its version: bumping `einops` changes the
//! one group that holds it, and adding a package changes one group. A wheel with Python sources
//! has a second layer, its bytecode and its RECORD (which lists the `.pyc` files): those depend on
//! the image's interpreter, the files do not. Every layer's files carry one fixed time
//! ([`VENV_EPOCH`]), never the base's, and each layer holds every folder above its files.
//!
//! **The order.** Docker Engine's layer store (overlay2, fuse-overlayfs: the graph drivers) keys a
//! layer by its chain, the layers under it and its own: a node reuses the layers of an image it
//! holds up to the first that differs, and pulls every layer above it again, however many it holds
//! elsewhere (moby `distribution/xfer/download.go`). containerd's store keys blobs by digest alone.
//! So the layers go from the least likely to change to the most: the large wheels' files first,
//! below the base (the venv's files need nothing of the base: they are files under `/opt/venv`),
//! then their bytecode (which changes only with the interpreter's bytecode, not with the base's
//! time: the sources it records carry [`VENV_EPOCH`]), then the base and the Docker build's
//! layers, then the groups' files and bytecode, then what host-venv.sh wrote (the loader cache)
//! and the lock. A rebuilt base is pulled with what lies above it, never the large wheels nor
//! their bytecode; a bumped small package pulls its group and what lies above it, a few
//! megabytes.
//!
//! **The limit.** Docker refuses an image of more than [`DOCKER_LAYER_LIMIT`] layers ("max depth
//! exceeded": overlay's lower-directory limit). The venv takes at most
//! `2 × (MOST_OWN_LAYERS + GROUPS) + 1` = 65 of them, leaving 62 for the base, the build and the
//! flavours built on the image; the image is checked when it is put together.

use crate::model::axes::VenvLayers;
pub(crate) use crate::model::venv_holds::GROUPS;
use crate::model::venv_holds::{group_of, unit_name};

/// The time of every file of the venv's wheel layers (1980-01-01T00:00:00Z, the earliest time a
/// zip archive, and so a wheel, can hold): the same in every image and every build, where the
/// image's own epoch (its base's `created`) would make the same wheel's layer differ between bases.
/// Also the sources' time byte-compiling reads, so each `.pyc` records it.
pub(crate) const VENV_EPOCH: u64 = 315_532_800;

/// A wheel of this size or more (its file) gets a layer of its own.
pub(crate) const OWN_LAYER_MIN_BYTES: u64 = 16 << 20;

/// At most this many wheels get a layer of their own (the largest first).
pub(crate) const MOST_OWN_LAYERS: usize = 24;

/// The most layers Docker Engine runs an image of.
pub(crate) const DOCKER_LAYER_LIMIT: usize = 127;

/// A wheel to place: its file name and its file's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WheelFile {
    pub(crate) file_name: String,
    pub(crate) size: u64,
}

/// Where a unit's layers go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Its files below the base, and below the base too, after every such unit's files, its
    /// bytecode.
    Below,
    /// Files and bytecode above the Docker build's layers.
    Above,
}

/// The wheels of one layer (and of its bytecode layer, where they have sources).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unit {
    /// Indexes into the wheels given to [`cut`], in file-name order.
    pub(crate) wheels: Vec<usize>,
    pub(crate) place: Place,
    /// What the layer holds (`model::venv_holds::unit_name`), for the image's history and the
    /// manifest: `torch-2.13.0-….whl`, `group 3 of 8: einops-0.8.1-py3-none-any.whl, …`.
    pub(crate) holds: String,
}

/// The units of `wheels` under `layout`: the own-layer units (by file name) and then the groups
/// (by number), each group's wheels by file name.
pub(crate) fn cut(wheels: &[WheelFile], layout: VenvLayers) -> Vec<Unit> {
    let mut by_name: Vec<usize> = (0..wheels.len()).collect();
    by_name.sort_by(|&a, &b| wheels[a].file_name.cmp(&wheels[b].file_name));
    if layout == VenvLayers::One {
        if by_name.is_empty() {
            return Vec::new();
        }
        let names: Vec<&str> = by_name
            .iter()
            .map(|&index| wheels[index].file_name.as_str())
            .collect();
        return vec![Unit {
            holds: unit_name(None, &names),
            wheels: by_name,
            place: Place::Above,
        }];
    }
    let mut large: Vec<usize> = by_name
        .iter()
        .copied()
        .filter(|&index| wheels[index].size >= OWN_LAYER_MIN_BYTES)
        .collect();
    // The largest keep their own layer where there are too many; ties by name.
    large.sort_by(|&a, &b| {
        wheels[b]
            .size
            .cmp(&wheels[a].size)
            .then_with(|| wheels[a].file_name.cmp(&wheels[b].file_name))
    });
    large.truncate(MOST_OWN_LAYERS);
    large.sort_by(|&a, &b| wheels[a].file_name.cmp(&wheels[b].file_name));
    let mut units: Vec<Unit> = large
        .iter()
        .map(|&index| Unit {
            wheels: vec![index],
            place: Place::Below,
            holds: wheels[index].file_name.clone(),
        })
        .collect();
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); GROUPS];
    for &index in &by_name {
        if !large.contains(&index) {
            groups[group_of(project_of(&wheels[index].file_name))].push(index);
        }
    }
    for (number, members) in groups.into_iter().enumerate() {
        if members.is_empty() {
            continue;
        }
        let names: Vec<&str> = members
            .iter()
            .map(|&index| wheels[index].file_name.as_str())
            .collect();
        units.push(Unit {
            holds: unit_name(Some(number), &names),
            wheels: members,
            place: Place::Above,
        });
    }
    units
}

/// What of `layout` decides the venv's layers, for its key (`wheel_install::venv_wheels_key`):
/// the layout, the rule's figures and the files' time.
pub(crate) fn layout_key(layout: VenvLayers) -> String {
    format!(
        "{layout:?} own {OWN_LAYER_MIN_BYTES} most {MOST_OWN_LAYERS} groups {GROUPS} epoch {VENV_EPOCH}"
    )
}

/// The project part of a wheel's file name (`{name}-{version}-…`).
fn project_of(file_name: &str) -> &str {
    file_name.split('-').next().unwrap_or(file_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel(file_name: &str, size: u64) -> WheelFile {
        WheelFile {
            file_name: file_name.into(),
            size,
        }
    }

    fn cuda_image(einops: &str) -> Vec<WheelFile> {
        vec![
            wheel(
                "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                900 << 20,
            ),
            wheel(einops, 70 << 10),
            wheel(
                "nvidia_cudnn_cu13-9.20.0.48-py3-none-manylinux_2_27_x86_64.whl",
                700 << 20,
            ),
            wheel("sympy-1.14.0-py3-none-any.whl", 6 << 20),
            wheel(
                "nvidia_nvtx-13.0.85-py3-none-manylinux_2_27_x86_64.whl",
                150 << 10,
            ),
            wheel(
                "triton-3.6.0-cp311-cp311-manylinux_2_27_x86_64.whl",
                180 << 20,
            ),
            wheel("filelock-3.20.0-py3-none-any.whl", 16 << 10),
        ]
    }

    fn holds(units: &[Unit]) -> Vec<(Place, String)> {
        units
            .iter()
            .map(|unit| (unit.place, unit.holds.clone()))
            .collect()
    }

    #[test]
    fn large_wheels_get_a_layer_each_below_and_the_rest_go_into_groups_above() {
        let wheels = cuda_image("einops-0.8.0-py3-none-any.whl");
        let units = cut(&wheels, VenvLayers::Wheels);
        let own: Vec<&str> = units
            .iter()
            .filter(|unit| unit.place == Place::Below)
            .map(|unit| unit.holds.as_str())
            .collect();
        assert_eq!(
            own,
            [
                "nvidia_cudnn_cu13-9.20.0.48-py3-none-manylinux_2_27_x86_64.whl",
                "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                "triton-3.6.0-cp311-cp311-manylinux_2_27_x86_64.whl",
            ],
            "by name"
        );
        let grouped: usize = units
            .iter()
            .filter(|unit| unit.place == Place::Above)
            .map(|unit| unit.wheels.len())
            .sum();
        assert_eq!(grouped, 4, "every small wheel is in a group");
        let mut seen: Vec<usize> = units.iter().flat_map(|unit| unit.wheels.clone()).collect();
        seen.sort();
        assert_eq!(
            seen,
            (0..wheels.len()).collect::<Vec<_>>(),
            "each wheel once"
        );
        for unit in units.iter().filter(|unit| unit.place == Place::Above) {
            assert!(unit.holds.starts_with("group "), "{}", unit.holds);
        }
    }

    #[test]
    fn a_bumped_small_wheel_changes_only_its_own_group() {
        let before = cut(
            &cuda_image("einops-0.8.0-py3-none-any.whl"),
            VenvLayers::Wheels,
        );
        let after = cut(
            &cuda_image("einops-0.8.1-py3-none-any.whl"),
            VenvLayers::Wheels,
        );
        assert_eq!(before.len(), after.len());
        let changed: Vec<(String, String)> = holds(&before)
            .into_iter()
            .zip(holds(&after))
            .filter(|(old, new)| old != new)
            .map(|((_, old), (_, new))| (old, new))
            .collect();
        assert_eq!(changed.len(), 1, "one unit changed: {changed:?}");
        assert!(changed[0].1.contains("einops-0.8.1"), "{changed:?}");
        assert_eq!(
            group_of(project_of("einops-0.8.0-py3-none-any.whl")),
            group_of(project_of("Einops-0.9.0-py3-none-any.whl")),
            "the group follows the name, not the version"
        );
    }

    #[test]
    fn too_many_large_wheels_keep_the_largest_apart_and_group_the_rest() {
        let wheels: Vec<WheelFile> = (0..MOST_OWN_LAYERS + 5)
            .map(|number| {
                wheel(
                    &format!("big{number:02}-1.0-py3-none-any.whl"),
                    (20 + number as u64) << 20,
                )
            })
            .collect();
        let units = cut(&wheels, VenvLayers::Wheels);
        let own = units
            .iter()
            .filter(|unit| unit.place == Place::Below)
            .count();
        assert_eq!(own, MOST_OWN_LAYERS);
        assert!(
            !units
                .iter()
                .any(|unit| unit.place == Place::Below && unit.holds.starts_with("big00-")),
            "the smallest of the large wheels goes into a group"
        );
        assert!(units.len() <= MOST_OWN_LAYERS + GROUPS);
    }

    #[test]
    fn one_layer_holds_every_wheel_above_the_build() {
        let units = cut(
            &cuda_image("einops-0.8.0-py3-none-any.whl"),
            VenvLayers::One,
        );
        assert_eq!(units.len(), 1);
        assert_eq!(units[0].wheels.len(), 7);
        assert_eq!(units[0].place, Place::Above);
        assert!(cut(&[], VenvLayers::One).is_empty());
        assert!(cut(&[], VenvLayers::Wheels).is_empty());
    }
}
