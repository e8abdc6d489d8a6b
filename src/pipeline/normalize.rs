//! Normalized images: what imagegen pushes is not the daemon's build as it is, but a rewrite of
//! it that depends on the build's inputs only, so two builds of the same inputs at different times,
//! on clean daemons, give the same manifest digest.
//!
//! The rules, each a function tested on in-memory tars:
//! - **Epoch.** Every time the image carries is one `SOURCE_DATE_EPOCH`, taken from the inputs,
//!   never the clock: the `created` time of the image it is built `FROM` (pinned by digest in
//!   `images/bases.lock`, so a fixed value; a devel image's base is its normalized runtime image,
//!   whose `created` is that same epoch). A base without a parseable `created` gives 0 (1970).
//!   [`epoch_of_created`] reads it.
//! - **Layers** ([`normalize_layer`]): entries in byte order of their path, hard links after every
//!   other entry (their target must exist when a link is extracted); mtimes clamped to the epoch
//!   (older ones, the packages' own, kept); atime/ctime dropped; uid, gid, mode, owner names, link
//!   targets, device numbers and extended attributes (`SCHILY.xattr.*`) kept; whiteouts
//!   (`.wh.*`, `.wh..wh..opq`) kept as ordinary entries.
//! - **Files that only record the build's time** ([`TIME_ONLY_FILES`]) are left out: apt's and
//!   dpkg's logs, ldconfig's `aux-cache` (mtimes of the libraries it scanned), apt's binary
//!   package caches (rebuilt on demand). `/etc/ld.so.cache` is kept: its content is the library
//!   list only.
//! - **Python bytecode**: a timestamp-based `.pyc` (PEP 552 flags 0) records its source's mtime;
//!   the source's mtime is clamped, so the recorded one is clamped the same way and the `.pyc`
//!   stays valid ([`clamp_pyc`]). Hash-based `.pyc` files are content only and kept.
//! - **Config** ([`normalize_config`]): `created`, every history entry's `created` and the
//!   `org.opencontainers.image.created` label are the epoch; the daemon's own fields (`container`,
//!   `container_config`, `docker_version`, and `config.Image`, the ID of the builder's step
//!   before) go; so do the hashes the builder writes into a `COPY`/`ADD` step's history
//!   (`COPY dir:<sha256> in …`: over the source files with their build-time mtimes,
//!   [`without_source_hashes`]); `rootfs.diff_ids` are the normalized layers';
//!   [`NORMALIZED_LABEL`] marks the image as normalized (and carries the epoch).
//! - **Compression** ([`gzip`]): gzip (RFC 1952, header mtime 0, OS 255) around raw DEFLATE from
//!   `miniz_oxide` (version pinned by Cargo.lock) at [`GZIP_LEVEL`], in fixed 4 MiB chunks, each
//!   compressed alone and ended with a sync flush (as pigz does), so the output depends on the
//!   bytes, the level and the chunk size only — never on how many threads compressed it; the
//!   chunks are compressed in parallel on every core, as the normalized layer is written
//!   ([`GzipWriter`]): a layer is read whole from the export (its entries are sorted), but its
//!   normalized form is never held whole, only its gzip.
//!
//! Everything here is a value in, value out; reading the daemon's export and loading the result
//! back are the Docker adapter's work.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::history::manifest::{parse_rfc3339, rfc3339, ImageSize, LayerRecord};
use crate::model::digest::Digest;

/// The label a normalized image carries; its value is the epoch (seconds).
pub(crate) const NORMALIZED_LABEL: &str = "imagegen.normalized-epoch";
/// The OCI label of an image's creation time.
const CREATED_LABEL: &str = "org.opencontainers.image.created";
/// The DEFLATE level: 1 (fastest); compression, not the network, bounds a push (BENCHMARKS.md).
pub(crate) const GZIP_LEVEL: u8 = 1;
/// Each chunk is compressed alone, so the output does not depend on the number of threads.
const GZIP_CHUNK: usize = 4 << 20;
/// A layer at least this large that may be a known one is hashed as it streams, not held.
const STREAM_HASH_FROM: u64 = 64 << 20;

pub(crate) const MEDIA_TYPE_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const MEDIA_TYPE_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
const MEDIA_TYPE_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// Paths (as in a layer, no leading `/`) whose content is only the time of the build.
pub(crate) const TIME_ONLY_FILES: &[&str] = &[
    "var/log/dpkg.log",
    "var/log/alternatives.log",
    "var/log/bootstrap.log",
    "var/log/apt/history.log",
    "var/log/apt/term.log",
    "var/log/apt/eipp.log.xz",
    "var/cache/ldconfig/aux-cache",
    "var/cache/apt/pkgcache.bin",
    "var/cache/apt/srcpkgcache.bin",
];

/// The epoch of an image built from a base whose config says `created` (RFC 3339, fractions of
/// a second allowed and dropped); 0 when there is none.
pub(crate) fn epoch_of_created(created: Option<&str>) -> u64 {
    let Some(created) = created else { return 0 };
    let whole = match created.split_once('.') {
        Some((seconds, rest)) if rest.ends_with('Z') => format!("{seconds}Z"),
        _ => created.to_string(),
    };
    parse_rfc3339(&whole).unwrap_or(0)
}

