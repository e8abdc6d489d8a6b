//! The manifest: imagegen's record of every image it built and pushed, kept in the repository
//! (`imagegen-manifest.json` by default) so teams upgrade by regenerating tags and roll back to a
//! digest. Schema (version 1), documented in docs/manifest.md:
//!
//! - `images`: by full tag, the current record (digest, fingerprint, versions, driver minimums,
//!   self-test summary, size compressed and unpacked, build time, source commit, status) and
//!   `history`, the records it replaced.
//! - `aliases`: by alias, the full tag and digest it points at now, and every earlier target.
//! - `pending_aliases`: alias moves written down before they were made (intent) and not yet
//!   written down as done; `verify --adopt`, `rollback` and the next `build --push` settle them
//!   against what the registry serves.
//! - `attestations`: by image digest, the signed attestations pushed for it (cosign's `.att` and
//!   `.sig` tags and their digests, each statement's envelope digest, the key id).
//!
//! Writes go through a temporary file, fsync and rename, so a crash or Ctrl-C leaves either the
//! old manifest or the new one, never half of one. A failed build never erases what an image's
//! record held before: the failure is noted beside the last good record. Fields of image, alias
//! and index records that this version does not know (written by a newer imagegen or by hand)
//! are kept on every write; unknown top-level keys are refused.
//!
//! The tables are private to `history/`, and so is every method that changes them: code
//! elsewhere reads the manifest through its accessors and changes it only through
//! `history::ledger::Transaction`.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::history::attestations::AttestationRecord;
use crate::model::axes::{OsName, Variant, VersionText};
use crate::model::digest::Digest;
use crate::model::version::DriverVersion;

pub(crate) const SCHEMA_VERSION: u32 = 1;

/// How many earlier records each image and alias keeps.
pub(crate) const HISTORY_LIMIT: usize = 50;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Manifest {
    pub(in crate::history) schema_version: u32,
    #[serde(default)]
    pub(in crate::history) updated_at: String,
    #[serde(default, deserialize_with = "unique_keys::images")]
    pub(in crate::history) images: BTreeMap<String, ImageRecord>,
    #[serde(default, deserialize_with = "unique_keys::aliases")]
    pub(in crate::history) aliases: BTreeMap<String, AliasRecord>,
    /// Multi-platform OCI image indexes published by `imagegen publish`, by full tag.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "unique_keys::indexes"
    )]
    pub(in crate::history) indexes: BTreeMap<String, IndexRecord>,
    /// Alias moves begun and not yet recorded as done, by alias.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "unique_keys::pending_aliases"
    )]
    pub(in crate::history) pending_aliases: BTreeMap<String, PendingMove>,
    /// Signed attestations pushed per image digest (`imagegen attest`, `build --push` with a
    /// signing key); see `history::attestations`.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "unique_keys::attestations"
    )]
    pub(in crate::history) attestations: BTreeMap<Digest, AttestationRecord>,
}

/// The record tables, read so that a key given twice (a git conflict resolved by keeping both
/// sides) is an error at the second one, never a record silently dropped.
mod unique_keys {
    use std::collections::BTreeMap;
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::{Deserialize, Deserializer, Error, MapAccess, Visitor};

    struct Unique<T>(&'static str, PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for Unique<T> {
        type Value = BTreeMap<String, T>;

        fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
            write!(formatter, "a map of {} by name", self.0)
        }

        fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
            let mut table = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if table.contains_key(&key) {
                    // Raised before the value is read: the position is the duplicate key's.
                    return Err(M::Error::custom(format!(
                        "duplicate key `{key}` under `{}`: the manifest names it twice (a merge conflict resolved by keeping both sides?)",
                        self.0
                    )));
                }
                let value = map.next_value()?;
                table.insert(key, value);
            }
            Ok(table)
        }
    }

    fn unique<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        deserializer: D,
        table: &'static str,
    ) -> Result<BTreeMap<String, T>, D::Error> {
        deserializer.deserialize_map(Unique(table, PhantomData))
    }

    pub(super) fn images<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<String, super::ImageRecord>, D::Error> {
        unique(deserializer, "images")
    }

    pub(super) fn aliases<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<String, super::AliasRecord>, D::Error> {
        unique(deserializer, "aliases")
    }

    pub(super) fn indexes<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<String, super::IndexRecord>, D::Error> {
        unique(deserializer, "indexes")
    }

    pub(super) fn pending_aliases<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<String, super::PendingMove>, D::Error> {
        unique(deserializer, "pending_aliases")
    }

    pub(super) fn attestations<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<
        BTreeMap<crate::model::digest::Digest, crate::history::attestations::AttestationRecord>,
        D::Error,
    > {
        let table: BTreeMap<String, crate::history::attestations::AttestationRecord> =
            unique(deserializer, "attestations")?;
        table
            .into_iter()
            .map(|(key, record)| {
                crate::model::digest::Digest::parse(&key)
                    .map(|digest| (digest, record))
                    .map_err(|error| D::Error::custom(format!("under `attestations`: {error}")))
            })
            .collect()
    }
}

/// Fields of a record this version of imagegen does not know, kept as they were.
pub(crate) type Extra = BTreeMap<String, serde_json::Value>;

/// An alias move written down before the registry is asked to make it, and removed once the
/// move is written down as done. One left behind (a crash, a SIGKILL, a registry that died
/// mid-move) is settled against the registry: it serves `to` (the move happened) or `from`
/// (it did not).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PendingMove {
    /// The full tag (or index tag) the alias is being moved to.
    pub(crate) tag: String,
    /// The digest the alias pointed at when the move began; `None` for a new alias.
    #[serde(default)]
    pub(crate) from: Option<Digest>,
    pub(crate) to: Digest,
    /// When the move began.
    pub(crate) since: String,
    /// Which run began it (`pid 1234: imagegen build --push`).
    #[serde(default)]
    pub(crate) by: String,
    /// The id of the run that owns the move (see `history::alias_transaction`): only it records
    /// the move as done. Empty in moves written before run ids.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) run: String,
    /// A move made on purpose (`imagegen rollback`): once recorded, the alias is held there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) hold: bool,
    #[serde(flatten)]
    pub(crate) extra: Extra,
}

