//! `imagegen publish`: with several platforms, each image is built per platform (on a runner of
//! that platform) and pushed under an `-amd64`/`-arm64` tag. Publishing assembles, for every full
//! tag, an OCI image index (`application/vnd.oci.image.index.v1+json`) from the per-platform
//! digests the manifest recorded, pushes it through the registry's HTTP API (the Docker Engine API
//! cannot create indexes), and moves the aliases to it.
//!
//! It refuses an index when a platform the matrix promises is missing, stale, failed, or (without
//! `--allow-untested`) untested, and says which. Aliases move only when every platform passed its
//! self-test, and never backwards. Readiness and the index document are pure functions; the
//! registry calls and the manifest write are the edges.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, Result};
use serde::Serialize;

use crate::commands::{table, Outcome};
use crate::docker::{
    registry_host_of, repository_path_of, DockerConfig, RegistryClient, MEDIA_TYPE_OCI_INDEX,
};
use crate::history::manifest::{now_rfc3339, IndexRecord, Manifest, PlatformImage};
use crate::pipeline::plan::alias_guard;
use crate::project::Project;
use crate::resolve::fingerprint::sha256_hex;
use crate::resolve::{ImageSpec, ResolveOptions};

/// One platform image ready to go into an index.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadyPlatform {
    pub platform: String,
    pub tag: String,
    pub digest: String,
    /// Whether its self-test passed (rather than being skipped and allowed).
    pub passed: bool,
}

/// Checks that every platform of one index is built, pushed, current and tested. Returns the
/// platform images, or every problem found.
pub fn index_readiness(
    platform_images: &[&ImageSpec],
    manifest: &Manifest,
    allow_untested: bool,
) -> Result<Vec<ReadyPlatform>, Vec<String>> {
    let mut ready = Vec::new();
    let mut problems = Vec::new();
    for spec in platform_images {
        let platform = &spec.platform;
        let Some(record) = manifest.images.get(&spec.tag) else {
            problems.push(format!("{platform} is missing: {} was never built (run `imagegen build --platform {platform} --push` on a {platform} runner)", spec.tag));
            continue;
        };
        let Some(digest) = record.digest.clone().filter(|_| record.status == "ok") else {
            let why = record.last_error.as_deref().unwrap_or("it was not pushed");
            problems.push(format!(
                "{platform}: {} has no pushed digest ({})",
                spec.tag,
                why.lines().next().unwrap_or(why)
            ));
            continue;
        };
        if record.fingerprint != spec.fingerprint {
            problems.push(format!(
                "{platform}: {} was built from other inputs than the matrix makes now; rebuild it",
                spec.tag
            ));
            continue;
        }
        let status = record
            .selftest
            .as_ref()
            .map(|t| t.status.as_str())
            .unwrap_or("not run");
        let passed = status == "pass";
        let allowed = passed || (allow_untested && status == "skipped");
        if !allowed {
            let summary = record
                .selftest
                .as_ref()
                .map(|t| t.summary.as_str())
                .unwrap_or("");
            problems.push(format!(
                "{platform}: {} self-test {status}{}{}",
                spec.tag,
                if summary.is_empty() { "" } else { ": " },
                summary
            ));
            continue;
        }
        ready.push(ReadyPlatform {
            platform: platform.clone(),
            tag: spec.tag.clone(),
            digest,
            passed,
        });
    }
    if problems.is_empty() {
        Ok(ready)
    } else {
        Err(problems)
    }
}

#[derive(Serialize)]
struct IndexDocument<'a> {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'a str,
    manifests: Vec<IndexEntry>,
}

/// One entry of an index; the fields are the OCI image index spec's descriptor fields.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IndexEntry {
    #[serde(rename = "mediaType")]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    pub platform: IndexPlatform,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IndexPlatform {
    pub architecture: String,
    pub os: String,
}

/// The index document's bytes: entries sorted by platform, compact JSON in a fixed field order,
/// so the same per-platform digests always give the same index digest.
pub fn index_document(mut entries: Vec<IndexEntry>) -> Vec<u8> {
    entries.sort_by(|a, b| {
        (&a.platform.os, &a.platform.architecture).cmp(&(&b.platform.os, &b.platform.architecture))
    });
    let document = IndexDocument {
        schema_version: 2,
        media_type: MEDIA_TYPE_OCI_INDEX,
        manifests: entries,
    };
    serde_json::to_vec(&document).expect("an index document always serializes")
}

/// `linux/arm64` → (`linux`, `arm64`).
fn split_platform(platform: &str) -> (String, String) {
    match platform.split_once('/') {
        Some((os, arch)) => (os.to_string(), arch.to_string()),
        None => ("linux".to_string(), platform.to_string()),
    }
}