/// One layer as pushed: the gzip blob, its digest, the uncompressed digest (diff_id) and sizes.
#[derive(Clone)]
pub(crate) struct NormalizedLayer {
    /// The gzip blob; `None` for a layer that was already a normalized layer of a parent this
    /// run normalized (see [`KnownLayer`]): its bytes were not made again.
    pub(crate) gzip: Option<bytes::Bytes>,
    pub(crate) digest: Digest,
    pub(crate) diff_id: Digest,
    pub(crate) unpacked_size: u64,
    pub(crate) compressed_size: u64,
}

/// What is known of a normalized layer without its bytes: enough to name it in a manifest.
///
/// An image built `FROM` a normalized image (a devel image, a flavour) starts with its parent's
/// normalized layers, byte for byte (the daemon exports a layer as it was loaded). Normalizing a
/// normalized layer at the same epoch gives it back unchanged (every rule is idempotent: entries
/// already sorted, mtimes already clamped, time-only files already gone, `.pyc` already clamped;
/// `normalize::tests::normalizing_a_normalized_layer_gives_it_back` checks it), so such a layer
/// is taken as it is: hashed, not rewritten nor compressed again. For a torch image that is
/// gigabytes per derived image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KnownLayer {
    pub(crate) digest: Digest,
    pub(crate) diff_id: Digest,
    pub(crate) unpacked_size: u64,
    pub(crate) compressed_size: u64,
}

impl NormalizedLayer {
    pub(crate) fn known(&self) -> KnownLayer {
        KnownLayer {
            digest: self.digest.clone(),
            diff_id: self.diff_id.clone(),
            unpacked_size: self.unpacked_size,
            compressed_size: self.compressed_size,
        }
    }
}

/// A normalized image: config, layers, and the registry manifest that names them.
#[derive(Clone)]
pub(crate) struct NormalizedImage {
    /// The epoch its times were set to.
    pub(crate) epoch: u64,
    pub(crate) config: Vec<u8>,
    pub(crate) config_digest: Digest,
    pub(crate) layers: Vec<NormalizedLayer>,
    pub(crate) manifest: Vec<u8>,
    pub(crate) manifest_digest: Digest,
}

/// The longest `holds` the manifest records of a layer.
const MOST_HOLDS_CHARS: usize = 300;

/// What each of `count` layers holds, from the history entries of `config` that made a layer
/// (`empty_layer` ones made none): their `created_by`, cut at [`MOST_HOLDS_CHARS`]; empty where
/// the history says nothing or has fewer entries than layers.
fn layer_holds(config: &[u8], count: usize) -> Vec<String> {
    let history: Vec<Value> = serde_json::from_slice::<Value>(config)
        .ok()
        .and_then(|config| config.get("history").and_then(Value::as_array).cloned())
        .unwrap_or_default();
    let mut holds: Vec<String> = history
        .iter()
        .filter(|entry| {
            !entry
                .get("empty_layer")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        })
        .map(|entry| {
            let text = entry
                .get("created_by")
                .and_then(Value::as_str)
                .unwrap_or("");
            let text = text.trim();
            match text.char_indices().nth(MOST_HOLDS_CHARS) {
                Some((end, _)) => format!("{}…", &text[..end]),
                None => text.to_string(),
            }
        })
        .collect();
    if holds.len() != count {
        // A history that does not match the layers names none of them.
        holds = vec![String::new(); count];
    }
    holds
}

impl NormalizedImage {
    /// Sum of the uncompressed layer tars.
    pub(crate) fn unpacked_size(&self) -> u64 {
        self.layers.iter().map(|layer| layer.unpacked_size).sum()
    }

    /// What the manifest records of this image's size: its layers as the registry manifest
    /// lists them (the config blob left out) and their uncompressed tars.
    pub(crate) fn size(&self) -> ImageSize {
        let holds = layer_holds(&self.config, self.layers.len());
        ImageSize {
            compressed_bytes: self.layers.iter().map(|layer| layer.compressed_size).sum(),
            unpacked_bytes: self.unpacked_size(),
            layers: u32::try_from(self.layers.len()).unwrap_or(u32::MAX),
            parts: self
                .layers
                .iter()
                .zip(holds)
                .map(|(layer, holds)| LayerRecord {
                    digest: layer.digest.to_string(),
                    compressed_bytes: layer.compressed_size,
                    holds,
                })
                .collect(),
        }
    }

    /// A `docker save` archive of this image tagged `reference`, for `docker load`: the daemon
    /// stores the config bytes as they are, so its image ID is [`NormalizedImage::config_digest`].
    /// A layer taken as known (no bytes: its parent's, which the daemon holds with the same chain
    /// below it) is an empty file: the daemon finds the layer by its chain and never reads it.
    /// The archive comes in pieces, each layer's gzip blob one of them as it is held (no copy of
    /// a torch image's gigabytes): concatenated, they are the tar.
    pub(crate) fn load_archive(&self, reference: &str) -> Result<Vec<bytes::Bytes>> {
        let mut pieces = Vec::new();
        let config_name = format!("{}.json", self.config_digest.hex());
        let mut layer_names = Vec::new();
        for layer in &self.layers {
            let name = format!("{}/layer.tar", layer.digest.hex());
            append_piece(&mut pieces, &name, layer.gzip.clone().unwrap_or_default())?;
            layer_names.push(name);
        }
        append_piece(
            &mut pieces,
            &config_name,
            bytes::Bytes::copy_from_slice(&self.config),
        )?;
        let manifest = serde_json::json!([{
            "Config": config_name,
            "RepoTags": [reference],
            "Layers": layer_names,
        }]);
        append_piece(
            &mut pieces,
            "manifest.json",
            serde_json::to_vec(&manifest)?.into(),
        )?;
        // The end of the archive: two zero blocks.
        pieces.push(bytes::Bytes::from_static(&[0; 1024]));
        Ok(pieces)
    }
}