/// An OCI image index: one full tag over per-platform images.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IndexRecord {
    pub(crate) repository: String,
    pub(crate) tag: String,
    pub(crate) digest: Digest,
    pub(crate) media_type: String,
    pub(crate) torch: VersionText,
    pub(crate) driver_min: DriverVersion,
    /// Platform (`linux/arm64`) → the per-platform image's tag and digest.
    pub(crate) platforms: BTreeMap<String, PlatformImage>,
    #[serde(default)]
    pub(crate) aliases: Vec<String>,
    pub(crate) published_at: String,
    /// Earlier indexes under this tag, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) history: Vec<IndexRecord>,
    #[serde(flatten)]
    pub(crate) extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PlatformImage {
    pub(crate) tag: String,
    pub(crate) digest: Digest,
}

/// Whether an image record holds a good build (`ok`) or only a failure (`failed`: the image was
/// never built successfully; a failure of an image built before is noted beside its good record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RecordStatus {
    Ok,
    Failed,
}

/// What the self-test said: passed, failed a check, skipped (no GPU, another platform,
/// `--no-test`), or could not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TestStatus {
    Pass,
    Fail,
    Skipped,
    Error,
}

impl TestStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TestStatus::Pass => "pass",
            TestStatus::Fail => "fail",
            TestStatus::Skipped => "skipped",
            TestStatus::Error => "error",
        }
    }
}

impl PartialEq<str> for TestStatus {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for TestStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for TestStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The self-test outcome stored with an image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TestRecord {
    pub(crate) status: TestStatus,
    pub(crate) summary: String,
    /// gpu-selftest's JSON report, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) report: Option<serde_json::Value>,
    pub(crate) at: String,
    /// sha256 of the gpu-selftest baseline the run was judged against (`build
    /// --selftest-baseline`); a pass against another baseline, or none, does not count for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) baseline: Option<Digest>,
}

/// One node's self-test of one digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GpuTestResult {
    /// The node that ran it (gpu-selftest's `node_name`: `--node-name`, the Kubernetes node, or
    /// the host name).
    pub(crate) node: String,
    /// Each GPU's name as CUDA reports it, in index order (`NVIDIA H200`).
    #[serde(default)]
    pub(crate) gpus: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) driver: Option<String>,
    pub(crate) verdict: TestStatus,
    pub(crate) summary: String,
    /// Headline figures, by name (see `history::test_results::figures_of`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) figures: BTreeMap<String, f64>,
    /// When it was recorded.
    pub(crate) at: String,
    /// How it came: `build`, `imagegen test`, `test import FILE`.
    pub(crate) via: String,
    /// sha256 of the baseline it was judged against, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) baseline: Option<Digest>,
    #[serde(flatten)]
    pub(crate) extra: Extra,
}

/// A gpu-selftest report's checks in one line: the failing ones with their summaries, or how
/// many passed.
pub(crate) fn checks_summary(checks: &[serde_json::Value]) -> String {
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| {
            format!(
                "{}: {}",
                c["name"].as_str().unwrap_or("?"),
                c["summary"].as_str().unwrap_or("")
            )
        })
        .collect();
    if failed.is_empty() {
        format!(
            "{} checks passed",
            checks.iter().filter(|c| c["status"] == "pass").count()
        )
    } else {
        failed.join("; ")
    }
}

/// An image whose aliases wait for results: its full tag, digest, the aliases, and what is
/// missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Waiting {
    pub(crate) tag: String,
    pub(crate) digest: Option<Digest>,
    pub(crate) aliases: Vec<String>,
    pub(crate) missing: Vec<String>,
    pub(crate) failed: Vec<String>,
}

/// One image as built (or as it failed to build).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ImageRecord {
    pub(crate) repository: String,
    pub(crate) tag: String,
    #[serde(default)]
    pub(crate) aliases: Vec<String>,
    /// Registry manifest digest (`sha256:...`), once pushed.
    #[serde(default)]
    pub(crate) digest: Option<Digest>,
    /// Local image id (`sha256:...`).
    #[serde(default)]
    pub(crate) image_id: Option<Digest>,
    pub(crate) fingerprint: Digest,
    /// sha256 of the exact build context plus the parent's build key.
    pub(crate) build_key: Digest,
    pub(crate) variant: Variant,
    pub(crate) torch: VersionText,
    pub(crate) torchvision: VersionText,
    #[serde(default)]
    pub(crate) torchaudio: Option<VersionText>,
    pub(crate) cuda: VersionText,
    pub(crate) cuda_full: VersionText,
    pub(crate) cudnn: VersionText,
    pub(crate) python: VersionText,
    pub(crate) os: OsName,
    pub(crate) base_image: String,
    pub(crate) driver_min: DriverVersion,
    pub(crate) driver_min_compat: DriverVersion,
    pub(crate) require_cuda: String,
    #[serde(default)]
    pub(crate) selftest: Option<TestRecord>,
    /// Self-test results on this digest, one per node (`imagegen test`, `imagegen test import`;
    /// see `history::test_results`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) test_results: Vec<GpuTestResult>,
    /// Aliases the plan moves to this image that wait for the test policy (`tests.require`) to
    /// hold; `imagegen test` moves them once it does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) awaiting_aliases: Vec<String>,
    /// What the fingerprint covers, by name: `plan` compares it to say why an image rebuilds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) inputs: BTreeMap<String, String>,
    /// The packages inside the image, read from it after the build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) packages: Option<Packages>,
    /// Its size as pushed (compressed and unpacked); absent from records written before sizes
    /// were recorded (they still load, schema version 1) and from images only reused, never
    /// normalized, by every run since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) size: Option<ImageSize>,
    /// A flavour image's flavour and the image it was built FROM. Absent from other images and
    /// from records written before flavours (which still load: the field is optional, so the
    /// schema version stays 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) flavour: Option<FlavourRecord>,
    pub(crate) built_at: String,
    #[serde(default)]
    pub(crate) build_seconds: f64,
    #[serde(default)]
    pub(crate) source_commit: Option<String>,
    pub(crate) status: RecordStatus,
    /// The last failure of this image, kept beside the last good record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_error: Option<String>,
    /// Earlier records of this full tag, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) history: Vec<ImageRecord>,
    #[serde(flatten)]
    pub(crate) extra: Extra,
}

