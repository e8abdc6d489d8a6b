//! A torch release's knowledge entry, derived from its wheels' own metadata: the Python and
//! manylinux tags in the wheel filenames (PEP 427, PEP 600), and the `Requires-Dist` pins in each
//! wheel's METADATA (PEP 658 `.metadata` files of a PyPI-style index) of the CUDA runtime, cuDNN
//! and NCCL, evaluated for the wheel's platform (PEP 508 markers). Also: reading a simple index
//! page (PEP 691 JSON or PEP 503 HTML), and comparing a derivation with the embedded knowledge.
//!
//! Pure: text in, values out. Fetching the index and the metadata is the caller's
//! (`crate::docker::pypi_index`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::str::FromStr;

use serde::Deserialize;

use imagegen_python::{
    linux_cpython, parse_requirement, pinned_version, MarkerEnvironment, PackageName, Version,
    WheelFilename, WheelFilenameError,
};

use crate::model::knowledge::{Knowledge, PypiWheel, PLATFORM_AMD64, PLATFORM_ARM64};
use crate::model::version::{DottedVersion, TorchVersion, VersionText};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum DeriveError {
    #[error(transparent)]
    Filename(#[from] WheelFilenameError),
    #[error("{what}: {why}")]
    Index { what: String, why: String },
    #[error("{file}: {why}")]
    Metadata { file: String, why: String },
    #[error("{index} lists no Linux x86_64 or aarch64 wheels of {project} {version}")]
    NoWheels {
        index: String,
        project: String,
        version: String,
    },
    #[error("the {platform} wheels of torch {version} disagree on their CUDA pins: {details}")]
    Inconsistent {
        platform: String,
        version: String,
        details: String,
    },
}

/// The container platform (`linux/amd64`, `linux/arm64`) of a manylinux or plain Linux wheel;
/// `None` for other operating systems and machines.
pub(crate) fn linux_platform(wheel: &WheelFilename) -> Option<&'static str> {
    match wheel.linux_machine()? {
        "x86_64" => Some(PLATFORM_AMD64),
        "aarch64" => Some(PLATFORM_ARM64),
        _ => None,
    }
}

/// The lowest glibc any of the wheel's manylinux tags asks for.
pub(crate) fn glibc_floor(wheel: &WheelFilename) -> Option<DottedVersion> {
    let (major, minor) = wheel.glibc_floor()?;
    DottedVersion::parse_kind(&format!("{major}.{minor}"), "glibc", 2).ok()
}

/// One file of a simple index page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexFile {
    pub(crate) filename: String,
    /// Absolute URL, without the `#sha256=` fragment.
    pub(crate) url: String,
    pub(crate) yanked: bool,
    /// The sha256 the index gives for the file (PEP 691 `hashes`, PEP 503 `#sha256=`), if any.
    pub(crate) sha256: Option<String>,
}

/// The files of a PEP 691 JSON project page; relative URLs resolve against `page_url`.
pub(crate) fn parse_simple_json(text: &str, page_url: &str) -> Result<Vec<IndexFile>, DeriveError> {
    #[derive(Deserialize)]
    struct Page {
        files: Vec<File>,
    }
    #[derive(Deserialize)]
    struct File {
        filename: String,
        url: String,
        #[serde(default)]
        yanked: serde_json::Value,
        #[serde(default)]
        hashes: BTreeMap<String, String>,
    }
    let page: Page = serde_json::from_str(text).map_err(|e| DeriveError::Index {
        what: page_url.to_string(),
        why: format!("not a PEP 691 project page: {e}"),
    })?;
    Ok(page
        .files
        .into_iter()
        .map(|file| IndexFile {
            sha256: file.hashes.get("sha256").cloned(),
            url: resolve_url(page_url, &file.url),
            filename: file.filename,
            // `yanked` is false or a reason string (PEP 592 in JSON).
            yanked: !matches!(
                file.yanked,
                serde_json::Value::Bool(false) | serde_json::Value::Null
            ),
        })
        .collect())
}