/// A tar entry of a regular file `name` holding `data`: its header, `data` as it is, and the
/// padding to the next 512-byte block.
fn append_piece(pieces: &mut Vec<bytes::Bytes>, name: &str, data: bytes::Bytes) -> Result<()> {
    let mut header = tar::Header::new_gnu();
    header
        .set_path(name)
        .with_context(|| format!("{name} as a tar entry name"))?;
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    let padding = (512 - data.len() % 512) % 512;
    pieces.push(bytes::Bytes::copy_from_slice(header.as_bytes()));
    pieces.push(data);
    if padding > 0 {
        pieces.push(bytes::Bytes::from(vec![0; padding]));
    }
    Ok(())
}

/// Reads a `docker save` archive (the Engine API's image export) from `archive` and normalizes
/// it; each layer is rewritten and compressed as soon as it is read, so only one uncompressed
/// layer is held at a time. `known` are the normalized layers the image starts with, bottom
/// first (its parent's, see [`KnownLayer`]); a layer that hashes to one of them is taken as it
/// is, without its bytes. Should such a layer turn out to sit anywhere but its place in that
/// chain (the same bytes higher up), the error is [`MisplacedKnownLayer`]: normalize again with
/// no known layers. `on_layer` hears (unpacked bytes, compressed bytes, taken as known) per layer.
pub(crate) fn normalize_archive(
    archive: impl Read,
    epoch: u64,
    known: &[KnownLayer],
    on_layer: impl FnMut(u64, u64, bool),
) -> Result<NormalizedImage> {
    normalize_archive_streaming_from(archive, epoch, known, STREAM_HASH_FROM, on_layer)
}

/// [`normalize_archive`] hashing a possibly known layer as it streams from `stream_from` bytes.
fn normalize_archive_streaming_from(
    archive: impl Read,
    epoch: u64,
    known: &[KnownLayer],
    stream_from: u64,
    mut on_layer: impl FnMut(u64, u64, bool),
) -> Result<NormalizedImage> {
    let by_diff_id: BTreeMap<&Digest, &KnownLayer> =
        known.iter().map(|layer| (&layer.diff_id, layer)).collect();
    let sizes: std::collections::BTreeSet<u64> =
        known.iter().map(|layer| layer.unpacked_size).collect();
    let taken = |layer: &KnownLayer| NormalizedLayer {
        gzip: None,
        digest: layer.digest.clone(),
        diff_id: layer.diff_id.clone(),
        unpacked_size: layer.unpacked_size,
        compressed_size: layer.compressed_size,
    };
    let mut reader = tar::Archive::new(archive);
    let mut layers: BTreeMap<String, NormalizedLayer> = BTreeMap::new();
    let mut jsons: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for entry in reader.entries().context("reading the image export")? {
        let mut entry = entry.context("reading the image export")?;
        let path = entry.path()?.to_string_lossy().into_owned();
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let is_layer = path.ends_with(".tar") || path.starts_with("blobs/");
        // A large layer the size of a known one is hashed as it streams by, never held: for a
        // derived torch image that is the parent's gigabytes. Should it not be the known layer
        // after all, its bytes are gone: the caller normalizes again with no known layers.
        if is_layer && entry.size() >= stream_from && sizes.contains(&entry.size()) {
            let mut hasher = Sha256::new();
            let mut chunk = vec![0u8; 1 << 20];
            loop {
                let read = entry
                    .read(&mut chunk)
                    .with_context(|| format!("reading {path} of the image export"))?;
                if read == 0 {
                    break;
                }
                hasher.update(&chunk[..read]);
            }
            let digest = Digest::from_sha256(hasher.finalize().as_slice());
            let Some(layer) = by_diff_id.get(&digest) else {
                return Err(anyhow::Error::new(MisplacedKnownLayer {
                    diff_id: digest,
                    position: None,
                }));
            };
            on_layer(layer.unpacked_size, layer.compressed_size, true);
            layers.insert(path, taken(layer));
            continue;
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading {path} of the image export"))?;
        if path.ends_with(".json") {
            jsons.insert(path, bytes);
        } else if path.ends_with(".tar") || path.starts_with("blobs/") {
            if !by_diff_id.is_empty() {
                if let Some(layer) = by_diff_id.get(&Digest::of(&bytes)) {
                    on_layer(layer.unpacked_size, layer.compressed_size, true);
                    layers.insert(path, taken(layer));
                    continue;
                }
            }
            let layer = normalize_layer_into(&bytes, epoch, GzipWriter::new())
                .with_context(|| format!("normalizing layer {path} of the image export"))?;
            drop(bytes);
            let Gzipped {
                gzip,
                diff_id,
                unpacked_size,
            } = layer.finish();
            on_layer(unpacked_size, gzip.len() as u64, false);
            layers.insert(
                path,
                NormalizedLayer {
                    digest: Digest::of(&gzip),
                    compressed_size: gzip.len() as u64,
                    gzip: Some(gzip.into()),
                    diff_id,
                    unpacked_size,
                },
            );
        }
    }
    let manifest = jsons
        .get("manifest.json")
        .ok_or_else(|| anyhow!("the image export has no manifest.json"))?;
    let manifest: Value = serde_json::from_slice(manifest).context("the export's manifest.json")?;
    let image = manifest
        .as_array()
        .and_then(|images| images.first())
        .ok_or_else(|| anyhow!("the export's manifest.json names no image"))?;
    let config_name = image["Config"]
        .as_str()
        .ok_or_else(|| anyhow!("the export's manifest.json names no Config"))?;
    let config = jsons
        .get(config_name)
        .ok_or_else(|| anyhow!("the image export has no {config_name}"))?;
    let mut ordered = Vec::new();
    for name in image["Layers"].as_array().into_iter().flatten() {
        let name = name
            .as_str()
            .ok_or_else(|| anyhow!("the export's manifest.json has a layer that is no path"))?;
        let layer = layers
            .get(name)
            .ok_or_else(|| anyhow!("the image export has no layer {name}"))?;
        if layer.gzip.is_none()
            && known.get(ordered.len()).map(|known| &known.diff_id) != Some(&layer.diff_id)
        {
            return Err(anyhow::Error::new(MisplacedKnownLayer {
                diff_id: layer.diff_id.clone(),
                position: Some(ordered.len()),
            }));
        }
        ordered.push(layer.clone());
    }
    assemble(config, ordered, epoch)
}

/// A layer whose bytes were not kept because it looked like one of the parent chain's, and is
/// not that layer in that place: above its place in the image (`position`, from the bottom), or
/// (no position) a layer of a known layer's size with other bytes.
#[derive(Debug)]
pub(crate) struct MisplacedKnownLayer {
    pub(crate) diff_id: Digest,
    pub(crate) position: Option<usize>,
}

impl std::fmt::Display for MisplacedKnownLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.position {
            Some(position) => write!(
                f,
                "layer {} (number {} from the bottom) has the bytes of a parent's layer but is not in the parent's place",
                self.diff_id,
                position + 1
            ),
            None => write!(
                f,
                "layer {} has the size of a parent's layer but other bytes",
                self.diff_id
            ),
        }
    }
}