/// An image's size as pushed, from its normalized layers: `compressed_bytes` is the sum of the
/// layers' gzip blobs, the `size` of each layer in the registry manifest (what a pull downloads;
/// the config blob, a few kB, is not counted); `unpacked_bytes` is the sum of the layers'
/// uncompressed tars (their diff_ids' content: file data plus tar headers, whiteouts and files a
/// later layer replaces counted in the layer that holds them), about what Docker reports as the
/// image's size once pulled; `layers` is how many there are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ImageSize {
    pub(crate) compressed_bytes: u64,
    pub(crate) unpacked_bytes: u64,
    pub(crate) layers: u32,
    /// Each layer, bottom first: what an upgrade's pull cost is computed from
    /// (`history::pull_cost`) without asking the registry. Absent from records written before
    /// issue 48 (they still load: the schema version stays 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) parts: Vec<LayerRecord>,
}

/// One layer of an image as the manifest records it: its digest (the blob a pull downloads), its
/// compressed size and what it holds (its history entry: the wheels of a venv layer, the build
/// step of a build layer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LayerRecord {
    pub(crate) digest: String,
    pub(crate) compressed_bytes: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) holds: String,
}

impl std::fmt::Display for ImageSize {
    /// `1.9 GB compressed, 5.2 GB unpacked`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} compressed, {} unpacked",
            human_bytes(self.compressed_bytes),
            human_bytes(self.unpacked_bytes)
        )
    }
}

/// `12.3 MB` (decimal units, as registries and `docker images` count): whole bytes under 1 kB,
/// one decimal up to MB, two in GB and above.
pub(crate) fn human_bytes(bytes: u64) -> String {
    let value = bytes as f64;
    match bytes {
        0..=999 => format!("{bytes} B"),
        1_000..=999_999 => format!("{:.1} kB", value / 1e3),
        1_000_000..=999_999_999 => format!("{:.1} MB", value / 1e6),
        _ => format!("{:.2} GB", value / 1e9),
    }
}

/// Which flavour a flavour image is (`jupyter`) and the image it was built FROM: the parent's
/// full tag and, as the manifest recorded that parent when the flavour was recorded, its registry
/// digest and local image id. Those two are `None` when the parent's record was not the one the
/// flavour was built on (its fingerprint differs from the flavour's `parent_fingerprint` input),
/// so a digest is written only where it is the parent's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FlavourRecord {
    pub(crate) name: String,
    /// The parent's full tag (`2.8.0-cuda12.8-cudnn9-runtime-ubuntu24.04`).
    pub(crate) parent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) parent_digest: Option<Digest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) parent_image_id: Option<Digest>,
}

impl FlavourRecord {
    /// `jupyter FROM <parent tag>@<digest>` (the image id without a registry digest; the tag alone
    /// without either), as `plan` and `diff` print it.
    pub(crate) fn describe(&self) -> String {
        match self
            .parent_digest
            .as_ref()
            .or(self.parent_image_id.as_ref())
        {
            Some(digest) => format!("{} FROM {}@{digest}", self.name, self.parent),
            None => format!("{} FROM {}", self.name, self.parent),
        }
    }
}

/// The packages of an image: `pip freeze` of its Python environment and the OS packages
/// (`dpkg-query`), each as sorted `name==version` / `name=version` lines, and the binaries imagegen
/// puts into it (gpu-selftest) with the crates they are built from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Packages {
    #[serde(default)]
    pub(crate) pip: Vec<String>,
    #[serde(default)]
    pub(crate) os: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) binaries: Vec<BinaryRecord>,
    /// Every Python distribution whose metadata is in the image's environment (`*.dist-info`,
    /// `*.egg-info`), where it is: as scanners (syft) find them, including the copies other
    /// packages vendor (setuptools' `_vendor`), which `pip freeze` does not list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) python_metadata: Vec<PythonDistribution>,
    /// The matrix's apt extras and the packages apt installed with them, name to version, as
    /// `images/<image>/apt.lock` records them (see `history::apt_lock`); empty without extras.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) apt_extras: BTreeMap<String, String>,
}

/// A Python distribution found by its metadata file in an image.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct PythonDistribution {
    pub(crate) name: String,
    pub(crate) version: String,
    /// The metadata folder in the image (`…/setuptools/_vendor/wheel-0.46.3.dist-info`).
    pub(crate) path: String,
}

/// A binary imagegen copies into an image, as a scanner reads it: cargo-auditable's crate list
/// (the `.dep-v0` section), which syft, trivy and grype read from the binary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct BinaryRecord {
    /// Where it is in the image (`/usr/local/bin/gpu-selftest`).
    pub(crate) path: String,
    /// The root crate of its crate list (`gpu-selftest`), or the file name without one.
    pub(crate) name: String,
    /// The root crate's version; `None` without a crate list.
    #[serde(default)]
    pub(crate) version: Option<String>,
    pub(crate) sha256: Digest,
    /// Every crate linked into it, `name==version`, sorted (build-time-only crates left out).
    #[serde(default)]
    pub(crate) crates: Vec<String>,
    /// Why `crates` is empty: the binary carries no crate list (built without cargo-auditable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
}

/// Where an alias points, and where it pointed before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AliasRecord {
    pub(crate) tag: String,
    #[serde(default)]
    pub(crate) digest: Option<Digest>,
    pub(crate) moved_at: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) history: Vec<AliasTarget>,
    /// Set by `imagegen rollback`: builds, tests and publishes leave the alias where it is until
    /// `imagegen release ALIAS` (or `build --release-holds`) clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) held: Option<AliasHold>,
    #[serde(flatten)]
    pub(crate) extra: Extra,
}

/// Why an alias stays where a rollback put it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AliasHold {
    /// When the rollback was recorded.
    pub(crate) since: String,
    /// The digest the alias was rolled back from.
    #[serde(default)]
    pub(crate) from: Option<Digest>,
    /// Which run rolled it back (`pid 1234 (imagegen rollback ...)`).
    #[serde(default)]
    pub(crate) by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AliasTarget {
    pub(crate) tag: String,
    #[serde(default)]
    pub(crate) digest: Option<Digest>,
    pub(crate) moved_at: String,
    #[serde(flatten)]
    pub(crate) extra: Extra,
}

