//! Tag rules. Pure functions over values; no I/O.
//!
//! - The **full tag** is immutable and says exactly what is inside: by default
//!   `{torch}-cuda{cuda}-cudnn{cudnn_major}-{variant}-{os}`, e.g.
//!   `2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04`.
//! - `{revision}` and `{date}` in the full tag are decided from the manifest, after the other
//!   placeholders ([`read_back`], [`fill_recorded`]): content recorded under the rest of the tag
//!   keeps its revision and date; new content gets today's date and the next revision. An image's
//!   folder in `images/` ([`folder_name`]) leaves them out, so a new revision keeps its lock.
//! - **Moving aliases** follow the newest patch of a torch series:
//!   `2.7-cuda12.6-runtime-ubuntu24.04` for every OS, and `2.7-cuda12.6-runtime` for the default
//!   OS (the newest OS in the matrix unless `tags.default_os` says otherwise).
//! - `latest` (runtime) and `latest-devel` go only to the newest torch release of the matrix, with
//!   that series' default CUDA (the one PyPI's plain `torch` wheel uses), on the default OS.

use std::collections::BTreeMap;

use crate::model::axes::{OsName, Variant, VersionText};
use crate::model::version::DottedVersion;
pub(crate) use crate::resolve::image::TagFields;

/// Fills the full-tag template (validated by the matrix loader) with `fields`.
pub(crate) fn full_tag(template: &str, fields: &TagFields) -> String {
    let cudnn_major = fields.cudnn.major().to_string();
    template
        .replace("{torch_series}", &fields.series())
        .replace("{torch}", &fields.torch.to_string())
        .replace("{cuda}", &fields.cuda)
        .replace("{cudnn_major}", &cudnn_major)
        .replace("{cudnn}", &fields.cudnn)
        .replace("{python}", &format!("py{}", fields.python))
        .replace("{variant}", fields.variant.as_str())
        .replace("{os}", &fields.os)
}

/// The placeholder the next revision fills (1, 2, ...).
pub(crate) const REVISION: &str = "{revision}";
/// The placeholder the build day fills (`YYYYMMDD`).
pub(crate) const DATE: &str = "{date}";

/// Whether a tag still holds `{revision}` or `{date}`, which the manifest decides.
pub(crate) fn has_recorded_fields(tag: &str) -> bool {
    tag.contains(REVISION) || tag.contains(DATE)
}

/// `tag` with `{revision}` and `{date}` filled.
pub(crate) fn fill_recorded(tag: &str, date: &str, revision: u32) -> String {
    tag.replace(REVISION, &revision.to_string())
        .replace(DATE, date)
}

/// The image's folder name: `tag` without its `{revision}` and `{date}` parts, each dropped with
/// the separator (and up to 3 letters after it, `-r`, `-rev`) just before it: `…-ubuntu24.04-r{revision}` and
/// `…-ubuntu24.04-{date}` both give `…-ubuntu24.04`.
pub(crate) fn folder_name(tag: &str) -> String {
    let mut name = tag.to_string();
    for placeholder in [REVISION, DATE] {
        while let Some(at) = name.find(placeholder) {
            let before = &name[..at];
            let letters = before
                .chars()
                .rev()
                .take_while(char::is_ascii_alphabetic)
                .count();
            let cut = if letters <= 3 && before[..before.len() - letters].ends_with(['-', '.', '_'])
            {
                before.len() - letters - 1
            } else if before.ends_with(['-', '.', '_']) {
                before.len() - 1
            } else {
                before.len()
            };
            name = format!("{}{}", &name[..cut], &name[at + placeholder.len()..]);
        }
    }
    name.trim_start_matches(['-', '.', '_']).to_string()
}