/// The files of a PEP 503 HTML project page: every `<a href=…>filename</a>`.
pub(crate) fn parse_simple_html(text: &str, page_url: &str) -> Vec<IndexFile> {
    let mut files = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<a ") {
        rest = &rest[start..];
        let Some(tag_end) = rest.find('>') else { break };
        let tag = &rest[..tag_end];
        let Some(close) = rest[tag_end..].find("</a>") else {
            break;
        };
        let filename = html_unescape(rest[tag_end + 1..tag_end + close].trim());
        if let Some(href) = attribute(tag, "href") {
            let href = html_unescape(&href);
            files.push(IndexFile {
                sha256: href
                    .split_once("#sha256=")
                    .map(|(_, hash)| hash.split('&').next().unwrap_or_default().to_string()),
                url: resolve_url(page_url, &href),
                filename,
                yanked: attribute(tag, "data-yanked").is_some() || tag.contains(" data-yanked"),
            });
        }
        rest = &rest[tag_end + close..];
    }
    files
}

fn attribute(tag: &str, name: &str) -> Option<String> {
    let needle = format!("{name}=");
    let at = tag.find(&format!(" {needle}"))? + needle.len() + 1;
    let value = &tag[at..];
    let quote = value.chars().next()?;
    if quote == '"' || quote == '\'' {
        let end = value[1..].find(quote)?;
        Some(value[1..1 + end].to_string())
    } else {
        Some(
            value
                .split(|c: char| c.is_whitespace())
                .next()
                .unwrap_or_default()
                .to_string(),
        )
    }
}

fn html_unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// `reference` resolved against `base` (the WHATWG URL parser's join, as a browser reads an
/// index page's links), fragment dropped. A reference that does not resolve is kept as written
/// (without its fragment): fetching it then fails, naming it.
pub(crate) fn resolve_url(base: &str, reference: &str) -> String {
    let joined = url::Url::parse(base)
        .and_then(|base| base.join(reference))
        .or_else(|_| url::Url::parse(reference));
    match joined {
        Ok(mut url) => {
            url.set_fragment(None);
            url.into()
        }
        Err(_) => reference.split('#').next().unwrap_or_default().to_string(),
    }
}

/// The fields of a METADATA file this module reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Metadata {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) requires_dist: Vec<String>,
}

/// Parses the header of a core metadata file (RFC 822 style; the body after the first empty line
/// is the description and is ignored).
pub(crate) fn parse_metadata(text: &str, file: &str) -> Result<Metadata, DeriveError> {
    let mut metadata = Metadata::default();
    for line in text.lines() {
        if line.trim().is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_string();
        match key.to_ascii_lowercase().as_str() {
            "name" => metadata.name = value,
            "version" => metadata.version = value,
            "requires-dist" => metadata.requires_dist.push(value),
            _ => {}
        }
    }
    if metadata.name.is_empty() || metadata.version.is_empty() {
        return Err(DeriveError::Metadata {
            file: file.to_string(),
            why: "it has no Name or Version header".into(),
        });
    }
    Ok(metadata)
}

/// What one wheel's METADATA pins for its own platform and Python.
pub(crate) fn cuda_pins(
    metadata: &Metadata,
    environment: &MarkerEnvironment,
    file: &str,
) -> Result<PypiWheel, DeriveError> {
    let platform = match environment.platform_machine() {
        "aarch64" => PLATFORM_ARM64,
        _ => PLATFORM_AMD64,
    };
    let mut wheel = PypiWheel {
        platform: platform.to_string(),
        cuda: None,
        cuda_runtime: None,
        cudnn: None,
        nccl: None,
    };
    for line in &metadata.requires_dist {
        // Markers are parsed with the requirement: one that does not parse, or names a variable
        // PEP 508 does not have, is an error here.
        let requirement = parse_requirement(line).map_err(|why| DeriveError::Metadata {
            file: file.to_string(),
            why: format!("Requires-Dist {line:?}: {why}"),
        })?;
        if !requirement.evaluate_markers(environment, &[]) {
            continue;
        }
        let Some(version) = pinned_version(&requirement) else {
            continue;
        };
        let version = version.to_string();
        let name: &str = requirement.name.as_ref();
        let family = |prefix: &str| {
            name.strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("-cu"))
        };
        let slot = if family("nvidia-cudnn") {
            &mut wheel.cudnn
        } else if family("nvidia-nccl") {
            &mut wheel.nccl
        } else if family("nvidia-cuda-runtime")
            || (name == "cuda-toolkit"
                && requirement
                    .extras
                    .iter()
                    .any(|extra| extra.as_ref() == "cudart"))
        {
            &mut wheel.cuda_runtime
        } else {
            continue;
        };
        let parsed = VersionText::parse(&version).map_err(|e| DeriveError::Metadata {
            file: file.to_string(),
            why: format!("{name}: {e}"),
        })?;
        *slot = Some(parsed);
    }
    if let Some(runtime) = &wheel.cuda_runtime {
        wheel.cuda = Some(runtime.major_minor());
    }
    Ok(wheel)
}