impl std::error::Error for MisplacedKnownLayer {}

/// The layers of `layers` (an image's diff IDs, bottom first) that are the bottom of a chain
/// normalized at `epoch`: the longest such prefix among `chains`.
pub(crate) fn known_prefix(
    layers: &[Digest],
    epoch: u64,
    chains: &[(u64, Vec<KnownLayer>)],
) -> Vec<KnownLayer> {
    let mut best: &[KnownLayer] = &[];
    for (chain_epoch, chain) in chains {
        if *chain_epoch != epoch {
            continue;
        }
        let common = layers
            .iter()
            .zip(chain)
            .take_while(|(layer, known)| **layer == known.diff_id)
            .count();
        if common > best.len() {
            best = &chain[..common];
        }
    }
    best.to_vec()
}

/// The normalized config and the manifest over `layers`.
pub(crate) fn assemble(
    config: &[u8],
    layers: Vec<NormalizedLayer>,
    epoch: u64,
) -> Result<NormalizedImage> {
    let diff_ids: Vec<Digest> = layers.iter().map(|layer| layer.diff_id.clone()).collect();
    let config = normalize_config(config, epoch, &diff_ids)?;
    let config_digest = Digest::of(&config);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_TYPE_MANIFEST,
        "config": {
            "mediaType": MEDIA_TYPE_CONFIG,
            "size": config.len(),
            "digest": config_digest.as_str(),
        },
        "layers": layers.iter().map(|layer| serde_json::json!({
            "mediaType": MEDIA_TYPE_LAYER,
            "size": layer.compressed_size,
            "digest": layer.digest.as_str(),
        })).collect::<Vec<_>>(),
    });
    let manifest = serde_json::to_vec(&manifest)?;
    Ok(NormalizedImage {
        epoch,
        manifest_digest: Digest::of(&manifest),
        manifest,
        config,
        config_digest,
        layers,
    })
}

/// The config with every time set to `epoch`, the daemon's own fields dropped and `diff_ids`.
pub(crate) fn normalize_config(config: &[u8], epoch: u64, diff_ids: &[Digest]) -> Result<Vec<u8>> {
    let mut config: Value = serde_json::from_slice(config).context("the image config")?;
    let object = config
        .as_object_mut()
        .ok_or_else(|| anyhow!("the image config is not a JSON object"))?;
    let time = rfc3339(epoch);
    for daemon_field in [
        "container",
        "container_config",
        "docker_version",
        "id",
        "parent",
    ] {
        object.remove(daemon_field);
    }
    object.insert("created".into(), Value::String(time.clone()));
    if let Some(history) = object.get_mut("history").and_then(Value::as_array_mut) {
        for step in history {
            if let Some(step) = step.as_object_mut() {
                step.insert("created".into(), Value::String(time.clone()));
                if let Some(Value::String(created_by)) = step.get_mut("created_by") {
                    *created_by = without_source_hashes(created_by);
                }
            }
        }
    }
    let runtime = object
        .entry("config")
        .or_insert_with(|| Value::Object(Default::default()));
    let runtime = runtime
        .as_object_mut()
        .ok_or_else(|| anyhow!("the image config's config is not an object"))?;
    // The classic builder names the image of the step before as `Image`: a build's own ID.
    runtime.remove("Image");
    let labels = runtime
        .entry("Labels")
        .or_insert_with(|| Value::Object(Default::default()));
    if labels.is_null() {
        *labels = Value::Object(Default::default());
    }
    let labels = labels
        .as_object_mut()
        .ok_or_else(|| anyhow!("the image config's labels are not an object"))?;
    labels.insert(CREATED_LABEL.into(), Value::String(time));
    labels.insert(NORMALIZED_LABEL.into(), Value::String(epoch.to_string()));
    let rootfs = object
        .get_mut("rootfs")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| anyhow!("the image config has no rootfs"))?;
    rootfs.insert(
        "diff_ids".into(),
        Value::Array(
            diff_ids
                .iter()
                .map(|digest| Value::String(digest.to_string()))
                .collect(),
        ),
    );
    Ok(serde_json::to_vec(&config)?)
}