impl Manifest {
    /// By full tag, the current record of every image (each with its `history`).
    pub(crate) fn images(&self) -> &BTreeMap<String, ImageRecord> {
        &self.images
    }

    /// By alias, where it points and where it pointed before.
    pub(crate) fn aliases(&self) -> &BTreeMap<String, AliasRecord> {
        &self.aliases
    }

    /// By full tag, the multi-platform indexes `imagegen publish` published.
    pub(crate) fn indexes(&self) -> &BTreeMap<String, IndexRecord> {
        &self.indexes
    }

    /// By alias, the moves written down as begun and not yet as done.
    pub(crate) fn pending_aliases(&self) -> &BTreeMap<String, PendingMove> {
        &self.pending_aliases
    }

    /// The torch release behind a full tag, per-platform tag or index tag.
    pub(crate) fn torch_of(&self, tag: &str) -> Option<&str> {
        self.images
            .get(tag)
            .map(|r| r.torch.as_str())
            .or_else(|| self.indexes.get(tag).map(|i| i.torch.as_str()))
    }

    /// Records a published index; an earlier, different one under the tag moves to its history.
    pub(in crate::history) fn record_index(&mut self, mut index: IndexRecord) {
        if let Some(mut previous) = self.indexes.remove(&index.tag) {
            keep_unknown_fields(&mut index.extra, &previous.extra);
            let mut history = std::mem::take(&mut previous.history);
            if previous.digest != index.digest {
                history.insert(0, previous);
            } else {
                index.published_at = previous.published_at;
            }
            history.truncate(HISTORY_LIMIT);
            index.history = history;
        }
        index.aliases = self.aliases_of(&index.tag, Some(&index.digest));
        self.indexes.insert(index.tag.clone(), index);
    }

    /// Every record of an image the manifest knows, current and historical, with the full tag.
    pub(crate) fn all_records(&self) -> impl Iterator<Item = &ImageRecord> {
        self.images
            .values()
            .flat_map(|record| std::iter::once(record).chain(record.history.iter()))
    }

    /// The record an alias, full tag or digest (`sha256:...`) names: an alias resolves to its
    /// current target, a tag to its current record, a digest to whichever record carries it.
    pub(crate) fn find(&self, reference: &str) -> Option<&ImageRecord> {
        if reference.starts_with("sha256:") {
            let digest = Digest::parse(reference).ok()?;
            return self
                .all_records()
                .find(|r| r.digest.as_ref() == Some(&digest));
        }
        if let Some(alias) = self.aliases.get(reference) {
            return match &alias.digest {
                Some(digest) => self
                    .all_records()
                    .find(|r| r.digest.as_ref() == Some(digest))
                    .or_else(|| self.images.get(&alias.tag)),
                None => self.images.get(&alias.tag),
            };
        }
        self.images.get(reference)
    }

    pub(crate) fn new() -> Manifest {
        Manifest {
            schema_version: SCHEMA_VERSION,
            ..Default::default()
        }
    }

    /// Parses a manifest; `origin` (its path) is named in errors. A manifest of another schema
    /// version is refused before its fields are read, naming both versions and what to do.
    pub(crate) fn from_json(text: &str, origin: &str) -> Result<Manifest> {
        /// Only the version, whatever else the document holds.
        #[derive(Deserialize)]
        struct Version {
            schema_version: Option<serde_json::Value>,
        }
        if let Ok(Version {
            schema_version: Some(version),
        }) = serde_json::from_str::<Version>(text)
        {
            match version.as_u64() {
                Some(version) if version > u64::from(SCHEMA_VERSION) => anyhow::bail!(
                    "manifest {origin} was written by a newer imagegen: it has schema version {version}, and this imagegen ({}) reads schema version {SCHEMA_VERSION}\nhint: use an imagegen that reads schema version {version} (a newer release); this one leaves the manifest as it is",
                    env!("CARGO_PKG_VERSION")
                ),
                Some(version) if version < u64::from(SCHEMA_VERSION) => anyhow::bail!(
                    "manifest {origin} has schema version {version}, older than the {SCHEMA_VERSION} this imagegen reads\nhint: it was not written by a released imagegen; restore it from version control"
                ),
                _ => {}
            }
        }
        let manifest: Manifest = serde_json::from_str(text).map_err(|error| {
            // serde_json ends its message with " at line L column C"; the location leads ours.
            let message = error.to_string();
            let message = match message.rfind(" at line ") {
                Some(at) => message[..at].to_string(),
                None => message,
            };
            let hint = if message.starts_with("duplicate key") {
                "keep one of the two records (`imagegen manifest merge` combines two manifests by its rules); `imagegen verify` then checks the result against the registry".to_string()
            } else {
                format!("the manifest is written by imagegen (schema version {SCHEMA_VERSION}); restore it from version control rather than editing it by hand")
            };
            anyhow::anyhow!(
                "manifest {origin}:{}:{}: {message}\nhint: {hint}",
                error.line(),
                error.column()
            )
        })?;
        if manifest.schema_version != SCHEMA_VERSION {
            anyhow::bail!(
                "manifest {origin} has schema version {}; this imagegen reads version {SCHEMA_VERSION}",
                manifest.schema_version
            );
        }
        Ok(manifest)
    }

