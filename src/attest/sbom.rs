//! The CycloneDX 1.6 SBOM (<https://cyclonedx.org/docs/1.6/json/>) of one image: every Python
//! package of its lock with version, sha256 hashes and a `pkg:pypi` purl (packages found in the
//! image's environment but not in the lock, such as pip itself, with their version and no hash);
//! every Debian/Ubuntu package the image holds (`dpkg-query`, recorded after the build) with a
//! `pkg:deb` purl; Python distributions found in the environment by their metadata that pip
//! does not list (copies vendored inside other packages), with where they are; CUDA, cuDNN and
//! NCCL as components with their versions; and each binary imagegen copies into the image (gpu-selftest, from the record's `packages.binaries`) as an
//! application with its sha256 and path, its crates (cargo-auditable's list) nested in it as
//! `pkg:cargo` components.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::history::manifest::{BinaryRecord, ImageRecord};
use crate::model::digest::Digest;

pub(crate) const PREDICATE_TYPE: &str = "https://cyclonedx.org/bom";

/// One package pinned by a lock: name, version and the sha256 of every file it may install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockedPackage {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) sha256: Vec<String>,
}

/// The packages of a uv/pip-compile lock (`name==version \` lines, each followed by
/// `--hash=sha256:...` lines). Comment lines and options are skipped.
pub(crate) fn parse_lock(text: &str) -> Vec<LockedPackage> {
    let mut packages: Vec<LockedPackage> = Vec::new();
    for line in text.lines() {
        let line = line.trim().trim_end_matches('\\').trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(hash) = line.strip_prefix("--hash=sha256:") {
            if let Some(last) = packages.last_mut() {
                last.sha256.push(hash.to_string());
            }
            continue;
        }
        if line.starts_with('-') {
            continue;
        }
        let requirement = line.split(';').next().unwrap_or(line).trim();
        if let Some((name, version)) = requirement.split_once("==") {
            packages.push(LockedPackage {
                name: name.trim().to_string(),
                version: version.trim().to_string(),
                sha256: Vec::new(),
            });
        }
    }
    packages
}

/// A PyPI name as purl writes it: normalized (PEP 503: lowercase, runs of `_`, `.` and `-` as
/// one `-`), by `imagegen_python::PackageName`. A text that is no package name goes lowercased
/// (purl-encoded where it is written).
pub fn pypi_name(name: &str) -> String {
    name.parse::<imagegen_python::PackageName>()
        .map_or_else(|_| name.to_ascii_lowercase(), |name| name.to_string())
}

/// Percent-encodes what purl does not allow in a segment.
fn purl_encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b".-_~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `ubuntu22.04` → (`ubuntu`, `ubuntu-22.04`); `debian12` → (`debian`, `debian-12`).
fn distro(os: &str) -> (String, String) {
    let split = os.find(|c: char| c.is_ascii_digit()).unwrap_or(os.len());
    let (name, version) = os.split_at(split);
    let name = if name.is_empty() { "debian" } else { name };
    let qualifier = if version.is_empty() {
        name.to_string()
    } else {
        format!("{name}-{version}")
    };
    (name.to_string(), qualifier)
}

/// A CycloneDX serial number derived from the image digest (a UUID with version 5 bits), so the
/// same image gives the same SBOM.
pub(crate) fn serial_number(digest: &Digest) -> String {
    let hex = digest.hex();
    let mut bytes: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).unwrap_or(0))
        .collect();
    bytes[6] = (bytes[6] & 0x0f) | 0x50;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The SBOM of the image `record` describes, pushed as `digest`, built with `lock`'s packages.