/// The kinds of source the classic builder names with a hash in a `COPY`/`ADD` step's history
/// (`COPY dir:<sha256> in /opt/venv`).
const SOURCE_HASH_KINDS: &[&str] = &["file:", "dir:", "multi:"];

/// `created_by` without the hashes the classic builder puts after `file:`, `dir:` and `multi:`:
/// they hash the source files with their build-time mtimes (a `COPY --from` of a folder another
/// stage made gives another hash on every build, with the same content), so each is left out
/// (`COPY dir in /opt/venv`); what was copied is the layer's diff ID.
pub(crate) fn without_source_hashes(created_by: &str) -> String {
    let mut out = String::with_capacity(created_by.len());
    let mut rest = created_by;
    'text: while !rest.is_empty() {
        for kind in SOURCE_HASH_KINDS {
            if let Some(after) = rest.strip_prefix(kind) {
                let hash_length = after
                    .bytes()
                    .take_while(|byte| byte.is_ascii_hexdigit())
                    .count();
                let at_word_start = out.is_empty() || out.ends_with(' ');
                if hash_length == 64 && at_word_start {
                    out.push_str(&kind[..kind.len() - 1]);
                    rest = &after[64..];
                    continue 'text;
                }
            }
        }
        let next = rest.chars().next().expect("not empty");
        out.push(next);
        rest = &rest[next.len_utf8()..];
    }
    out
}

/// The fields of a config's `config` (how to run the image) that a Dockerfile sets and the
/// daemon's inspect answer reports when they are set; the others (`Hostname`, `AttachStdin`, ...)
/// no Dockerfile instruction sets, so they are the same for every build of one base.
const RUN_CONFIG_FIELDS: &[&str] = &[
    "User",
    "ExposedPorts",
    "Env",
    "Cmd",
    "Healthcheck",
    "ArgsEscaped",
    "Volumes",
    "WorkingDir",
    "Entrypoint",
    "OnBuild",
    "Labels",
    "StopSignal",
    "Shell",
];

/// The config of a daemon build whose layers are those of an earlier build, made without
/// exporting it: `template` is the earlier build's normalized config, `run_config` the new
/// build's `config` object as the daemon's inspect answer gives it, `history` its steps
/// (`created_by`, `comment`) oldest first as the daemon's history answer gives them. Returns a
/// config for [`assemble`] (which normalizes it).
///
/// The steps the two builds share (the same `created_by` at the same place) keep the template's
/// entries; a step past them made no layer (the layers are the same), so it is `empty_layer`.
/// Fails when the steps that made a layer do not add up to `layers` layers: the caller then
/// exports and normalizes the build as usual.
pub(crate) fn config_from_template(
    template: &[u8],
    run_config: &Value,
    history: &[(String, String)],
    layers: usize,
) -> Result<Vec<u8>> {
    config_from_template_flagged(template, run_config, history, layers, None)
}

/// [`config_from_template`] where a step after the template's shared prefix made no layer when
/// `empty[index]` says so (`None`: none of them made one).
pub(crate) fn config_from_template_flagged(
    template: &[u8],
    run_config: &Value,
    history: &[(String, String)],
    layers: usize,
    empty: Option<&[bool]>,
) -> Result<Vec<u8>> {
    let mut config: Value = serde_json::from_slice(template).context("the stored config")?;
    let object = config
        .as_object_mut()
        .ok_or_else(|| anyhow!("the stored config is not a JSON object"))?;
    let new_run = run_config
        .as_object()
        .ok_or_else(|| anyhow!("the daemon's config of the build is not a JSON object"))?;
    let run = object
        .entry("config")
        .or_insert_with(|| Value::Object(Default::default()));
    let run = run
        .as_object_mut()
        .ok_or_else(|| anyhow!("the stored config's config is not an object"))?;
    for field in RUN_CONFIG_FIELDS {
        match new_run.get(*field) {
            Some(value) => run.insert((*field).to_string(), value.clone()),
            None => run.remove(*field),
        };
    }
    let old_steps: Vec<Value> = object
        .get("history")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut shared = true;
    let mut steps = Vec::with_capacity(history.len());
    for (index, (created_by, comment)) in history.iter().enumerate() {
        // The stored steps are normalized: compared without the builder's source hashes.
        let normalized_step = without_source_hashes(created_by);
        let old = old_steps.get(index).filter(|old| {
            old.get("created_by")
                .and_then(Value::as_str)
                .unwrap_or_default()
                == normalized_step
        });
        match old {
            Some(old) if shared => steps.push(old.clone()),
            _ => {
                shared = false;
                let mut step = serde_json::Map::new();
                step.insert("created_by".into(), Value::String(created_by.clone()));
                if !comment.is_empty() {
                    step.insert("comment".into(), Value::String(comment.clone()));
                }
                if empty.is_none_or(|empty| empty.get(index).copied().unwrap_or(true)) {
                    step.insert("empty_layer".into(), Value::Bool(true));
                }
                steps.push(Value::Object(step));
            }
        }
    }
    let with_layer = steps
        .iter()
        .filter(|step| {
            !step
                .get("empty_layer")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        })
        .count();
    if with_layer != layers {
        anyhow::bail!(
            "the build's history has {with_layer} steps that made a layer against {layers} layers"
        );
    }
    object.insert("history".into(), Value::Array(steps));
    Ok(serde_json::to_vec(&config)?)
}

