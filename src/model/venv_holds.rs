//! What a layer of a `wheels: host` venv holds, as imagegen writes it into the image's history
//! and the manifest records it (`LayerRecord::holds`), and read back: the wheels (by file name,
//! each parsed as a wheel file name), the group, and whether it is their files, their bytecode or
//! what host-venv.sh wrote. The plan reads it to tell which layers of an alias's image an upgrade
//! keeps (`history::pull_cost`); `pipeline::venv_cut` writes it. Pure.

use std::str::FromStr;

use imagegen_python::WheelFilename;
use sha2::{Digest as _, Sha256};

/// The groups small wheels go into, by a hash of their name (`pipeline::venv_cut`).
pub(crate) const GROUPS: usize = 8;

/// The history entry of what host-venv.sh wrote besides bytecode.
pub(crate) const OTHERS_HOLDS: &str =
    "imagegen: what host-venv.sh wrote besides bytecode (the loader cache) in a container of the build (wheels: host)";

const FILES_END: &str = "RECORDs of wheels with sources apart (wheels: host)";
const COMPILED_START: &str = "imagegen: bytecode and RECORDs of ";

/// What a unit of wheels is called: a large wheel's file name, or `group 3 of 8: a.whl, b.whl`.
pub(crate) fn unit_name(group: Option<usize>, wheels: &[&str]) -> String {
    match group {
        Some(group) => format!("group {} of {GROUPS}: {}", group + 1, wheels.join(", ")),
        None => wheels.join(", "),
    }
}

/// The history entry of a unit's files' layer.
pub(crate) fn files_holds(unit: &str, prefix: &str, python: &str) -> String {
    format!("imagegen: {unit} installed into {prefix} (Python {python}) on the host, {FILES_END}")
}

/// The history entry of a unit's bytecode layer.
pub(crate) fn compiled_holds(unit: &str, prefix: &str, python: &str) -> String {
    format!(
        "{COMPILED_START}{unit} in {prefix} (Python {python}), byte-compiled by host-venv.sh in a container of the build (wheels: host)"
    )
}

/// A venv layer's history entry, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VenvHolds {
    /// The files of `wheels` (their bytecode apart).
    Files {
        group: Option<usize>,
        wheels: Vec<WheelFilename>,
    },
    /// The bytecode and RECORDs of `wheels`: made by the image's interpreter.
    Compiled {
        group: Option<usize>,
        wheels: Vec<WheelFilename>,
    },
    /// What host-venv.sh wrote besides: the loader cache, over every library of the image.
    Others,
}

/// `holds` read back, where it is a venv layer's; `None` for a layer of the base or the build
/// (or a text with a wheel name that does not parse).
pub(crate) fn parse(holds: &str) -> Option<VenvHolds> {
    if holds == OTHERS_HOLDS {
        return Some(VenvHolds::Others);
    }
    let (compiled, unit) = if let Some(rest) = holds.strip_prefix(COMPILED_START) {
        (true, rest.split(" in /").next()?)
    } else if holds.ends_with(FILES_END) {
        (
            false,
            holds
                .strip_prefix("imagegen: ")?
                .split(" installed into /")
                .next()?,
        )
    } else {
        return None;
    };
    let (group, list) = match unit.strip_prefix("group ") {
        Some(rest) => {
            let (number, list) = rest.split_once(": ")?;
            let number: usize = number.split(" of ").next()?.parse().ok()?;
            (Some(number.checked_sub(1)?), list)
        }
        None => (None, unit),
    };
    let wheels = list
        .split(", ")
        .map(|name| WheelFilename::from_str(name).ok())
        .collect::<Option<Vec<_>>>()?;
    Some(if compiled {
        VenvHolds::Compiled { group, wheels }
    } else {
        VenvHolds::Files { group, wheels }
    })
}

/// The group of a project: the first byte of the sha256 of its normalized name (PEP 503:
/// lowercased, runs of `-_.` as one `-`), modulo [`GROUPS`]. The name alone, so a new version
/// stays in its group.
pub(crate) fn group_of(project: &str) -> usize {
    let mut normalized = String::with_capacity(project.len());
    let mut separator = false;
    for character in project.chars() {
        if matches!(character, '-' | '_' | '.') {
            separator = true;
            continue;
        }
        if separator && !normalized.is_empty() {
            normalized.push('-');
        }
        separator = false;
        normalized.push(character.to_ascii_lowercase());
    }
    usize::from(Sha256::digest(normalized.as_bytes())[0]) % GROUPS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_layer_holds_is_read_back_as_it_was_written() {
        let torch = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl";
        let files = files_holds(&unit_name(None, &[torch]), "/opt/venv", "3.11");
        let Some(VenvHolds::Files {
            group: None,
            wheels,
        }) = parse(&files)
        else {
            panic!("{files}");
        };
        assert_eq!(wheels[0].as_str(), torch);
        let group = unit_name(
            Some(2),
            &[
                "einops-0.8.1-py3-none-any.whl",
                "filelock-3.20.0-py3-none-any.whl",
            ],
        );
        assert_eq!(
            group,
            "group 3 of 8: einops-0.8.1-py3-none-any.whl, filelock-3.20.0-py3-none-any.whl"
        );
        let compiled = compiled_holds(&group, "/opt/venv", "3.11");
        let Some(VenvHolds::Compiled {
            group: Some(2),
            wheels,
        }) = parse(&compiled)
        else {
            panic!("{compiled}");
        };
        assert_eq!(wheels.len(), 2);
        assert_eq!(parse(OTHERS_HOLDS), Some(VenvHolds::Others));
        for other in [
            "RUN /bin/sh -c apt-get install python3",
            "",
            "imagegen: not-a-wheel installed into /opt/venv (Python 3.11) on the host, RECORDs of wheels with sources apart (wheels: host)",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }

    #[test]
    fn a_project_keeps_its_group_whatever_its_version_or_spelling() {
        assert_eq!(group_of("einops"), group_of("Einops"));
        assert_eq!(group_of("typing_extensions"), group_of("typing-extensions"));
        assert_eq!(group_of("zope.interface"), group_of("zope-interface"));
        let groups: std::collections::BTreeSet<usize> = [
            "einops",
            "filelock",
            "sympy",
            "jinja2",
            "networkx",
            "fsspec",
            "mpmath",
            "markupsafe",
            "setuptools",
            "numpy",
        ]
        .iter()
        .map(|name| group_of(name))
        .collect();
        assert!(groups.len() > 3, "names spread over the groups: {groups:?}");
        assert!(groups.iter().all(|group| *group < GROUPS));
    }
}