/// The Linux wheels of a release per platform (`linux/amd64`, `linux/arm64`), with their files.
pub(crate) type LinuxWheels = BTreeMap<&'static str, Vec<(WheelFilename, IndexFile)>>;

/// `project` and `version` as a package name and a PEP 440 version, or an error naming them.
fn wanted(project: &str, version: &str) -> Result<(PackageName, Version), DeriveError> {
    let error = |why: String| DeriveError::Index {
        what: format!("{project} {version}"),
        why,
    };
    Ok((
        PackageName::from_str(project).map_err(|e| error(e.to_string()))?,
        Version::from_str(version).map_err(|e| error(e.to_string()))?,
    ))
}

/// The Linux wheels of `version` on an index page, per platform; of wheels that differ only in
/// their build tag, the highest (what pip installs). Yanked files are left out.
pub(crate) fn linux_wheels(
    files: &[IndexFile],
    project: &str,
    version: &str,
) -> Result<LinuxWheels, DeriveError> {
    let (project, version) = wanted(project, version)?;
    let mut best: BTreeMap<(&'static str, String), (WheelFilename, IndexFile)> = BTreeMap::new();
    for file in files
        .iter()
        .filter(|f| !f.yanked && f.filename.ends_with(".whl"))
    {
        let name = WheelFilename::from_str(&file.filename)?;
        if name.name() != &project || name.version() != &version {
            continue;
        }
        let Some(platform) = linux_platform(&name) else {
            continue;
        };
        let key = (platform, name.tags_key());
        let newer = best
            .get(&key)
            .is_none_or(|(kept, _)| name.build().unwrap_or(0) > kept.build().unwrap_or(0));
        if newer {
            best.insert(key, (name, file.clone()));
        }
    }
    let mut grouped = LinuxWheels::new();
    for ((platform, _), wheel) in best {
        grouped.entry(platform).or_default().push(wheel);
    }
    Ok(grouped)
}

/// What the wheels of one platform say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlatformDerivation {
    pub(crate) platform: String,
    /// Every wheel filename of the platform.
    pub(crate) wheels: Vec<String>,
    /// CPython versions with a regular (GIL) build.
    pub(crate) python: Vec<String>,
    /// CPython versions with a free-threaded build.
    pub(crate) python_free_threaded: Vec<String>,
    pub(crate) manylinux: Vec<String>,
    /// The lowest glibc the manylinux tags ask for.
    pub(crate) glibc_min: Option<String>,
    /// The wheels whose METADATA was read, and those neither the index (PEP 658) nor the wheel
    /// itself (byte ranges) served it for.
    pub(crate) metadata_read: Vec<String>,
    pub(crate) metadata_missing: Vec<String>,
    /// Of `metadata_read`, the wheels whose METADATA came from the wheel by byte ranges.
    pub(crate) metadata_from_wheels: Vec<String>,
    /// The pins, when any METADATA was read.
    pub(crate) pins: Option<PypiWheel>,
}

/// A release as its wheels describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DerivedRelease {
    pub(crate) project: String,
    pub(crate) version: String,
    /// The project page read, e.g. `https://pypi.org/simple/torch/`.
    pub(crate) page_url: String,
    pub(crate) platforms: Vec<PlatformDerivation>,
}