/// Whether `path` (as in a layer) is a file that only records the build's time.
pub(crate) fn is_time_only(path: &str) -> bool {
    let path = path.trim_start_matches("./").trim_start_matches('/');
    TIME_ONLY_FILES.contains(&path)
}

/// A timestamp-based `.pyc` whose recorded source mtime is after `epoch` records `epoch` instead
/// (its source's mtime is clamped the same way). Returns whether it changed `data`.
pub(crate) fn clamp_pyc(data: &mut [u8], epoch: u64) -> bool {
    if data.len() < 16 || data[4..8] != [0, 0, 0, 0] {
        return false;
    }
    let recorded = u32::from_le_bytes([data[8], data[9], data[10], data[11]]);
    let epoch = u32::try_from(epoch).unwrap_or(u32::MAX);
    if recorded <= epoch {
        return false;
    }
    data[8..12].copy_from_slice(&epoch.to_le_bytes());
    true
}

/// One entry of a layer; its content borrowed from the layer where it is kept as it is.
struct LayerEntry<'a> {
    path: Vec<u8>,
    header: tar::Header,
    link: Option<Vec<u8>>,
    pax: Vec<(String, Vec<u8>)>,
    data: std::borrow::Cow<'a, [u8]>,
}

/// A layer tar with the rules of this module applied (see the module documentation).
#[cfg(test)]
pub(crate) fn normalize_layer(layer: &[u8], epoch: u64) -> Result<Vec<u8>> {
    normalize_layer_into(layer, epoch, Vec::with_capacity(layer.len()))
}

/// [`normalize_layer`] written into `out` as it is made (a [`GzipWriter`] compresses it as it
/// comes, so the normalized layer is never held whole); returns `out`.
pub(crate) fn normalize_layer_into<W: std::io::Write>(
    layer: &[u8],
    epoch: u64,
    out: W,
) -> Result<W> {
    let mut entries = Vec::new();
    let mut archive = tar::Archive::new(layer);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path_bytes().into_owned();
        let text = String::from_utf8_lossy(&path).into_owned();
        if is_time_only(&text) && entry.header().entry_type().is_file() {
            continue;
        }
        let link = entry.link_name_bytes().map(|link| link.into_owned());
        let mut pax = Vec::new();
        if let Some(extensions) = entry.pax_extensions()? {
            for extension in extensions {
                let extension = extension?;
                let key = extension
                    .key()
                    .map_err(|_| anyhow!("{text}: a PAX key that is not UTF-8"))?;
                if key.starts_with("SCHILY.xattr.") || key.starts_with("LIBARCHIVE.xattr.") {
                    pax.push((key.to_string(), extension.value_bytes().to_vec()));
                }
            }
        }
        // The content is borrowed from the layer (no copy of a multi-gigabyte layer), except
        // where it must change (a .pyc) or is not stored in one piece (a sparse file).
        let position = entry.raw_file_position() as usize;
        let size = entry.size() as usize;
        let mut data: std::borrow::Cow<'_, [u8]> = match layer.get(position..position + size) {
            Some(bytes) if entry.header().entry_type() != tar::EntryType::GNUSparse => {
                std::borrow::Cow::Borrowed(bytes)
            }
            _ => {
                let mut bytes = Vec::new();
                entry.read_to_end(&mut bytes)?;
                std::borrow::Cow::Owned(bytes)
            }
        };
        let source = entry.header();
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(source.entry_type());
        header.set_mode(source.mode()?);
        header.set_uid(source.uid()?);
        header.set_gid(source.gid()?);
        if let Some(name) = source.username()? {
            header.set_username(name)?;
        }
        if let Some(name) = source.groupname()? {
            header.set_groupname(name)?;
        }
        let device = matches!(
            source.entry_type(),
            tar::EntryType::Char | tar::EntryType::Block
        );
        if device {
            if let (Some(major), Some(minor)) = (source.device_major()?, source.device_minor()?) {
                header.set_device_major(major)?;
                header.set_device_minor(minor)?;
            }
        }
        header.set_mtime(source.mtime()?.min(epoch));
        if text.ends_with(".pyc") && source.entry_type().is_file() {
            let mut copy = data.to_vec();
            if clamp_pyc(&mut copy, epoch) {
                data = std::borrow::Cow::Owned(copy);
            }
        }
        header.set_size(data.len() as u64);
        entries.push(LayerEntry {
            path,
            header,
            link,
            pax,
            data,
        });
    }
    entries.sort_by(|a, b| {
        let a_hard = a.header.entry_type().is_hard_link();
        let b_hard = b.header.entry_type().is_hard_link();
        a_hard.cmp(&b_hard).then_with(|| a.path.cmp(&b.path))
    });
    let mut builder = tar::Builder::new(out);
    for mut entry in entries {
        use std::os::unix::ffi::OsStrExt;
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&entry.path));
        if !entry.pax.is_empty() {
            builder.append_pax_extensions(
                entry
                    .pax
                    .iter()
                    .map(|(key, value)| (key.as_str(), value.as_slice())),
            )?;
        }
        match &entry.link {
            Some(link)
                if entry.header.entry_type().is_hard_link()
                    || entry.header.entry_type().is_symlink() =>
            {
                let target = std::path::Path::new(std::ffi::OsStr::from_bytes(link));
                builder
                    .append_link(&mut entry.header, path, target)
                    .with_context(|| format!("{}", path.display()))?;
            }
            _ => builder
                .append_data(&mut entry.header, path, entry.data.as_ref())
                .with_context(|| format!("{}", path.display()))?,
        }
    }
    Ok(builder.into_inner()?)
}

