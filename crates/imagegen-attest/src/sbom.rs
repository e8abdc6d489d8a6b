//! The CycloneDX 1.6 subset imagegen writes (<https://cyclonedx.org/docs/1.6/json/>), the SBOM
//! of one image: every Python package of its lock with version, sha256 hashes and a `pkg:pypi`
//! purl (packages installed but not in the lock, such as pip itself, with their version and no
//! hash); every Debian/Ubuntu package the image holds with a `pkg:deb` purl; Python
//! distributions found in the environment by their metadata that neither lists (copies vendored
//! inside other packages), with where they are; CUDA, cuDNN and NCCL as components with their
//! versions; and each binary imagegen copies into the image as an application with its sha256
//! and path, its crates (cargo-auditable's list) nested in it as `pkg:cargo` components. The
//! SBOM of an OCI image index nests each platform image's SBOM ([`index_sbom`]).
//!
//! What the image holds is the caller's to read (imagegen's record of the image); this module
//! owns the document's shape, the purls and the serial number.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::{json, Value};

use crate::digest::Digest;

pub const PREDICATE_TYPE: &str = "https://cyclonedx.org/bom";

/// A Python package of the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonPackage {
    /// As purl writes it: PEP 503 normalized (lowercase, runs of `_`, `.` and `-` as one `-`).
    pub name: String,
    pub version: String,
    /// The sha256 of every file the lock allows for it; empty when it is not from the lock.
    pub sha256: Vec<Digest>,
}

/// A Python distribution found in the environment by its metadata (`*.dist-info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundDistribution {
    /// PEP 503 normalized, as [`PythonPackage::name`].
    pub name: String,
    pub version: String,
    /// Where its metadata is in the image.
    pub path: String,
}

/// A Debian or Ubuntu package of the image (`dpkg-query`), its name without the architecture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebPackage {
    pub name: String,
    pub version: String,
}

/// A binary imagegen copied into the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    /// Where it is in the image.
    pub path: String,
    pub name: String,
    /// Its root crate's version, when it carries a crate list.
    pub version: Option<String>,
    pub sha256: Digest,
    /// The crates linked into it (cargo-auditable's list), as (name, version).
    pub crates: Vec<(String, String)>,
}

/// What one image holds, as its SBOM lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageContents {
    /// `registry/path` of the image.
    pub repository: String,
    /// The image's manifest digest.
    pub digest: Digest,
    /// When it was built; not written when unknown.
    pub built_at: Option<Timestamp>,
    /// The architecture, as `pkg:deb`'s `arch` qualifier (`amd64`).
    pub arch: String,
    /// The base OS as imagegen names it (`ubuntu22.04`, `debian12`).
    pub os: String,
    /// The packages of the image's lock, with their hashes.
    pub locked: Vec<PythonPackage>,
    /// The packages pip lists in the environment (those of the lock are written once, with
    /// the lock's hashes).
    pub installed: Vec<PythonPackage>,
    pub found: Vec<FoundDistribution>,
    pub deb: Vec<DebPackage>,
    /// The full CUDA version (`13.0.2`) and cuDNN's (`9.13.0.50`).
    pub cuda: String,
    pub cudnn: String,
    pub binaries: Vec<Binary>,
}

/// One platform image of an index: its platform (`linux/amd64`), digest and SBOM predicate.
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformSbom<'a> {
    pub platform: &'a str,
    pub digest: &'a Digest,
    pub sbom: &'a Value,
}

/// Percent-encodes what purl does not allow in a segment.
pub fn purl_encode(text: &str) -> String {
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
pub fn serial_number(digest: &Digest) -> String {
    let mut bytes: Vec<u8> = digest.sha256_bytes()[..16].to_vec();
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

fn timestamp(at: Option<Timestamp>) -> Value {
    at.map_or(Value::Null, |at| {
        json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
    })
}

/// The document around `components`, about the container `repository@digest`.
fn document(
    repository: &str,
    digest: &Digest,
    at: Option<Timestamp>,
    imagegen_version: &str,
    components: Vec<Value>,
) -> Value {
    let mut document = json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": serial_number(digest),
        "version": 1,
        "metadata": {
            "tools": { "components": [{
                "type": "application",
                "name": "imagegen",
                "version": imagegen_version,
            }]},
            "component": {
                "type": "container",
                "bom-ref": format!("{repository}@{digest}"),
                "name": repository,
                "version": digest.to_string(),
                "hashes": [{ "alg": "SHA-256", "content": digest.hex() }],
            },
        },
        "components": components,
    });
    if at.is_some() {
        document["metadata"]["timestamp"] = timestamp(at);
    }
    document
}