pub fn publish_command(
    project: &Project,
    manifest_path: &Path,
    allow_untested: bool,
    dry_run: bool,
) -> Result<Outcome> {
    let resolution = project.resolve(ResolveOptions::default());
    if !project.matrix.multi_platform() {
        println!("the matrix builds linux/amd64 only: `imagegen build --push` publishes its images and aliases; there are no indexes to assemble");
        return Ok(Outcome::Success);
    }
    let mut manifest = Manifest::load(manifest_path)?;
    let mut groups: BTreeMap<String, Vec<&ImageSpec>> = BTreeMap::new();
    for spec in &resolution.images {
        if let Some(index) = &spec.index {
            groups.entry(index.clone()).or_default().push(spec);
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut rows = vec![["INDEX", "RESULT", "DIGEST", "PLATFORMS", "ALIASES"]
        .map(String::from)
        .to_vec()];
    let mut refused = Vec::new();
    for (index_tag, platform_images) in &groups {
        let ready = match index_readiness(platform_images, &manifest, allow_untested) {
            Ok(ready) => ready,
            Err(problems) => {
                rows.push(vec![
                    index_tag.clone(),
                    "refused".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]);
                refused.push((index_tag.clone(), problems));
                continue;
            }
        };
        let platforms = ready
            .iter()
            .map(|r| r.platform.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if dry_run {
            rows.push(vec![
                index_tag.clone(),
                "ready".into(),
                "-".into(),
                platforms,
                platform_images[0].aliases.join(", "),
            ]);
            continue;
        }
        let spec = platform_images[0];
        let outcome = runtime.block_on(publish_one(spec, index_tag, &ready, &mut manifest))?;
        manifest.save(manifest_path)?;
        rows.push(vec![
            index_tag.clone(),
            outcome.result,
            outcome.digest.chars().take(19).collect(),
            platforms,
            outcome.aliases,
        ]);
    }
    print!("{}", table(&rows));
    for (index_tag, problems) in &refused {
        eprintln!("refused to publish {index_tag}:");
        for problem in problems {
            eprintln!("  {problem}");
        }
    }
    if !refused.is_empty() {
        eprintln!("hint: build and test the missing platforms (or pass --allow-untested to publish images whose self-test was skipped), then run `imagegen publish` again");
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Success)
}

struct Published {
    result: String,
    digest: String,
    aliases: String,
}

async fn publish_one(
    spec: &ImageSpec,
    index_tag: &str,
    ready: &[ReadyPlatform],
    manifest: &mut Manifest,
) -> Result<Published> {
    let host = registry_host_of(&spec.repository);
    let credentials = DockerConfig::load_default()?.credentials_for(&host)?;
    let client = RegistryClient::new(&host, credentials);
    let path = repository_path_of(&spec.repository);
    let mut entries = Vec::new();
    for platform in ready {
        let child = client
            .get_manifest(path, &platform.digest)
            .await?
            .ok_or_else(|| {
                anyhow!(
                    "{}: the registry {host} no longer has {}@{}",
                    platform.platform,
                    spec.repository,
                    platform.digest
                )
            })?;
        let (os, architecture) = split_platform(&platform.platform);
        entries.push(IndexEntry {
            media_type: child.media_type,
            digest: platform.digest.clone(),
            size: child.bytes.len() as u64,
            platform: IndexPlatform { architecture, os },
        });
    }
    let document = index_document(entries);
    let digest = format!("sha256:{}", sha256_hex(&document));
    let existing = client.manifest_digest(path, index_tag).await?;
    let result = match existing.as_deref() {
        Some(current) if current == digest => "unchanged".to_string(),
        Some(current) => anyhow::bail!(
            "refusing to publish {}:{index_tag}: the registry already has this tag as {current}, and the platform images now give {digest}; full tags are immutable\nhint: publish a rebuild under a new tag (a revision suffix in tags.full)",
            spec.repository
        ),
        None => {
            let written = client.put_manifest(path, index_tag, MEDIA_TYPE_OCI_INDEX, document.clone()).await?;
            if written != digest {
                anyhow::bail!("the registry stored {index_tag} as {written}, expected {digest}");
            }
            "published".to_string()
        }
    };
    let now = now_rfc3339();
    manifest.record_index(IndexRecord {
        repository: spec.repository.clone(),
        tag: index_tag.to_string(),
        digest: digest.clone(),
        media_type: MEDIA_TYPE_OCI_INDEX.to_string(),
        torch: spec.torch.clone(),
        driver_min: spec.driver_min.clone(),
        platforms: ready
            .iter()
            .map(|r| {
                (
                    r.platform.clone(),
                    PlatformImage {
                        tag: r.tag.clone(),
                        digest: r.digest.clone(),
                    },
                )
            })
            .collect(),
        aliases: Vec::new(),
        published_at: now.clone(),
        history: Vec::new(),
    });
    let mut moved = Vec::new();
    let mut held = Vec::new();
    let all_passed = ready.iter().all(|r| r.passed);
    for alias in &spec.aliases {
        if !all_passed {
            held.push(format!("{alias} (not every platform passed its self-test)"));
            continue;
        }
        if let Some(reason) =
            alias_guard(alias, manifest.alias_target(alias), &spec.torch, index_tag)
        {
            held.push(format!("{alias} ({reason})"));
            continue;
        }
        if manifest
            .aliases
            .get(alias)
            .is_some_and(|a| a.digest.as_deref() == Some(digest.as_str()))
        {
            continue;
        }
        client
            .put_manifest(path, alias, MEDIA_TYPE_OCI_INDEX, document.clone())
            .await?;
        manifest.move_alias(alias, index_tag, Some(digest.clone()), &now);
        moved.push(alias.clone());
    }
    let mut aliases = String::new();
    if !moved.is_empty() {
        aliases.push_str(&format!("moved: {}", moved.join(", ")));
    }
    if !held.is_empty() {
        aliases.push_str(&format!(
            "{}held: {}",
            if aliases.is_empty() { "" } else { "; " },
            held.join(", ")
        ));
    }
    if aliases.is_empty() {
        aliases.push('-');
    }
    Ok(Published {
        result,
        digest,
        aliases,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(arch: &str, digest: &str) -> IndexEntry {
        IndexEntry {
            media_type: "application/vnd.docker.distribution.manifest.v2+json".into(),
            digest: digest.into(),
            size: 528,
            platform: IndexPlatform {
                architecture: arch.into(),
                os: "linux".into(),
            },
        }
    }

    #[test]
    fn index_documents_are_deterministic_and_sorted() {
        let a = index_document(vec![entry("arm64", "sha256:b"), entry("amd64", "sha256:a")]);
        let b = index_document(vec![entry("amd64", "sha256:a"), entry("arm64", "sha256:b")]);
        assert_eq!(a, b, "the order platforms were built in does not matter");
        let text = String::from_utf8(a).unwrap();
        assert!(text.starts_with(r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType""#), "{text}");
        assert!(text.find("amd64").unwrap() < text.find("arm64").unwrap());
    }

    #[test]
    fn readiness_names_every_missing_or_failed_platform() {
        use crate::history::manifest::{ImageRecord, TestRecord};
        use crate::model::knowledge::Knowledge;
        use crate::model::matrix::Matrix;
        let matrix = Matrix::parse(
            "registry: r.example\nrepository: t/p\ntorch: [\"2.13\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nplatforms: [linux/amd64, linux/arm64]\n",
            "m.yaml",
        )
        .unwrap();
        let specs =
            crate::resolve::resolve(&matrix, &Knowledge::embedded(), &ResolveOptions::default())
                .images;
        let group: Vec<&ImageSpec> = specs.iter().collect();
        let mut manifest = Manifest::new();
        let problems = index_readiness(&group, &manifest, false).unwrap_err();
        assert_eq!(problems.len(), 2);
        assert!(
            problems[1].starts_with("linux/arm64 is missing"),
            "{problems:?}"
        );

        let record = |spec: &ImageSpec, status: &str| {
            let mut record = ImageRecord::for_spec(spec, "k", "t");
            record.digest = Some(format!("sha256:{}", spec.platform.replace('/', "")));
            record.selftest = Some(TestRecord {
                status: status.into(),
                summary: "s".into(),
                report: None,
                at: "t".into(),
            });
            record
        };
        manifest.record_success(record(&specs[0], "pass"));
        manifest.record_success(record(&specs[1], "skipped"));
        let problems = index_readiness(&group, &manifest, false).unwrap_err();
        assert_eq!(
            problems,
            vec![format!(
                "linux/arm64: {} self-test skipped: s",
                specs[1].tag
            )]
        );
        let ready = index_readiness(&group, &manifest, true).unwrap();
        assert_eq!(
            ready.iter().map(|r| r.passed).collect::<Vec<_>>(),
            vec![true, false]
        );

        manifest.record_success(record(&specs[1], "fail"));
        assert!(
            index_readiness(&group, &manifest, true).unwrap_err()[0].contains("self-test fail"),
            "a failed test is never allowed"
        );
        let mut stale = record(&specs[1], "pass");
        stale.fingerprint = "sha256:other".into();
        manifest.record_success(stale);
        assert!(index_readiness(&group, &manifest, true).unwrap_err()[0]
            .contains("built from other inputs"));
    }
}