/// gzip of `data` (see the module documentation): deterministic for a given `miniz_oxide`
/// version, [`GZIP_LEVEL`] and chunk size, whatever the number of threads.
#[cfg(test)]
pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
    let mut writer = GzipWriter::new();
    std::io::Write::write_all(&mut writer, data).expect("writing to memory");
    writer.finish().gzip
}

/// What a [`GzipWriter`] made: the gzip bytes, and the digest and size of what was written.
pub(crate) struct Gzipped {
    pub(crate) gzip: Vec<u8>,
    pub(crate) diff_id: Digest,
    pub(crate) unpacked_size: u64,
}

/// [`gzip`] as a writer, for a layer made as it is written: the same bytes, holding no more of
/// the input than a few chunks. Each full chunk is hashed here (CRC-32 for the trailer, SHA-256
/// for the diff ID) and handed to a pool of compressing threads, one per core, while this thread
/// goes on filling the next: what writes (a tar writer inflating wheels, a layer read from an
/// export) and the compressing overlap, and at most two chunks per thread wait. The compressed
/// chunks are appended in order. A full chunk is known not to be the last (the one that ends
/// the DEFLATE stream) only once a byte after it comes, so the chunk being filled waits for
/// that, or for [`GzipWriter::finish`]. A stream of one chunk starts no thread.
pub(crate) struct GzipWriter {
    out: Vec<u8>,
    /// The chunk being filled.
    current: Vec<u8>,
    crc: crc32fast::Hasher,
    sha256: Sha256,
    size: u64,
    /// How many threads compress.
    threads: usize,
    /// Started at the first full chunk that is not the last.
    pool: Option<CompressPool>,
}

/// What a compressing thread gives back: a chunk's index and its DEFLATE bytes (or its panic).
type Compressed = (usize, std::thread::Result<Vec<u8>>);

/// The threads that compress a [`GzipWriter`]'s chunks, and the chunks on their way.
struct CompressPool {
    /// Chunks to compress: index, bytes, whether it ends the stream.
    work: Option<std::sync::mpsc::SyncSender<(usize, Vec<u8>, bool)>>,
    done: std::sync::mpsc::Receiver<Compressed>,
    workers: Vec<std::thread::JoinHandle<()>>,
    /// Chunks handed out, and appended to the output, so far.
    sent: usize,
    appended: usize,
    /// Chunks compressed ahead of one still being compressed.
    early: BTreeMap<usize, Vec<u8>>,
}

impl CompressPool {
    fn start(threads: usize) -> CompressPool {
        let (work, queue) = std::sync::mpsc::sync_channel::<(usize, Vec<u8>, bool)>(threads);
        let queue = Arc::new(std::sync::Mutex::new(queue));
        let (finished, done) = std::sync::mpsc::channel();
        let workers = (0..threads)
            .map(|_| {
                let queue = Arc::clone(&queue);
                let finished = finished.clone();
                std::thread::spawn(move || loop {
                    let job = queue.lock().map(|queue| queue.recv());
                    let Ok(Ok((index, chunk, last))) = job else {
                        return;
                    };
                    let compressed = std::panic::catch_unwind(|| deflate_chunk(&chunk, last));
                    if finished.send((index, compressed)).is_err() {
                        return;
                    }
                })
            })
            .collect();
        CompressPool {
            work: Some(work),
            done,
            workers,
            sent: 0,
            appended: 0,
            early: BTreeMap::new(),
        }
    }

    /// Hands `chunk` to a thread, first waiting while `2 * threads` chunks are on their way.
    fn send(&mut self, chunk: Vec<u8>, last: bool, out: &mut Vec<u8>) {
        while self.sent - self.appended >= 2 * self.workers.len() {
            self.collect(out);
        }
        self.work
            .as_ref()
            .expect("the pool takes chunks until it is finished")
            .send((self.sent, chunk, last))
            .expect("the compressing threads stopped");
        self.sent += 1;
    }

    /// Waits for one compressed chunk, and appends to `out` every chunk that is next in order.
    fn collect(&mut self, out: &mut Vec<u8>) {
        let (index, compressed) = self.done.recv().expect("the compressing threads stopped");
        match compressed {
            Ok(bytes) => {
                self.early.insert(index, bytes);
            }
            Err(panic) => std::panic::resume_unwind(panic),
        }
        while let Some(bytes) = self.early.remove(&self.appended) {
            out.extend_from_slice(&bytes);
            self.appended += 1;
        }
    }

    /// Waits for every chunk handed out, appended in order, and ends the threads.
    fn finish(mut self, out: &mut Vec<u8>) {
        while self.appended < self.sent {
            self.collect(out);
        }
    }
}