    /// The manifest as pretty JSON with a trailing newline, as it is written to disk.
    pub(crate) fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a manifest always serializes");
        text.push('\n');
        text
    }

    /// Records a successful build of `record.tag`; an earlier, different record moves to history.
    pub(in crate::history) fn record_success(&mut self, mut record: ImageRecord) {
        if let Some(mut previous) = self.images.remove(&record.tag) {
            keep_unknown_fields(&mut record.extra, &previous.extra);
            // Results and waiting aliases belong to the digest: a record of the same digest
            // (a reused build, the record written again at the end of a run) keeps them.
            if record.digest.is_some() && previous.digest == record.digest {
                let results = std::mem::take(&mut previous.test_results);
                for result in results {
                    if !record.test_results.iter().any(|r| r.node == result.node) {
                        record.test_results.push(result);
                    }
                }
                record.test_results.sort_by(|a, b| a.node.cmp(&b.node));
                for alias in std::mem::take(&mut previous.awaiting_aliases) {
                    if !record.awaiting_aliases.contains(&alias) {
                        record.awaiting_aliases.push(alias);
                    }
                }
                record.awaiting_aliases.sort();
            }
            let mut history = std::mem::take(&mut previous.history);
            if previous.status == RecordStatus::Ok
                && (previous.digest != record.digest || previous.build_key != record.build_key)
            {
                history.insert(0, previous);
            }
            history.truncate(HISTORY_LIMIT);
            record.history = history;
        }
        record.status = RecordStatus::Ok;
        record.last_error = None;
        // The aliases that point at this tag, as the alias table says (never what a new record
        // carries: a build's fresh record knows none).
        record.aliases = self.aliases_of(&record.tag, record.digest.as_ref());
        self.images.insert(record.tag.clone(), record);
    }

    /// Drops from each image's `awaiting_aliases` those the alias table points at it already
    /// (moved by another shard, or by hand with `rollback`).
    pub(in crate::history) fn drop_awaiting_moved(&mut self) {
        let aliases = &self.aliases;
        for record in self.images.values_mut() {
            record.awaiting_aliases.retain(|alias| {
                !aliases
                    .get(alias)
                    .is_some_and(|a| a.tag == record.tag && a.digest == record.digest)
            });
        }
    }

    /// Sets each image's and index's `aliases` list from the alias table.
    pub(in crate::history) fn relist_aliases(&mut self) {
        let lists: Vec<(String, Vec<String>)> = self
            .images
            .values()
            .map(|r| (r.tag.clone(), self.aliases_of(&r.tag, r.digest.as_ref())))
            .collect();
        for (tag, list) in lists {
            if let Some(record) = self.images.get_mut(&tag) {
                record.aliases = list;
            }
        }
        let lists: Vec<(String, Vec<String>)> = self
            .indexes
            .values()
            .map(|i| (i.tag.clone(), self.aliases_of(&i.tag, Some(&i.digest))))
            .collect();
        for (tag, list) in lists {
            if let Some(index) = self.indexes.get_mut(&tag) {
                index.aliases = list;
            }
        }
    }

    /// The aliases that point at `tag` (at `digest`, when both know theirs) now, sorted.
    pub(crate) fn aliases_of(&self, tag: &str, digest: Option<&Digest>) -> Vec<String> {
        self.aliases
            .iter()
            .filter(|(_, record)| {
                record.tag == tag
                    && (record.digest.is_none()
                        || digest.is_none()
                        || record.digest.as_ref() == digest)
            })
            .map(|(alias, _)| alias.clone())
            .collect()
    }

    /// Records a failure of `record.tag`. An existing good record stays as it is, with the error
    /// noted beside it; only an image never built before gets a `failed` record.
    pub(in crate::history) fn record_failure(&mut self, mut record: ImageRecord, error: &str) {
        match self.images.get_mut(&record.tag) {
            Some(existing) => existing.last_error = Some(error.to_string()),
            None => {
                record.status = RecordStatus::Failed;
                record.last_error = Some(error.to_string());
                self.images.insert(record.tag.clone(), record);
            }
        }
    }

    /// Points `alias` at `tag`/`digest`, keeping the earlier target in the alias's history, and
    /// keeps the image records' alias lists in step.
    pub(in crate::history) fn move_alias(
        &mut self,
        alias: &str,
        tag: &str,
        digest: Option<Digest>,
        at: &str,
    ) {
        let previous = self.aliases.remove(alias);
        let mut history = Vec::new();
        let mut extra = Extra::new();
        let mut held = None;
        if let Some(previous) = previous {
            if previous.tag == tag && previous.digest == digest {
                self.aliases.insert(alias.to_string(), previous);
                if let Some(image) = self.images.get_mut(tag) {
                    if !image.aliases.iter().any(|a| a == alias) {
                        image.aliases.push(alias.to_string());
                        image.aliases.sort();
                    }
                }
                return;
            }
            history = previous.history;
            extra = previous.extra;
            held = previous.held;
            history.insert(
                0,
                AliasTarget {
                    tag: previous.tag.clone(),
                    digest: previous.digest,
                    moved_at: previous.moved_at,
                    extra: Extra::new(),
                },
            );
            history.truncate(HISTORY_LIMIT);
            if let Some(old) = self.images.get_mut(&previous.tag) {
                old.aliases.retain(|a| a != alias);
            }
            if let Some(old) = self.indexes.get_mut(&previous.tag) {
                old.aliases.retain(|a| a != alias);
            }
        }
        self.aliases.insert(
            alias.to_string(),
            AliasRecord {
                tag: tag.to_string(),
                digest,
                moved_at: at.to_string(),
                history,
                held,
                extra,
            },
        );
        if let Some(image) = self.images.get_mut(tag) {
            if !image.aliases.iter().any(|a| a == alias) {
                image.aliases.push(alias.to_string());
                image.aliases.sort();
            }
        }
        if let Some(index) = self.indexes.get_mut(tag) {
            if !index.aliases.iter().any(|a| a == alias) {
                index.aliases.push(alias.to_string());
                index.aliases.sort();
            }
        }
    }

    /// The digest `alias` points at per the manifest: its own, or (records from before alias
    /// digests) its target's.
    pub(crate) fn alias_digest(&self, alias: &str) -> Option<Digest> {
        let record = self.aliases.get(alias)?;
        record.digest.clone().or_else(|| {
            self.images
                .get(&record.tag)
                .and_then(|image| image.digest.clone())
                .or_else(|| self.indexes.get(&record.tag).map(|i| i.digest.clone()))
        })
    }

    /// Why `alias` stays where it is, when a rollback holds it: the reason builds, tests and
    /// publishes print instead of moving it, naming the command that lets it move again.
    pub(crate) fn alias_hold(&self, alias: &str) -> Option<String> {
        let record = self.aliases.get(alias)?;
        let hold = record.held.as_ref()?;
        let at = record
            .digest
            .as_ref()
            .map(|d| d.short().to_string())
            .unwrap_or_else(|| "its recorded target".into());
        let from = hold
            .from
            .as_ref()
            .map(|d| format!(" from {}", d.short()))
            .unwrap_or_default();
        Some(format!(
            "{alias} is held at {at} ({}) since it was rolled back{from} at {}; `imagegen release {alias}` (or `imagegen build --release-holds`) lets it move again",
            record.tag, hold.since
        ))
    }

    /// Clears the hold on `alias`; the hold it had, if any.
    pub(in crate::history) fn release_alias(&mut self, alias: &str) -> Option<AliasHold> {
        self.aliases.get_mut(alias)?.held.take()
    }

    /// The repository a full tag, per-platform tag or index tag was recorded in.
    pub(crate) fn repository_of(&self, tag: &str) -> Option<&str> {
        self.images
            .get(tag)
            .map(|r| r.repository.as_str())
            .or_else(|| self.indexes.get(tag).map(|i| i.repository.as_str()))
    }
}