/// The date and revision a recorded tag carries where `pattern` (a tag with `{revision}` and/or
/// `{date}` still in it) has them; `None` when `recorded` is not a filling of `pattern`.
pub(crate) fn read_back(pattern: &str, recorded: &str) -> Option<(Option<String>, Option<u32>)> {
    let mut date = None;
    let mut revision = None;
    let mut rest_pattern = pattern;
    let mut rest = recorded;
    loop {
        let next = [REVISION, DATE]
            .iter()
            .filter_map(|p| rest_pattern.find(p).map(|at| (at, *p)))
            .min();
        let Some((at, placeholder)) = next else {
            return (rest == rest_pattern).then_some((date, revision));
        };
        rest = rest.strip_prefix(&rest_pattern[..at])?;
        rest_pattern = &rest_pattern[at + placeholder.len()..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if placeholder == DATE {
            if digits < 8 {
                return None;
            }
            date = Some(rest[..8].to_string());
            rest = &rest[8..];
        } else {
            if digits == 0 || rest.starts_with('0') {
                return None;
            }
            revision = Some(rest[..digits].parse().ok()?);
            rest = &rest[digits..];
        }
    }
}

/// The OS that short aliases point at: `preferred` when given, else the newest Ubuntu in `images`.
pub(crate) fn default_os(images: &[TagFields], preferred: Option<&str>) -> Option<String> {
    if let Some(os) = preferred {
        return Some(os.to_string());
    }
    images
        .iter()
        .max_by_key(|image| &image.os_release)
        .map(|image| image.os.to_string())
}

/// The aliases of every image, by index into `images`. `latest` is only given when
/// `with_latest` is true.
pub(crate) fn aliases(
    images: &[TagFields],
    default_os: Option<&str>,
    with_latest: bool,
) -> BTreeMap<usize, Vec<String>> {
    let mut result: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    // Newest torch patch per (series, cuda, variant, os, python).
    let mut newest: BTreeMap<(String, VersionText, Variant, OsName, String), usize> =
        BTreeMap::new();
    for (index, image) in images.iter().enumerate() {
        let key = (
            image.series(),
            image.cuda.clone(),
            image.variant,
            image.os.clone(),
            image.python.to_string(),
        );
        match newest.get(&key) {
            Some(&best) if images[best].torch >= image.torch => {}
            _ => {
                newest.insert(key, index);
            }
        }
    }
    // When one OS has several Pythons (a custom template), only the newest Python gets aliases.
    let mut newest_python: BTreeMap<
        (String, VersionText, Variant, OsName),
        (DottedVersion, usize),
    > = BTreeMap::new();
    for &index in newest.values() {
        let image = &images[index];
        let python = image.python.clone();
        let key = (
            image.series(),
            image.cuda.clone(),
            image.variant,
            image.os.clone(),
        );
        match newest_python.get(&key) {
            Some((best, _)) if *best >= python => {}
            _ => {
                newest_python.insert(key, (python, index));
            }
        }
    }
    for &(_, index) in newest_python.values() {
        let image = &images[index];
        let short = format!("{}-cuda{}-{}", image.series(), image.cuda, image.variant);
        let entry = result.entry(index).or_default();
        entry.push(format!("{short}-{}", image.os));
        if Some(image.os.as_str()) == default_os {
            entry.push(short);
        }
    }
    if with_latest {
        if let Some(newest_torch) = images.iter().map(|i| &i.torch).max() {
            for (&(_, index), variant_name) in newest_python
                .values()
                .filter_map(|(_, index)| {
                    let image = &images[*index];
                    let wanted = image.torch == *newest_torch
                        && image.is_default_cuda
                        && Some(image.os.as_str()) == default_os;
                    wanted.then_some(((image.variant, *index), image.variant))
                })
                .collect::<BTreeMap<_, _>>()
                .iter()
            {
                let alias = match variant_name {
                    Variant::Runtime => "latest".to_string(),
                    Variant::Devel => "latest-devel".to_string(),
                };
                result.entry(index).or_default().push(alias);
            }
        }
    }
    for list in result.values_mut() {
        list.sort();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(torch: &str, cuda: &str, variant: Variant, os: &str, default_cuda: bool) -> TagFields {
        TagFields {
            torch: semver::Version::parse(torch).unwrap(),
            cuda: cuda.into(),
            cudnn: "9.5.1.17".into(),
            python: DottedVersion::parse_kind(
                if os == "ubuntu24.04" { "3.12" } else { "3.10" },
                "Python",
                2,
            )
            .unwrap(),
            variant,
            os: os.into(),
            os_release: crate::model::axes::OsName::parse(os).unwrap().release(),
            is_default_cuda: default_cuda,
        }
    }

    #[test]
    fn full_tag_says_what_is_inside() {
        let fields = image("2.7.1", "12.6", Variant::Runtime, "ubuntu24.04", true);
        assert_eq!(
            full_tag(
                "{torch}-cuda{cuda}-cudnn{cudnn_major}-{variant}-{os}",
                &fields
            ),
            "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04"
        );
        assert_eq!(
            full_tag("{torch_series}-{python}-{cudnn}-{variant}", &fields),
            "2.7-py3.12-9.5.1.17-runtime"
        );
    }

    #[test]
    fn recorded_fields_are_read_back_and_left_out_of_folders() {
        let pattern = "2.7.1-cuda12.6-runtime-{date}-r{revision}";
        assert_eq!(
            read_back(pattern, "2.7.1-cuda12.6-runtime-20261202-r12"),
            Some((Some("20261202".into()), Some(12)))
        );
        assert_eq!(
            fill_recorded(pattern, "20261202", 12),
            "2.7.1-cuda12.6-runtime-20261202-r12"
        );
        assert_eq!(
            read_back(pattern, "2.7.1-cuda12.6-runtime-2026120-r1"),
            None
        );
        assert_eq!(
            read_back(pattern, "2.7.1-cuda12.6-runtime-20261202-r"),
            None
        );
        assert_eq!(
            read_back(pattern, "2.7.1-cuda12.6-runtime-20261202-r01"),
            None
        );
        assert_eq!(read_back(pattern, "2.7.1-cuda12.6-devel-20261202-r1"), None);
        assert_eq!(
            read_back("a-r{revision}-amd64", "a-r3-amd64"),
            Some((None, Some(3)))
        );
        assert_eq!(read_back("a-r{revision}-amd64", "a-r3-arm64"), None);
        assert_eq!(folder_name(pattern), "2.7.1-cuda12.6-runtime");
        assert_eq!(folder_name("{date}-2.7.1-runtime"), "2.7.1-runtime");
        assert_eq!(folder_name("2.7.1-runtime{revision}"), "2.7.1-runtime");
        assert_eq!(
            folder_name("2.7.1-runtime-rev{revision}-amd64"),
            "2.7.1-runtime-amd64"
        );
        assert_eq!(folder_name("2.7.1-runtime"), "2.7.1-runtime");
    }

    #[test]
    fn series_alias_goes_to_the_newest_patch_only() {
        let images = vec![
            image("2.7.0", "12.6", Variant::Runtime, "ubuntu24.04", true),
            image("2.7.1", "12.6", Variant::Runtime, "ubuntu24.04", true),
            image("2.7.1", "12.6", Variant::Runtime, "ubuntu22.04", true),
        ];
        let os = default_os(&images, None);
        assert_eq!(os.as_deref(), Some("ubuntu24.04"));
        let aliases = aliases(&images, os.as_deref(), false);
        assert!(!aliases.contains_key(&0), "2.7.0 is not the newest patch");
        assert_eq!(
            aliases[&1],
            vec!["2.7-cuda12.6-runtime", "2.7-cuda12.6-runtime-ubuntu24.04"]
        );
        assert_eq!(
            aliases[&2],
            vec!["2.7-cuda12.6-runtime-ubuntu22.04"],
            "no short alias off the default OS"
        );
    }

    #[test]
    fn latest_only_for_newest_torch_with_its_default_cuda() {
        let images = vec![
            image("2.7.1", "12.6", Variant::Runtime, "ubuntu24.04", true),
            image("2.8.0", "12.6", Variant::Runtime, "ubuntu24.04", false),
            image("2.8.0", "12.8", Variant::Runtime, "ubuntu24.04", true),
            image("2.8.0", "12.8", Variant::Devel, "ubuntu24.04", true),
            image("2.8.0", "12.8", Variant::Runtime, "ubuntu22.04", true),
        ];
        let aliases = aliases(&images, Some("ubuntu24.04"), true);
        let with = |alias: &str| {
            aliases
                .iter()
                .filter(|(_, list)| list.iter().any(|a| a == alias))
                .map(|(i, _)| *i)
                .collect::<Vec<_>>()
        };
        assert_eq!(with("latest"), vec![2]);
        assert_eq!(with("latest-devel"), vec![3]);
        let without_latest = super::aliases(&images, Some("ubuntu24.04"), false);
        assert!(without_latest.values().flatten().count() > 0);
        assert!(without_latest
            .values()
            .flatten()
            .all(|a| !a.starts_with("latest")));
    }

    #[test]
    fn no_latest_when_default_cuda_is_not_built() {
        let images = vec![image(
            "2.8.0",
            "12.6",
            Variant::Runtime,
            "ubuntu24.04",
            false,
        )];
        let aliases = aliases(&images, Some("ubuntu24.04"), true);
        assert!(aliases.values().flatten().count() > 0, "{aliases:?}");
        assert!(aliases.values().flatten().all(|a| a != "latest"));
    }
}