pub(crate) fn sbom(
    record: &ImageRecord,
    digest: &Digest,
    lock: &[LockedPackage],
    imagegen_version: &str,
) -> Value {
    let mut components: BTreeMap<String, Value> = BTreeMap::new();
    let mut python: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for package in lock {
        python.insert(
            pypi_name(&package.name),
            (package.version.clone(), package.sha256.clone()),
        );
    }
    let packages = record.packages.clone().unwrap_or_default();
    for line in &packages.pip {
        if let Some((name, version)) = line.split_once("==") {
            python
                .entry(pypi_name(name.trim()))
                .or_insert_with(|| (version.trim().to_string(), Vec::new()));
        }
    }
    for (name, (version, hashes)) in &python {
        let purl = format!("pkg:pypi/{}@{}", purl_encode(name), purl_encode(version));
        let mut component = json!({
            "type": "library",
            "bom-ref": purl,
            "name": name,
            "version": version,
            "purl": purl,
        });
        if !hashes.is_empty() {
            let mut sorted = hashes.clone();
            sorted.sort();
            sorted.dedup();
            component["hashes"] = sorted
                .iter()
                .map(|hash| json!({ "alg": "SHA-256", "content": hash }))
                .collect();
        }
        components.insert(purl, component);
    }
    // Distributions found by their metadata that neither the lock nor pip's list holds: copies
    // vendored inside other packages (setuptools' `_vendor`), with where they are.
    for found in &packages.python_metadata {
        let name = pypi_name(&found.name);
        let listed = python
            .get(&name)
            .is_some_and(|(version, _)| *version == found.version);
        let purl = format!(
            "pkg:pypi/{}@{}",
            purl_encode(&name),
            purl_encode(&found.version)
        );
        if listed || components.contains_key(&purl) {
            continue;
        }
        components.insert(
            purl.clone(),
            json!({
                "type": "library",
                "bom-ref": purl,
                "name": name,
                "version": found.version,
                "purl": purl,
                "evidence": { "occurrences": [{ "location": found.path }] },
            }),
        );
    }
    let arch = record
        .inputs
        .get("platform")
        .and_then(|platform| platform.rsplit('/').next())
        .unwrap_or("amd64")
        .to_string();
    let (namespace, distro_qualifier) = distro(&record.os);
    for line in &packages.os {
        let Some((name, version)) = line.split_once('=') else {
            continue;
        };
        let name = name.split(':').next().unwrap_or(name).trim();
        let version = version.trim();
        if name.is_empty() || version.is_empty() {
            continue;
        }
        let purl = format!(
            "pkg:deb/{namespace}/{}@{}?arch={arch}&distro={distro_qualifier}",
            purl_encode(name),
            purl_encode(version)
        );
        components.insert(
            purl.clone(),
            json!({
                "type": "library",
                "bom-ref": purl,
                "name": name,
                "version": version,
                "purl": purl,
            }),
        );
    }
    let nccl = python
        .iter()
        .find(|(name, _)| name.starts_with("nvidia-nccl"))
        .map(|(_, (version, _))| version.clone());
    let toolkit = [
        ("cuda", Some(record.cuda_full.to_string())),
        ("cudnn", Some(record.cudnn.to_string())),
        ("nccl", nccl),
    ];
    for (name, version) in toolkit {
        let Some(version) = version.filter(|v| !v.is_empty()) else {
            continue;
        };
        let reference = format!("nvidia:{name}@{version}");
        components.insert(
            reference.clone(),
            json!({
                "type": "library",
                "bom-ref": reference,
                "supplier": { "name": "NVIDIA Corporation" },
                "group": "nvidia",
                "name": name,
                "version": version,
            }),
        );
    }
    for binary in &packages.binaries {
        let (reference, component) = binary_component(binary);
        components.insert(reference, component);
    }
    let image_ref = format!("{}@{}", record.repository, digest);
    json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": serial_number(digest),
        "version": 1,
        "metadata": {
            "timestamp": record.built_at,
            "tools": { "components": [{
                "type": "application",
                "name": "imagegen",
                "version": imagegen_version,
            }]},
            "component": {
                "type": "container",
                "bom-ref": image_ref,
                "name": record.repository,
                "version": digest.to_string(),
                "hashes": [{ "alg": "SHA-256", "content": digest.hex() }],
            },
        },
        "components": components.into_values().collect::<Vec<_>>(),
    })
}

/// A binary of the image as a CycloneDX application: its root crate's purl when it carries a
/// crate list, its sha256, where it is in the image, and its crates nested (build-time-only
/// crates are not in the list). Nested bom-refs carry the binary's path, so two binaries
/// sharing a crate stay unique.
fn binary_component(binary: &BinaryRecord) -> (String, Value) {
    let reference = format!("file:{}", binary.path);
    let mut component = json!({
        "type": "application",
        "bom-ref": reference,
        "name": binary.name,
        "hashes": [{ "alg": "SHA-256", "content": binary.sha256.hex() }],
        "evidence": { "occurrences": [{ "location": binary.path }] },
    });
    if let Some(version) = &binary.version {
        component["version"] = json!(version);
        component["purl"] = json!(cargo_purl(&binary.name, version));
    }
    let crates: Vec<Value> = binary
        .crates
        .iter()
        .filter_map(|line| line.split_once("=="))
        .filter(|(name, version)| {
            !(*name == binary.name && Some(*version) == binary.version.as_deref())
        })
        .map(|(name, version)| {
            let purl = cargo_purl(name, version);
            json!({
                "type": "library",
                "bom-ref": format!("{reference}#{purl}"),
                "name": name,
                "version": version,
                "purl": purl,
            })
        })
        .collect();
    if !crates.is_empty() {
        component["components"] = Value::Array(crates);
    }
    (reference, component)
}

fn cargo_purl(name: &str, version: &str) -> String {
    format!("pkg:cargo/{}@{}", purl_encode(name), purl_encode(version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_gives_each_package_its_hashes() {
        let text = "# imagegen-lock-inputs: sha256:00\n\
                    cuda-bindings==13.0.3 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n\
                    nvidia-nccl-cu13==2.29.7 ; platform_machine == 'x86_64' \\\n    --hash=sha256:cc\n\
                        # via torch\n";
        let packages = parse_lock(text);
        assert_eq!(
            packages,
            vec![
                LockedPackage {
                    name: "cuda-bindings".into(),
                    version: "13.0.3".into(),
                    sha256: vec!["aa".into(), "bb".into()],
                },
                LockedPackage {
                    name: "nvidia-nccl-cu13".into(),
                    version: "2.29.7".into(),
                    sha256: vec!["cc".into()],
                },
            ]
        );
    }

    #[test]
    fn names_and_distros_as_purl_writes_them() {
        assert_eq!(pypi_name("Typing_Extensions"), "typing-extensions");
        assert_eq!(pypi_name("zope.interface"), "zope-interface");
        assert_eq!(purl_encode("1:2.3+dfsg"), "1%3A2.3%2Bdfsg");
        assert_eq!(
            distro("ubuntu22.04"),
            ("ubuntu".into(), "ubuntu-22.04".into())
        );
        assert_eq!(distro("debian12"), ("debian".into(), "debian-12".into()));
        let serial = serial_number(&Digest::of(b"x"));
        assert_eq!(serial.len(), "urn:uuid:".len() + 36);
        assert_eq!(&serial["urn:uuid:".len() + 14..][..1], "5");
    }
}