/// Derives the release from its Linux wheels and the METADATA texts fetched for them (keyed by
/// filename; a wheel without an entry had no metadata served); `from_wheels` names the wheels
/// whose text was read from the wheel itself rather than the index's `.metadata` file.
pub(crate) fn derive_release(
    project: &str,
    version: &str,
    page_url: &str,
    wheels: &LinuxWheels,
    metadata: &BTreeMap<String, String>,
    from_wheels: &BTreeSet<String>,
) -> Result<DerivedRelease, DeriveError> {
    if wheels.is_empty() {
        return Err(DeriveError::NoWheels {
            index: page_url.to_string(),
            project: project.to_string(),
            version: version.to_string(),
        });
    }
    let (wanted_project, wanted_version) = wanted(project, version)?;
    let mut platforms = Vec::new();
    for (platform, list) in wheels {
        let machine = if *platform == PLATFORM_ARM64 {
            "aarch64"
        } else {
            "x86_64"
        };
        let mut python = BTreeSet::new();
        let mut free_threaded = BTreeSet::new();
        let mut manylinux = BTreeSet::new();
        let mut floor: Option<DottedVersion> = None;
        let mut read = Vec::new();
        let mut missing = Vec::new();
        let mut pins: Vec<(String, PypiWheel)> = Vec::new();
        for (name, file) in list {
            for (version, is_free_threaded) in name.cpython() {
                if is_free_threaded {
                    free_threaded.insert(SortedVersion(version));
                } else {
                    python.insert(SortedVersion(version));
                }
            }
            manylinux.extend(
                name.platform_tags()
                    .iter()
                    .filter(|t| t.starts_with("manylinux"))
                    .cloned(),
            );
            if let Some(glibc) = glibc_floor(name) {
                floor = Some(floor.map_or(glibc.clone(), |f| f.min(glibc)));
            }
            match metadata.get(&file.filename) {
                None => missing.push(file.filename.clone()),
                Some(text) => {
                    let parsed = parse_metadata(text, &file.filename)?;
                    // `2.12.1+cu128` is release 2.12.1 (PEP 440 local versions).
                    let same_project = PackageName::from_str(&parsed.name)
                        .is_ok_and(|name| name == wanted_project);
                    let same_version = Version::from_str(&parsed.version)
                        .is_ok_and(|found| found.without_local() == wanted_version);
                    if !same_project || !same_version {
                        return Err(DeriveError::Metadata {
                            file: file.filename.clone(),
                            why: format!(
                                "it describes {} {}, not {project} {version}",
                                parsed.name, parsed.version
                            ),
                        });
                    }
                    let python_version = name
                        .cpython()
                        .first()
                        .map(|(v, _)| v.clone())
                        .unwrap_or_else(|| "3.12".into());
                    let environment = linux_cpython(machine, &python_version).map_err(|why| {
                        DeriveError::Metadata {
                            file: file.filename.clone(),
                            why,
                        }
                    })?;
                    pins.push((
                        file.filename.clone(),
                        cuda_pins(&parsed, &environment, &file.filename)?,
                    ));
                    read.push(file.filename.clone());
                }
            }
        }
        let distinct: BTreeSet<String> = pins.iter().map(|(_, p)| wheel_flow(p)).collect();
        if distinct.len() > 1 {
            return Err(DeriveError::Inconsistent {
                platform: platform.to_string(),
                version: version.to_string(),
                details: pins
                    .iter()
                    .map(|(file, p)| format!("{file}: {}", wheel_flow(p)))
                    .collect::<Vec<_>>()
                    .join("; "),
            });
        }
        platforms.push(PlatformDerivation {
            platform: platform.to_string(),
            wheels: list.iter().map(|(_, f)| f.filename.clone()).collect(),
            python: python.into_iter().map(|v| v.0).collect(),
            python_free_threaded: free_threaded.into_iter().map(|v| v.0).collect(),
            manylinux: manylinux.into_iter().collect(),
            glibc_min: floor.map(|f| f.to_string()),
            metadata_from_wheels: read
                .iter()
                .filter(|f| from_wheels.contains(*f))
                .cloned()
                .collect(),
            metadata_read: read,
            metadata_missing: missing,
            pins: pins.into_iter().next().map(|(_, p)| p),
        });
    }
    Ok(DerivedRelease {
        project: project.to_string(),
        version: version.to_string(),
        page_url: page_url.to_string(),
        platforms,
    })
}

/// A Python version that sorts numerically (`3.9` before `3.10`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct SortedVersion(String);

impl Ord for SortedVersion {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let key = |v: &str| -> Vec<u64> { v.split('.').filter_map(|p| p.parse().ok()).collect() };
        key(&self.0).cmp(&key(&other.0)).then(self.0.cmp(&other.0))
    }
}