#[cfg(test)]
impl Manifest {
    /// A pending move of `alias` to `tag`/`to` from where the manifest says it points, as a run
    /// that then died would leave it (tests of settling and merging).
    pub(in crate::history) fn pending_move(
        &mut self,
        alias: &str,
        tag: &str,
        to: &Digest,
        at: &str,
        by: &str,
    ) {
        let from = self.alias_digest(alias);
        self.pending_aliases.insert(
            alias.to_string(),
            PendingMove {
                tag: tag.to_string(),
                from,
                to: to.clone(),
                since: at.to_string(),
                by: by.to_string(),
                run: by.to_string(),
                hold: false,
                extra: Extra::new(),
            },
        );
    }

    /// Records the pending move of `alias` as done, as its owner would.
    pub(in crate::history) fn finish_pending_move(&mut self, alias: &str, at: &str) {
        let pending = self.pending_aliases.remove(alias).expect("a pending move");
        self.move_alias(alias, &pending.tag, Some(pending.to), at);
    }
}

/// Keeps in `current` the fields of `previous` that this version of imagegen does not know.
pub(crate) fn keep_unknown_fields(current: &mut Extra, previous: &Extra) {
    for (key, value) in previous {
        current.entry(key.clone()).or_insert_with(|| value.clone());
    }
}

/// Now as RFC 3339 UTC with seconds (`2026-11-30T10:25:21Z`), from the system clock.
pub(crate) fn now_rfc3339() -> String {
    rfc3339(u64::try_from(jiff::Timestamp::now().as_second()).unwrap_or(0))
}

/// RFC 3339 UTC with seconds, as [`rfc3339`] writes it (`2026-11-30T10:25:21Z`), as seconds
/// since the Unix epoch; `None` for anything else (another offset, fractions of a second, a day
/// the calendar does not have).
pub(crate) fn parse_rfc3339(text: &str) -> Option<u64> {
    let civil =
        jiff::civil::DateTime::strptime("%Y-%m-%dT%H:%M:%S", text.strip_suffix('Z')?).ok()?;
    let instant = civil.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
    u64::try_from(instant.as_second()).ok()
}

