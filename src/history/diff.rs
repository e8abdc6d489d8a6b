//! What changed between two recorded images: their fields, their pip and OS packages by name,
//! and the crates of the binaries imagegen put into them (gpu-selftest). Pure.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::manifest::{ImageRecord, LayerRecord, Packages};
use crate::history::pull_cost::{new_to_registry, pull_cost, PullCost};
use crate::model::digest::Digest;

/// What changed between two recorded images.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub(crate) struct ImageDiff {
    pub(crate) fields: Vec<(String, String, String)>,
    pub(crate) pip: ListDiff,
    pub(crate) os: ListDiff,
    /// The crates of the recorded binaries, named `binary/crate` (`gpu-selftest/cudarc`).
    pub(crate) crates: ListDiff,
    /// The matrix's `labels` each image was built with (from its recorded inputs), by key.
    pub(crate) labels: ListDiff,
    /// What a node holding the first image pulls for the second, where both records hold their
    /// layers.
    pub(crate) pull: Option<PullCost>,
    /// Bytes of the second image's layers the first does not hold: what pushing it adds beside it.
    pub(crate) new_to_registry: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub(crate) struct ListDiff {
    pub(crate) added: Vec<String>,
    pub(crate) removed: Vec<String>,
    /// name, from version, to version
    pub(crate) changed: Vec<(String, String, String)>,
}

/// Compares package lists of `name==version` (pip) or `name=version` (dpkg) lines.
pub(crate) fn diff_lists(from: &[String], to: &[String]) -> ListDiff {
    let split = |line: &String| -> (String, String) {
        match line
            .split_once("==")
            .or_else(|| line.split_once('='))
            .or_else(|| line.split_once(" @ "))
        {
            Some((name, version)) => (name.to_string(), version.to_string()),
            None => (line.clone(), String::new()),
        }
    };
    let before: BTreeMap<String, String> = from.iter().map(split).collect();
    let after: BTreeMap<String, String> = to.iter().map(split).collect();
    let mut diff = ListDiff::default();
    for (name, version) in &after {
        match before.get(name) {
            None => diff
                .added
                .push(format!("{name} {version}").trim().to_string()),
            Some(old) if old != version => {
                diff.changed
                    .push((name.clone(), old.clone(), version.clone()))
            }
            _ => {}
        }
    }
    for (name, version) in &before {
        if !after.contains_key(name) {
            diff.removed
                .push(format!("{name} {version}").trim().to_string());
        }
    }
    diff
}

pub(crate) fn diff_records(from: &ImageRecord, to: &ImageRecord) -> ImageDiff {
    let fields = |r: &ImageRecord| -> Vec<(&'static str, String)> {
        vec![
            ("tag", r.tag.clone()),
            (
                "digest",
                r.digest.as_ref().map(Digest::to_string).unwrap_or_default(),
            ),
            ("torch", r.torch.to_string()),
            ("torchvision", r.torchvision.to_string()),
            ("cuda", r.cuda_full.to_string()),
            ("cudnn", r.cudnn.to_string()),
            ("python", r.python.to_string()),
            ("os", r.os.to_string()),
            ("driver_min", r.driver_min.to_string()),
            ("built_at", r.built_at.clone()),
            (
                "size",
                r.size
                    .as_ref()
                    .map(|size| size.to_string())
                    .unwrap_or_else(|| "(unknown)".into()),
            ),
            (
                "flavour",
                r.flavour
                    .as_ref()
                    .map(|flavour| flavour.describe())
                    .unwrap_or_else(|| "(none)".into()),
            ),
        ]
    };
    let mut diff = ImageDiff::default();
    for ((name, a), (_, b)) in fields(from).into_iter().zip(fields(to)) {
        if a != b {
            diff.fields.push((name.to_string(), a, b));
        }
    }
    let empty = Packages::default();
    let (a, b) = (
        from.packages.as_ref().unwrap_or(&empty),
        to.packages.as_ref().unwrap_or(&empty),
    );
    diff.pip = diff_lists(&a.pip, &b.pip);
    diff.os = diff_lists(&a.os, &b.os);
    let crates = |packages: &Packages| -> Vec<String> {
        packages
            .binaries
            .iter()
            .flat_map(|binary| {
                binary
                    .crates
                    .iter()
                    .map(move |entry| format!("{}/{entry}", binary.name))
            })
            .collect()
    };
    diff.crates = diff_lists(&crates(a), &crates(b));
    diff.labels = diff_labels(&recorded_labels(from), &recorded_labels(to));
    if let (Some(a), Some(b)) = (recorded_layers(from), recorded_layers(to)) {
        diff.pull = Some(pull_cost(a, b));
        diff.new_to_registry = Some(new_to_registry([a], b));
    }
    diff
}