impl PartialOrd for SortedVersion {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A PyPI wheel in the knowledge file's flow style.
pub(crate) fn wheel_flow(wheel: &PypiWheel) -> String {
    let mut text = format!("{{platform: {}", wheel.platform);
    for (key, value) in [
        ("cuda", &wheel.cuda),
        ("cuda_runtime", &wheel.cuda_runtime),
        ("cudnn", &wheel.cudnn),
        ("nccl", &wheel.nccl),
    ] {
        if let Some(value) = value {
            write!(text, ", {key}: \"{value}\"").ok();
        }
    }
    text.push('}');
    text
}

fn quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The source key a derivation cites (`pypi-torch` for pypi.org, else `index-torch`).
pub(crate) fn source_key(derived: &DerivedRelease) -> String {
    let host = url::Url::parse(&derived.page_url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_string))
        .unwrap_or_default();
    if host == "pypi.org" {
        format!("pypi-{}", derived.project)
    } else {
        format!("index-{}", derived.project)
    }
}

/// The derivation as knowledge YAML: the source, the series facts the wheels show, and the
/// release's `pypi` block, with comments on what was read.
pub(crate) fn to_yaml(derived: &DerivedRelease, read_on: &str) -> String {
    let key = source_key(derived);
    let mut out = String::new();
    writeln!(
        out,
        "# {} {} as its wheels say ({}, read {read_on})",
        derived.project, derived.version, derived.page_url
    )
    .ok();
    for platform in &derived.platforms {
        writeln!(
            out,
            "# {}: {} wheels, {}; METADATA read from {} of them{}{}",
            platform.platform,
            platform.wheels.len(),
            platform.manylinux.join(", "),
            platform.metadata_read.len(),
            if platform.metadata_from_wheels.is_empty() {
                String::new()
            } else {
                format!(
                    ", {} of them from the wheel itself by byte ranges (the index serves no .metadata)",
                    platform.metadata_from_wheels.len()
                )
            },
            if platform.metadata_missing.is_empty() {
                String::new()
            } else {
                format!(
                    " (neither the index nor the wheel served it for {})",
                    platform.metadata_missing.join(", ")
                )
            }
        )
        .ok();
    }
    writeln!(out, "sources:").ok();
    writeln!(
        out,
        "  {key}: {{url: \"{}\", what: \"each release's wheels: filenames (Python and manylinux tags) and METADATA Requires-Dist (PEP 658 .metadata, else the wheel's own by byte ranges), read {read_on}\"}}",
        derived.page_url
    )
    .ok();
    // The series facts: from the amd64 wheels (every platform's are in the comments above).
    if let Some(amd64) = derived
        .platforms
        .iter()
        .find(|p| p.platform == PLATFORM_AMD64)
        .or(derived.platforms.first())
    {
        writeln!(out, "python: {}", quoted_list(&amd64.python)).ok();
        if !amd64.python_free_threaded.is_empty() {
            writeln!(
                out,
                "# free-threaded builds (not listed in the knowledge): {}",
                amd64.python_free_threaded.join(", ")
            )
            .ok();
        }
        if let Some(glibc) = &amd64.glibc_min {
            writeln!(out, "glibc_min: \"{glibc}\"").ok();
        }
    }
    writeln!(out, "releases:").ok();
    writeln!(out, "  - torch: \"{}\"", derived.version).ok();
    writeln!(out, "    pypi:").ok();
    writeln!(out, "      wheels:").ok();
    for platform in &derived.platforms {
        match &platform.pins {
            Some(pins) => writeln!(out, "        - {}", wheel_flow(pins)).ok(),
            None => writeln!(
                out,
                "        # - {{platform: {}}}: no METADATA was served, so its pins are unknown",
                platform.platform
            )
            .ok(),
        };
    }
    writeln!(out, "      source: [{key}]").ok();
    out
}

/// How a derivation compares with the knowledge, one entry per fact of each platform (its
/// presence, its PyPI wheel's pins, its Python builds, its glibc floor): `checked` agree,
/// `differences` do not (`--check` fails), `unchecked` could not be compared (no METADATA was
/// served, by the index or the wheel). `notes` say more without deciding anything (the knowledge
/// may be stricter than a wheel tag).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Comparison {
    pub(crate) checked: Vec<String>,
    pub(crate) unchecked: Vec<String>,
    pub(crate) differences: Vec<String>,
    pub(crate) notes: Vec<String>,
}