impl Drop for CompressPool {
    fn drop(&mut self) {
        // The threads end once the queue is closed (a writer dropped before its end included).
        self.work = None;
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

impl GzipWriter {
    pub(crate) fn new() -> GzipWriter {
        let threads = std::thread::available_parallelism()
            .map(|count| count.get())
            .unwrap_or(1);
        GzipWriter::with_threads(threads)
    }

    /// A writer whose chunks `threads` threads compress (the bytes do not depend on it).
    pub(crate) fn with_threads(threads: usize) -> GzipWriter {
        // ID1 ID2 CM=deflate FLG=0 MTIME=0 XFL=0 OS=255 (unknown).
        let out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
        GzipWriter {
            out,
            current: Vec::new(),
            crc: crc32fast::Hasher::new(),
            sha256: Sha256::new(),
            size: 0,
            threads: threads.max(1),
            pool: None,
        }
    }

    /// Hashes `chunk` and compresses it (the last ends the stream): on the pool where one was
    /// started, else here.
    fn compress(&mut self, chunk: Vec<u8>, last: bool) {
        self.crc.update(&chunk);
        self.sha256.update(&chunk);
        match &mut self.pool {
            Some(pool) => pool.send(chunk, last, &mut self.out),
            None if last => {
                let bytes = deflate_chunk(&chunk, true);
                self.out.extend_from_slice(&bytes);
            }
            None => {
                let mut pool = CompressPool::start(self.threads);
                pool.send(chunk, last, &mut self.out);
                self.pool = Some(pool);
            }
        }
    }

    /// Ends the stream: the chunk being filled ends it (an empty one when nothing was
    /// written), every chunk is appended in order, then the trailer.
    pub(crate) fn finish(mut self) -> Gzipped {
        let last = std::mem::take(&mut self.current);
        self.compress(last, true);
        if let Some(pool) = self.pool.take() {
            pool.finish(&mut self.out);
        }
        let crc = self.crc.finalize();
        self.out.extend_from_slice(&crc.to_le_bytes());
        self.out
            .extend_from_slice(&(self.size as u32).to_le_bytes());
        Gzipped {
            gzip: self.out,
            diff_id: Digest::from_sha256(self.sha256.finalize().as_slice()),
            unpacked_size: self.size,
        }
    }
}

impl std::io::Write for GzipWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let mut rest = data;
        while !rest.is_empty() {
            if self.current.len() == GZIP_CHUNK {
                // A byte follows this chunk: it is not the last.
                let full = std::mem::replace(&mut self.current, Vec::with_capacity(GZIP_CHUNK));
                self.compress(full, false);
            }
            if self.current.capacity() == 0 {
                self.current.reserve_exact(GZIP_CHUNK);
            }
            let take = (GZIP_CHUNK - self.current.len()).min(rest.len());
            self.current.extend_from_slice(&rest[..take]);
            self.size += take as u64;
            rest = &rest[take..];
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Raw DEFLATE of one chunk by a fresh compressor: the last chunk ends the stream, the others
/// end with a sync flush (byte aligned, not final), so the chunks concatenate into one stream.
fn deflate_chunk(chunk: &[u8], last: bool) -> Vec<u8> {
    use miniz_oxide::deflate::core::{
        compress, create_comp_flags_from_zip_params, CompressorOxide, TDEFLFlush, TDEFLStatus,
    };
    let flags = create_comp_flags_from_zip_params(GZIP_LEVEL.into(), 0, 0);
    let mut compressor = CompressorOxide::new(flags);
    let flush = if last {
        TDEFLFlush::Finish
    } else {
        TDEFLFlush::Sync
    };
    // Stored blocks cost 5 bytes per 64 KiB: this room always holds the whole chunk.
    let mut out = vec![0; chunk.len() + chunk.len() / 64 + 1024];
    let (status, consumed, written) = compress(&mut compressor, chunk, &mut out, flush);
    let complete = if last {
        status == TDEFLStatus::Done
    } else {
        status == TDEFLStatus::Okay
    };
    assert!(
        complete && consumed == chunk.len() && written < out.len(),
        "miniz_oxide left a chunk unfinished ({status:?}, {consumed} of {} bytes)",
        chunk.len()
    );
    out.truncate(written);
    out
}

/// CRC-32 (IEEE 802.3, as gzip's trailer) of `data`.
#[cfg(test)]
pub(crate) fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// Checks `gzip` is a whole gzip member and returns what it holds.
#[cfg(test)]
pub(crate) fn gunzip(gzip: &[u8]) -> Result<Vec<u8>> {
    if gzip.len() < 18 || gzip[0..3] != [0x1f, 0x8b, 8] {
        anyhow::bail!("not a gzip stream");
    }
    let flags = gzip[3];
    let mut start = 10;
    if flags & 4 != 0 {
        let extra = u16::from_le_bytes([gzip[10], gzip[11]]) as usize;
        start += 2 + extra;
    }
    for bit in [8u8, 16] {
        if flags & bit != 0 {
            let end = gzip[start..]
                .iter()
                .position(|byte| *byte == 0)
                .ok_or_else(|| anyhow!("a gzip header field without its end"))?;
            start += end + 1;
        }
    }
    if flags & 2 != 0 {
        start += 2;
    }
    let body = gzip
        .get(start..gzip.len() - 8)
        .ok_or_else(|| anyhow!("a gzip stream shorter than its header"))?;
    let data = miniz_oxide::inflate::decompress_to_vec(body)
        .map_err(|error| anyhow!("the gzip stream does not inflate: {error:?}"))?;
    let crc = u32::from_le_bytes(gzip[gzip.len() - 8..gzip.len() - 4].try_into()?);
    if crc32(&data) != crc {
        anyhow::bail!("the gzip stream's CRC does not match its content");
    }
    Ok(data)
}

#[cfg(test)]
mod tests;