/// The layers a record holds, where it was written with them.
pub(crate) fn recorded_layers(record: &ImageRecord) -> Option<&[LayerRecord]> {
    record
        .size
        .as_ref()
        .map(|size| size.parts.as_slice())
        .filter(|parts| !parts.is_empty())
}

/// The labels in a record's inputs (`labels`: one `key=value` line each; a line without `=`
/// continues the value before it, a multi-line value).
fn recorded_labels(record: &ImageRecord) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let mut last: Option<String> = None;
    for line in record
        .inputs
        .get("labels")
        .map(String::as_str)
        .unwrap_or("")
        .lines()
    {
        match (line.split_once('='), &last) {
            (Some((key, value)), _) => {
                labels.insert(key.to_string(), value.to_string());
                last = Some(key.to_string());
            }
            (None, Some(key)) => {
                if let Some(value) = labels.get_mut(key) {
                    value.push('\n');
                    value.push_str(line);
                }
            }
            (None, None) => {}
        }
    }
    labels
}

/// Labels added (`key=value`), removed, and changed (key, from, to).
fn diff_labels(from: &BTreeMap<String, String>, to: &BTreeMap<String, String>) -> ListDiff {
    let mut diff = ListDiff::default();
    for (key, value) in to {
        match from.get(key) {
            None => diff.added.push(format!("{key}={value}")),
            Some(old) if old != value => {
                diff.changed.push((key.clone(), old.clone(), value.clone()))
            }
            Some(_) => {}
        }
    }
    for (key, value) in from {
        if !to.contains_key(key) {
            diff.removed.push(format!("{key}={value}"));
        }
    }
    diff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_lists_diff_by_name() {
        let from = vec![
            "numpy==2.1.0".to_string(),
            "torch==2.7.0+cu126".into(),
            "sympy==1.13".into(),
        ];
        let to = vec![
            "numpy==2.1.0".to_string(),
            "torch==2.7.1+cu126".into(),
            "triton==3.3.1".into(),
        ];
        let diff = diff_lists(&from, &to);
        assert_eq!(diff.added, vec!["triton 3.3.1"]);
        assert_eq!(diff.removed, vec!["sympy 1.13"]);
        assert_eq!(
            diff.changed,
            vec![(
                "torch".to_string(),
                "2.7.0+cu126".to_string(),
                "2.7.1+cu126".to_string()
            )]
        );
        let os = diff_lists(
            &["libc6=2.39-0ubuntu8".to_string()],
            &["libc6=2.39-0ubuntu8.4".to_string()],
        );
        assert_eq!(os.changed[0].2, "2.39-0ubuntu8.4");
    }

    #[test]
    fn the_crates_of_recorded_binaries_diff_by_binary_and_name() {
        use crate::history::manifest::BinaryRecord;
        let packages = |crates: &[&str]| Packages {
            binaries: vec![BinaryRecord {
                path: "/usr/local/bin/gpu-selftest".into(),
                name: "gpu-selftest".into(),
                version: Some("0.1.0".into()),
                sha256: Digest::of(crates.join(" ").as_bytes()),
                crates: crates.iter().map(|entry| entry.to_string()).collect(),
                note: None,
            }],
            ..Packages::default()
        };
        let (a, b) = (
            packages(&["cudarc==0.19.10", "libc==0.2.191"]),
            packages(&["cudarc==0.19.11", "serde==1.0.229"]),
        );
        let diff = diff_lists(
            &a.binaries[0]
                .crates
                .iter()
                .map(|c| format!("gpu-selftest/{c}"))
                .collect::<Vec<_>>(),
            &b.binaries[0]
                .crates
                .iter()
                .map(|c| format!("gpu-selftest/{c}"))
                .collect::<Vec<_>>(),
        );
        let record = |packages: Packages| -> ImageRecord {
            let mut record: ImageRecord = serde_json::from_value(serde_json::json!({
                "repository": "r/p", "tag": "t", "fingerprint": Digest::of(b"f"),
                "build_key": Digest::of(b"k"), "variant": "runtime", "torch": "2.7.1",
                "torchvision": "0.22.1", "cuda": "12.6", "cuda_full": "12.6.3", "cudnn": "9",
                "python": "3.12", "os": "ubuntu24.04", "base_image": "b",
                "driver_min": "560.35.05", "driver_min_compat": "525.60.13",
                "require_cuda": "cuda>=12.6", "built_at": "2026-12-02T07:00:00Z", "status": "ok"
            }))
            .unwrap();
            record.packages = Some(packages);
            record
        };
        let diff_of_records = diff_records(&record(a.clone()), &record(b.clone()));
        assert_eq!(diff_of_records.crates, diff);
        assert_eq!(diff.added, vec!["gpu-selftest/serde 1.0.229"]);
        assert_eq!(diff.removed, vec!["gpu-selftest/libc 0.2.191"]);
        assert_eq!(
            diff.changed,
            vec![(
                "gpu-selftest/cudarc".to_string(),
                "0.19.10".to_string(),
                "0.19.11".to_string()
            )]
        );
        // Records of images that are no flavour say nothing of flavours.
        assert!(diff_of_records
            .fields
            .iter()
            .all(|(name, ..)| name != "flavour"));
        // A flavour image built FROM another build of its runtime image: the field names both.
        let flavoured = |parent_digest: &[u8]| {
            let mut record = record(a.clone());
            record.flavour = Some(crate::history::manifest::FlavourRecord {
                name: "jupyter".into(),
                parent: "t".into(),
                parent_digest: Some(Digest::of(parent_digest)),
                parent_image_id: None,
            });
            record
        };
        let diff = diff_records(&flavoured(b"one"), &flavoured(b"two"));
        assert_eq!(
            diff.fields,
            [(
                "flavour".to_string(),
                format!("jupyter FROM t@{}", Digest::of(b"one")),
                format!("jupyter FROM t@{}", Digest::of(b"two"))
            )]
        );
        let diff = diff_records(&record(a.clone()), &flavoured(b"one"));
        assert_eq!(
            diff.fields,
            [(
                "flavour".to_string(),
                "(none)".to_string(),
                format!("jupyter FROM t@{}", Digest::of(b"one"))
            )]
        );
        // Sizes: said when they differ, `(unknown)` for a record written before sizes.
        let sized = |compressed_bytes: u64| {
            let mut record = record(a.clone());
            record.size = Some(crate::history::manifest::ImageSize {
                compressed_bytes,
                unpacked_bytes: 5_216_000_000,
                layers: 9,
                parts: Vec::new(),
            });
            record
        };
        assert!(diff_records(&sized(1), &sized(1)).fields.is_empty());
        assert_eq!(
            diff_records(&record(a.clone()), &sized(1_934_000_000)).fields,
            [(
                "size".to_string(),
                "(unknown)".to_string(),
                "1.93 GB compressed, 5.22 GB unpacked".to_string()
            )]
        );
    }
}