/// Compares a derived torch release with the knowledge's entry for it; `torch` is the release
/// derived, as parsed from the command line.
pub(crate) fn compare(
    derived: &DerivedRelease,
    torch: &TorchVersion,
    knowledge: &Knowledge,
) -> Comparison {
    let mut comparison = Comparison::default();
    let Some((series, release)) = knowledge.torch_release(torch) else {
        comparison
            .differences
            .push(format!("torch {} is not in the knowledge", derived.version));
        return comparison;
    };
    for platform in &derived.platforms {
        let recorded = release
            .pypi
            .wheels
            .iter()
            .find(|w| w.platform == platform.platform);
        match (recorded, &platform.pins) {
            (None, _) => comparison.differences.push(format!(
                "PyPI has {} wheels of torch {}; the knowledge records none",
                platform.platform, derived.version
            )),
            (Some(recorded), Some(pins)) if recorded != pins => {
                comparison.differences.push(format!(
                    "{} PyPI wheel: the metadata says {}, the knowledge says {}",
                    platform.platform,
                    wheel_flow(pins),
                    wheel_flow(recorded)
                ))
            }
            (Some(recorded), Some(_)) => comparison.checked.push(format!(
                "{} PyPI wheel pins {}",
                platform.platform,
                wheel_flow(recorded)
            )),
            (Some(_), None) => comparison.unchecked.push(format!(
                "{}: neither the index nor the wheels served METADATA, so the recorded pins were not compared",
                platform.platform
            )),
        }
        let differences_before = comparison.differences.len();
        for python in &platform.python {
            let listed = |list: &[VersionText]| list.iter().any(|known| known == python);
            if !listed(&series.python) && !listed(&series.python_experimental) {
                comparison.differences.push(format!(
                    "{} wheels exist for Python {python}, which the knowledge does not list for torch {}",
                    platform.platform, series.series
                ));
            }
        }
        for python in &series.python {
            if !platform.python.iter().any(|found| found == python) {
                comparison.differences.push(format!(
                    "the knowledge lists Python {python} for torch {}, but PyPI has no {} wheel for it",
                    series.series, platform.platform
                ));
            }
        }
        if comparison.differences.len() == differences_before {
            comparison.checked.push(format!(
                "{} Python builds {}",
                platform.platform,
                platform.python.join(", ")
            ));
        }
        let variant = platform
            .pins
            .as_ref()
            .and_then(|p| p.cuda.as_ref())
            .and_then(|cuda| series.cuda.iter().find(|v| v.cuda == *cuda));
        let variant_glibc = series.glibc_min_for(variant, &platform.platform);
        if let Some(glibc) = &platform.glibc_min {
            let order = DottedVersion::parse_kind(glibc, "glibc", 2)
                .ok()
                .zip(DottedVersion::parse_kind(&variant_glibc, "glibc", 2).ok())
                .map(|(tag, recorded)| tag.cmp(&recorded));
            match order {
                Some(std::cmp::Ordering::Greater) => comparison.differences.push(format!(
                    "{} wheels need glibc {glibc} ({}), the knowledge says {variant_glibc}",
                    platform.platform,
                    platform.manylinux.join(", ")
                )),
                Some(std::cmp::Ordering::Less) => {
                    comparison.checked.push(format!(
                        "{} glibc floor {variant_glibc} (at least the tags' {glibc})",
                        platform.platform
                    ));
                    comparison.notes.push(format!(
                        "{} wheel tags ask only for glibc {glibc} ({}); the knowledge keeps {variant_glibc}",
                        platform.platform,
                        platform.manylinux.join(", ")
                    ));
                }
                Some(std::cmp::Ordering::Equal) => comparison
                    .checked
                    .push(format!("{} glibc floor {glibc}", platform.platform)),
                None => comparison.unchecked.push(format!(
                    "{}: glibc {glibc} of the tags or {variant_glibc} of the knowledge does not parse",
                    platform.platform
                )),
            }
        } else {
            comparison.unchecked.push(format!(
                "{}: no manylinux tag names a glibc floor",
                platform.platform
            ));
        }
    }
    for recorded in &release.pypi.wheels {
        if !derived
            .platforms
            .iter()
            .any(|p| p.platform == recorded.platform)
        {
            comparison.differences.push(format!(
                "the knowledge records a {} PyPI wheel of torch {}; the index has none",
                recorded.platform, derived.version
            ));
        }
    }
    comparison
}

#[cfg(test)]
mod tests;
