//! The CycloneDX SBOM of one image record (the document's shape and purls are
//! `imagegen_attest::sbom`'s): the packages of the lock it was built from, with their hashes;
//! what the record's package list read from the image after the build (pip's packages,
//! `dpkg-query`'s, Python distributions found by their metadata, the binaries imagegen copied in
//! with their crates); CUDA, cuDNN (and NCCL, from its Python package).

use imagegen_attest::sbom::{
    image_sbom, Binary, DebPackage, FoundDistribution, ImageContents, PythonPackage,
};
use imagegen_python::LockedPackage;
use serde_json::Value;

use super::to_attest;
use crate::history::manifest::{parse_rfc3339, ImageRecord};
use crate::model::digest::Digest;

/// A PyPI name as purl writes it: normalized (PEP 503: lowercase, runs of `_`, `.` and `-` as
/// one `-`), by `imagegen_python::PackageName`. A text that is no package name goes lowercased
/// (purl-encoded where it is written).
pub fn pypi_name(name: &str) -> String {
    name.parse::<imagegen_python::PackageName>()
        .map_or_else(|_| name.to_ascii_lowercase(), |name| name.to_string())
}

/// `name==version` as the record's package lists write a pin.
fn pin(line: &str) -> Option<(&str, &str)> {
    line.split_once("==")
}

/// The SBOM of the image `record` describes, pushed as `digest`, built with `lock`'s packages.
pub(crate) fn sbom(
    record: &ImageRecord,
    digest: &Digest,
    lock: &[LockedPackage],
    imagegen_version: &str,
) -> Value {
    let packages = record.packages.clone().unwrap_or_default();
    let locked = lock
        .iter()
        .map(|package| PythonPackage {
            name: package.name.to_string(),
            version: package.version.to_string(),
            sha256: package
                .sha256
                .iter()
                .map(|hash| imagegen_attest::Digest::from_sha256(hash.bytes()))
                .collect(),
        })
        .collect();
    let installed = packages
        .pip
        .iter()
        .filter_map(|line| pin(line))
        .map(|(name, version)| PythonPackage {
            name: pypi_name(name.trim()),
            version: version.trim().to_string(),
            sha256: Vec::new(),
        })
        .collect();
    let found = packages
        .python_metadata
        .iter()
        .map(|found| FoundDistribution {
            name: pypi_name(&found.name),
            version: found.version.clone(),
            path: found.path.clone(),
        })
        .collect();
    // `name[:arch]=version`, as the record keeps `dpkg-query`'s list.
    let deb = packages
        .os
        .iter()
        .filter_map(|line| {
            let (name, version) = line.split_once('=')?;
            let name = name.split(':').next().unwrap_or(name).trim();
            let version = version.trim();
            (!name.is_empty() && !version.is_empty()).then(|| DebPackage {
                name: name.to_string(),
                version: version.to_string(),
            })
        })
        .collect();
    let binaries = packages
        .binaries
        .iter()
        .map(|binary| Binary {
            path: binary.path.clone(),
            name: binary.name.clone(),
            version: binary.version.clone(),
            sha256: to_attest(&binary.sha256),
            crates: binary
                .crates
                .iter()
                .filter_map(|line| pin(line))
                .map(|(name, version)| (name.to_string(), version.to_string()))
                .collect(),
        })
        .collect();
    let arch = record
        .inputs
        .get("platform")
        .and_then(|platform| platform.rsplit('/').next())
        .unwrap_or("amd64")
        .to_string();
    let contents = ImageContents {
        repository: record.repository.clone(),
        digest: to_attest(digest),
        built_at: parse_rfc3339(&record.built_at).and_then(super::provenance::instant),
        arch,
        os: record.os.to_string(),
        locked,
        installed,
        found,
        deb,
        cuda: record.cuda_full.to_string(),
        cudnn: record.cudnn.to_string(),
        binaries,
    };
    image_sbom(&contents, imagegen_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_purl_writes_them() {
        assert_eq!(pypi_name("Typing_Extensions"), "typing-extensions");
        assert_eq!(pypi_name("zope.interface"), "zope-interface");
    }
}