/// Seconds since the Unix epoch as RFC 3339 UTC with seconds (`2026-11-30T10:25:21Z`).
pub(crate) fn rfc3339(seconds: u64) -> String {
    let instant = i64::try_from(seconds)
        .ok()
        .and_then(|seconds| jiff::Timestamp::from_second(seconds).ok())
        .unwrap_or(jiff::Timestamp::MAX);
    instant.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(label: &str) -> Digest {
        Digest::of(label.as_bytes())
    }

    fn record(tag: &str, digest: &str, key: &str) -> ImageRecord {
        let mut record = ImageRecord {
            repository: "r/p".into(),
            tag: tag.into(),
            aliases: vec![],
            digest: Some(d(digest)),
            image_id: None,
            fingerprint: d("f"),
            build_key: d(key),
            variant: Variant::Runtime,
            torch: "2.7.1".into(),
            torchvision: "0.22.1".into(),
            torchaudio: None,
            cuda: "12.6".into(),
            cuda_full: "12.6.3".into(),
            cudnn: "9.5.1.17".into(),
            python: "3.12".into(),
            os: "ubuntu24.04".into(),
            base_image: "b".into(),
            driver_min: "560.35.05".parse().unwrap(),
            driver_min_compat: "525.60.13".parse().unwrap(),
            require_cuda: "cuda>=12.6".into(),
            selftest: None,
            test_results: Vec::new(),
            awaiting_aliases: Vec::new(),
            inputs: BTreeMap::new(),
            packages: None,
            size: None,
            flavour: None,
            built_at: "2026-11-30T00:00:00Z".into(),
            build_seconds: 1.0,
            source_commit: None,
            status: RecordStatus::Ok,
            last_error: None,
            history: vec![],
            extra: Extra::new(),
        };
        record.status = RecordStatus::Ok;
        record
    }

    #[test]
    fn rebuilds_keep_the_previous_record_as_history() {
        let mut manifest = Manifest::new();
        manifest.record_success(record("t", "sha256:1", "k1"));
        manifest.record_success(record("t", "sha256:1", "k1"));
        assert!(
            manifest.images["t"].history.is_empty(),
            "an identical record is not history"
        );
        manifest.record_success(record("t", "sha256:2", "k2"));
        assert_eq!(manifest.images["t"].digest, Some(d("sha256:2")));
        assert_eq!(manifest.images["t"].history[0].digest, Some(d("sha256:1")));
    }

    #[test]
    fn a_failure_never_erases_the_last_good_record() {
        let mut manifest = Manifest::new();
        manifest.record_success(record("t", "sha256:1", "k1"));
        manifest.record_failure(record("t", "sha256:x", "k2"), "RUN pip install failed");
        assert_eq!(manifest.images["t"].digest, Some(d("sha256:1")));
        assert_eq!(manifest.images["t"].status, RecordStatus::Ok);
        assert_eq!(
            manifest.images["t"].last_error.as_deref(),
            Some("RUN pip install failed")
        );
        manifest.record_failure(record("new", "sha256:x", "k"), "boom");
        assert_eq!(manifest.images["new"].status, RecordStatus::Failed);
    }

    #[test]
    fn alias_moves_keep_history_and_image_lists_in_step() {
        let mut manifest = Manifest::new();
        manifest.record_success(record("a", "sha256:1", "k1"));
        manifest.record_success(record("b", "sha256:2", "k2"));
        manifest.move_alias("2.7-cuda12.6-runtime", "a", Some(d("sha256:1")), "t1");
        manifest.move_alias("2.7-cuda12.6-runtime", "a", Some(d("sha256:1")), "t2");
        assert!(
            manifest.aliases["2.7-cuda12.6-runtime"].history.is_empty(),
            "no move, no history"
        );
        manifest.move_alias("2.7-cuda12.6-runtime", "b", Some(d("sha256:2")), "t3");
        let alias = &manifest.aliases["2.7-cuda12.6-runtime"];
        assert_eq!(alias.tag, "b");
        assert_eq!(alias.history[0].tag, "a");
        assert!(manifest.images["a"].aliases.is_empty());
        assert_eq!(manifest.images["b"].aliases, vec!["2.7-cuda12.6-runtime"]);
    }

    #[test]
    fn json_round_trip_and_unknown_keys_refused() {
        let mut manifest = Manifest::new();
        manifest.record_success(record("t", "sha256:1", "k1"));
        assert_eq!(
            Manifest::from_json(&manifest.to_json(), "m.json").unwrap(),
            manifest
        );
        let error = Manifest::from_json("{\"schema_version\": 1, \"imagez\": {}}", "m.json")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("manifest m.json:1:") && error.contains("unknown field `imagez`"),
            "{error}"
        );
    }

    #[test]
    fn sizes_read_in_decimal_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1_000), "1.0 kB");
        assert_eq!(human_bytes(999_949), "999.9 kB");
        assert_eq!(human_bytes(1_000_000), "1.0 MB");
        assert_eq!(human_bytes(712_345_678), "712.3 MB");
        assert_eq!(human_bytes(1_934_000_000), "1.93 GB");
        assert_eq!(human_bytes(12_500_000_000), "12.50 GB");
        let size = ImageSize {
            compressed_bytes: 1_934_000_000,
            unpacked_bytes: 5_216_000_000,
            layers: 9,
            parts: Vec::new(),
        };
        assert_eq!(size.to_string(), "1.93 GB compressed, 5.22 GB unpacked");
    }

    #[test]
    fn a_size_round_trips_and_records_without_one_still_load() {
        let mut manifest = Manifest::new();
        let mut sized = record("t", "sha256:1", "k1");
        sized.size = Some(ImageSize {
            compressed_bytes: 1_934_000_123,
            unpacked_bytes: 5_216_000_456,
            layers: 9,
            parts: Vec::new(),
        });
        manifest.record_success(sized);
        manifest.record_success(record("u", "sha256:2", "k2"));
        let json = manifest.to_json();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            value["images"]["t"]["size"],
            serde_json::json!({"compressed_bytes": 1_934_000_123u64, "unpacked_bytes": 5_216_000_456u64, "layers": 9})
        );
        // A record without a size writes no key: such a manifest is what it was before sizes.
        assert!(value["images"]["u"].get("size").is_none(), "{json}");
        assert_eq!(Manifest::from_json(&json, "m.json").unwrap(), manifest);
        // A manifest written before sizes were recorded loads under the same schema version.
        let mut old = value.clone();
        old["images"]["t"].as_object_mut().unwrap().remove("size");
        let read = Manifest::from_json(&old.to_string(), "m.json").unwrap();
        assert_eq!(read.schema_version, 1);
        assert_eq!(read.images["t"].size, None);
        assert!(read.images["t"].extra.is_empty());
        // A malformed size is refused, not kept as an unknown field.
        let mut bad = value;
        bad["images"]["t"]["size"]["unpacked_bytes"] = serde_json::json!("5 GB");
        let error = Manifest::from_json(&serde_json::to_string_pretty(&bad).unwrap(), "m.json")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("manifest m.json:"), "{error}");
    }

    #[test]
    fn a_flavour_record_round_trips_and_records_without_one_still_load() {
        let mut manifest = Manifest::new();
        let mut flavoured = record("t-jupyter", "sha256:2", "k2");
        flavoured.flavour = Some(FlavourRecord {
            name: "jupyter".into(),
            parent: "t".into(),
            parent_digest: Some(d("sha256:1")),
            parent_image_id: None,
        });
        manifest.record_success(record("t", "sha256:1", "k1"));
        manifest.record_success(flavoured);
        let json = manifest.to_json();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            value["images"]["t-jupyter"]["flavour"],
            serde_json::json!({"name": "jupyter", "parent": "t", "parent_digest": d("sha256:1")})
        );
        // Images that are not flavours write no `flavour` key: a manifest without flavours is
        // byte for byte what it was before the field existed.
        assert!(value["images"]["t"].get("flavour").is_none(), "{json}");
        let read = Manifest::from_json(&json, "m.json").unwrap();
        assert_eq!(read, manifest);
        assert_eq!(
            read.images["t-jupyter"]
                .flavour
                .as_ref()
                .unwrap()
                .describe(),
            format!("jupyter FROM t@{}", d("sha256:1"))
        );
        // A record written before flavours were recorded (a flavour image without the key)
        // loads, with no flavour, under the same schema version.
        let mut old = value.clone();
        old["images"]["t-jupyter"]
            .as_object_mut()
            .unwrap()
            .remove("flavour");
        let read = Manifest::from_json(&old.to_string(), "m.json").unwrap();
        assert_eq!(read.schema_version, 1);
        assert_eq!(read.images["t-jupyter"].flavour, None);
        assert!(read.images["t-jupyter"].extra.is_empty());
        // A malformed one is refused at its position, not dropped into the unknown fields.
        let mut bad = value;
        bad["images"]["t-jupyter"]["flavour"]["parent_digest"] = serde_json::json!("latest");
        let error = Manifest::from_json(&serde_json::to_string_pretty(&bad).unwrap(), "m.json")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("manifest m.json:") && error.contains("is not a digest"),
            "{error}"
        );
    }

    #[test]
    fn unknown_fields_of_image_alias_and_index_records_are_kept_on_the_next_write() {
        let mut manifest = Manifest::new();
        manifest.record_success(record("t", "sha256:1", "k1"));
        manifest.move_alias("latest", "t", Some(d("sha256:1")), "t1");
        let mut value: serde_json::Value = serde_json::from_str(&manifest.to_json()).unwrap();
        value["images"]["t"]["owner"] = serde_json::json!("ml-infra");
        value["aliases"]["latest"]["approved_by"] = serde_json::json!(["ana"]);
        value["indexes"] = serde_json::json!({"x": {
            "repository": "r/p", "tag": "x", "digest": d("i"),
            "media_type": "application/vnd.oci.image.index.v1+json", "torch": "2.7.1",
            "driver_min": "560.35.05", "platforms": {}, "published_at": "t1",
            "signed": true
        }});
        let mut read = Manifest::from_json(&value.to_string(), "m.json").unwrap();
        // The next build of the tag and the next move of the alias keep them.
        read.record_success(record("t", "sha256:2", "k2"));
        read.move_alias("latest", "t", Some(d("sha256:2")), "t2");
        let written: serde_json::Value = serde_json::from_str(&read.to_json()).unwrap();
        assert_eq!(written["images"]["t"]["owner"], "ml-infra");
        assert_eq!(written["images"]["t"]["history"][0]["owner"], "ml-infra");
        assert_eq!(written["aliases"]["latest"]["approved_by"][0], "ana");
        assert_eq!(written["indexes"]["x"]["signed"], true);
        // Unknown top-level keys stay refused, and digests inside records are still checked
        // with their position.
        let mut bad = value.clone();
        bad["images"]["t"]["digest"] = serde_json::json!("latest");
        let error = Manifest::from_json(&serde_json::to_string_pretty(&bad).unwrap(), "m.json")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("manifest m.json:"), "{error}");
        assert!(error.contains("is not a digest"), "{error}");
        let line: usize = error["manifest m.json:".len()..]
            .split(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            serde_json::to_string_pretty(&bad)
                .unwrap()
                .lines()
                .nth(line - 1)
                .unwrap()
                .contains("\"latest\""),
            "{error}"
        );
    }

    #[test]
    fn alias_moves_are_written_down_before_and_after() {
        let mut manifest = Manifest::new();
        manifest.record_success(record("a", "sha256:1", "k1"));
        manifest.record_success(record("b", "sha256:2", "k2"));
        manifest.move_alias("latest", "a", Some(d("sha256:1")), "t1");
        manifest.pending_move("latest", "b", &d("sha256:2"), "t2", "pid 9");
        let pending = &manifest.pending_aliases["latest"];
        assert_eq!(
            (
                pending.from.clone(),
                pending.to.clone(),
                pending.tag.as_str()
            ),
            (Some(d("sha256:1")), d("sha256:2"), "b")
        );
        assert_eq!(manifest.aliases["latest"].tag, "a", "intent moves nothing");
        manifest.finish_pending_move("latest", "t3");
        assert!(manifest.pending_aliases.is_empty());
        assert_eq!(manifest.aliases["latest"].tag, "b");
        let json = manifest.to_json();
        assert!(!json.contains("pending_aliases"), "empty: not written");
    }

    #[test]
    fn a_key_given_twice_is_refused_at_its_line() {
        let mut manifest = Manifest::new();
        manifest.record_success(record("t", "sha256:1", "k1"));
        manifest.move_alias("latest", "t", Some(d("sha256:1")), "t1");
        let text = manifest.to_json();
        // A conflict resolved by keeping both sides: the record of `t` twice.
        let start = text.find("    \"t\": {").unwrap();
        let end = start + text[start..].find("\n    }").unwrap() + "\n    }".len();
        let doubled = format!("{},\n{}{}", &text[..end], &text[start..end], &text[end..]);
        let line = text[..end].lines().count() + 1;
        let error = Manifest::from_json(&doubled, "m.json")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(&format!("manifest m.json:{line}:"))
                && error.contains("duplicate key `t` under `images`")
                && error.contains("hint: keep one of the two records"),
            "{error}"
        );
        let alias_start = text.find("    \"latest\": {").unwrap();
        let alias_end =
            alias_start + text[alias_start..].find("\n    }").unwrap() + "\n    }".len();
        let doubled = format!(
            "{},\n{}{}",
            &text[..alias_end],
            &text[alias_start..alias_end],
            &text[alias_end..]
        );
        let error = Manifest::from_json(&doubled, "m.json")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("duplicate key `latest` under `aliases`"),
            "{error}"
        );
    }

    #[test]
    fn a_manifest_of_a_newer_schema_names_both_versions() {
        let text = "{\"schema_version\": 2, \"images\": {}, \"signatures\": {}}";
        let error = Manifest::from_json(text, "m.json").unwrap_err().to_string();
        assert!(
            error.starts_with("manifest m.json was written by a newer imagegen: it has schema version 2, and this imagegen")
                && error.contains("reads schema version 1")
                && error.contains("hint: use an imagegen that reads schema version 2"),
            "{error}"
        );
        assert!(!error.contains("unknown field"), "{error}");
    }

    #[test]
    fn image_records_list_the_aliases_that_point_at_them_after_a_rebuild_record() {
        let mut manifest = Manifest::new();
        manifest.record_success(record("t", "sha256:1", "k1"));
        manifest.move_alias("latest", "t", Some(d("sha256:1")), "t1");
        // The end-of-build record of the same build (its fresh record knows no aliases).
        manifest.record_success(record("t", "sha256:1", "k1"));
        assert_eq!(manifest.images["t"].aliases, vec!["latest"]);
        manifest.move_alias("latest", "t", Some(d("sha256:1")), "t2");
        assert_eq!(manifest.images["t"].aliases, vec!["latest"]);
        // A new digest under the tag: the alias still points at the old one.
        manifest.record_success(record("t", "sha256:2", "k2"));
        assert!(manifest.images["t"].aliases.is_empty());
    }

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_775_121), "2026-11-27T10:25:21Z");
        for seconds in [0, 951_782_400, 1_795_775_121, 4_102_444_800] {
            assert_eq!(parse_rfc3339(&rfc3339(seconds)), Some(seconds));
        }
        assert_eq!(parse_rfc3339("t1"), None);
    }
}