/// The SBOM predicate of the image `contents` describes.
pub fn image_sbom(contents: &ImageContents, imagegen_version: &str) -> Value {
    let mut components: BTreeMap<String, Value> = BTreeMap::new();
    let mut python: BTreeMap<&str, (&str, Vec<&Digest>)> = BTreeMap::new();
    for package in &contents.locked {
        python.insert(
            &package.name,
            (&package.version, package.sha256.iter().collect()),
        );
    }
    for package in &contents.installed {
        python
            .entry(&package.name)
            .or_insert_with(|| (&package.version, Vec::new()));
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
                .map(|hash| json!({ "alg": "SHA-256", "content": hash.hex() }))
                .collect();
        }
        components.insert(purl, component);
    }
    // Distributions found by their metadata that neither the lock nor pip's list holds: copies
    // vendored inside other packages (setuptools' `_vendor`), with where they are.
    for found in &contents.found {
        let listed = python
            .get(found.name.as_str())
            .is_some_and(|(version, _)| *version == found.version);
        let purl = format!(
            "pkg:pypi/{}@{}",
            purl_encode(&found.name),
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
                "name": found.name,
                "version": found.version,
                "purl": purl,
                "evidence": { "occurrences": [{ "location": found.path }] },
            }),
        );
    }
    let (namespace, distro_qualifier) = distro(&contents.os);
    for package in &contents.deb {
        let purl = format!(
            "pkg:deb/{namespace}/{}@{}?arch={}&distro={distro_qualifier}",
            purl_encode(&package.name),
            purl_encode(&package.version),
            contents.arch,
        );
        components.insert(
            purl.clone(),
            json!({
                "type": "library",
                "bom-ref": purl,
                "name": package.name,
                "version": package.version,
                "purl": purl,
            }),
        );
    }
    let nccl = python
        .iter()
        .find(|(name, _)| name.starts_with("nvidia-nccl"))
        .map(|(_, (version, _))| version.to_string());
    let toolkit = [
        ("cuda", Some(contents.cuda.clone())),
        ("cudnn", Some(contents.cudnn.clone())),
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
    for binary in &contents.binaries {
        let (reference, component) = binary_component(binary);
        components.insert(reference, component);
    }
    document(
        &contents.repository,
        &contents.digest,
        contents.built_at,
        imagegen_version,
        components.into_values().collect(),
    )
}

/// A binary of the image as a CycloneDX application: its root crate's purl when it carries a
/// crate list, its sha256, where it is in the image, and its crates nested (build-time-only
/// crates are not in the list). Nested bom-refs carry the binary's path, so two binaries
/// sharing a crate stay unique.
fn binary_component(binary: &Binary) -> (String, Value) {
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
        .filter(|(name, version)| {
            !(*name == binary.name && Some(version) == binary.version.as_ref())
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

/// Prefixes every `bom-ref` (and nested component's) with `prefix`.
fn prefixed(component: &Value, prefix: &str) -> Value {
    let mut component = component.clone();
    if let Some(reference) = component["bom-ref"].as_str() {
        component["bom-ref"] = json!(format!("{prefix}/{reference}"));
    }
    if let Some(nested) = component["components"].as_array() {
        component["components"] = nested.iter().map(|child| prefixed(child, prefix)).collect();
    }
    component
}

/// The SBOM predicate of the OCI image index `repository@digest`: the index as the
/// `metadata.component`, each platform image a nested `container` component holding its own
/// SBOM's components (bom-refs prefixed with the platform, so they stay unique).
pub fn index_sbom(
    repository: &str,
    digest: &Digest,
    published_at: Option<Timestamp>,
    platforms: &[PlatformSbom<'_>],
    imagegen_version: &str,
) -> Value {
    let components: Vec<Value> = platforms
        .iter()
        .map(|platform| {
            let nested: Vec<Value> = platform.sbom["components"]
                .as_array()
                .map(|components| {
                    components
                        .iter()
                        .map(|component| prefixed(component, platform.platform))
                        .collect()
                })
                .unwrap_or_default();
            json!({
                "type": "container",
                "bom-ref": format!("{repository}@{}", platform.digest),
                "name": repository,
                "version": platform.digest.to_string(),
                "hashes": [{ "alg": "SHA-256", "content": platform.digest.hex() }],
                "properties": [{ "name": "imagegen:platform", "value": platform.platform }],
                "components": nested,
            })
        })
        .collect();
    document(
        repository,
        digest,
        published_at,
        imagegen_version,
        components,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purls_distros_and_serial_numbers() {
        assert_eq!(purl_encode("1:2.3+dfsg"), "1%3A2.3%2Bdfsg");
        assert_eq!(
            distro("ubuntu22.04"),
            ("ubuntu".into(), "ubuntu-22.04".into())
        );
        assert_eq!(distro("debian12"), ("debian".into(), "debian-12".into()));
        let serial = serial_number(&Digest::of(b"x"));
        assert_eq!(serial.len(), "urn:uuid:".len() + 36);
        assert_eq!(&serial["urn:uuid:".len() + 14..][..1], "5");
        // The first 16 bytes of the digest, with version and variant bits set.
        assert!(serial.starts_with(&format!("urn:uuid:{}", &Digest::of(b"x").hex()[..8])));
    }

    #[test]
    fn a_binary_nests_its_crates_but_not_itself() {
        let (reference, component) = binary_component(&Binary {
            path: "/usr/local/bin/tool".into(),
            name: "tool".into(),
            version: Some("0.1.0".into()),
            sha256: Digest::of(b"tool"),
            crates: vec![
                ("tool".into(), "0.1.0".into()),
                ("serde".into(), "1.0.228".into()),
            ],
        });
        assert_eq!(reference, "file:/usr/local/bin/tool");
        assert_eq!(component["purl"], "pkg:cargo/tool@0.1.0");
        let nested = component["components"].as_array().unwrap();
        assert_eq!(nested.len(), 1);
        assert_eq!(
            nested[0]["bom-ref"],
            "file:/usr/local/bin/tool#pkg:cargo/serde@1.0.228"
        );
    }
}
