//! `imagegen diff-build`: what differs between two builds of an image, per layer and file, so a
//! build that did not reproduce (an apt archive that moved, a tool that stamps the time) is
//! explained by name. Pure: it reads `docker save` archives handed to it and returns the report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use crate::model::digest::Digest;

/// What one file of a layer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileFacts {
    pub(crate) size: u64,
    pub(crate) mode: u32,
    /// `f` file, `d` directory, `l` symlink, `h` hard link, `o` other.
    pub(crate) kind: char,
    /// sha256 of the content, or of the link target for links.
    pub(crate) content: Digest,
}

/// Every entry of a layer tar by path (leading `./` and `/` dropped).
pub(crate) fn layer_files(layer: &[u8]) -> Result<BTreeMap<String, FileFacts>> {
    let mut files = BTreeMap::new();
    let mut archive = tar::Archive::new(layer);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = String::from_utf8_lossy(&entry.path_bytes())
            .trim_start_matches("./")
            .trim_start_matches('/')
            .to_string();
        let kind = match entry.header().entry_type() {
            tar::EntryType::Directory => 'd',
            tar::EntryType::Symlink => 'l',
            tar::EntryType::Link => 'h',
            tar::EntryType::Regular | tar::EntryType::Continuous => 'f',
            _ => 'o',
        };
        // Permission bits only: some writers put the file type bits into the mode too.
        let mode = entry.header().mode()? & 0o7777;
        let content = match entry.link_name_bytes() {
            Some(link) => Digest::of(&link),
            None => {
                let mut data = Vec::new();
                entry.read_to_end(&mut data)?;
                Digest::of(&data)
            }
        };
        files.insert(
            path,
            FileFacts {
                size: entry.size(),
                mode,
                kind,
                content,
            },
        );
    }
    Ok(files)
}

/// One layer of an image as `diff-build` compares it.
pub(crate) struct LayerListing {
    pub(crate) diff_id: Digest,
    /// The history step that made it (`created_by`), when the config says.
    pub(crate) step: Option<String>,
    pub(crate) files: BTreeMap<String, FileFacts>,
}

/// An image as `diff-build` compares it: its config and its layers' files.
pub(crate) struct ImageListing {
    pub(crate) config: Value,
    pub(crate) layers: Vec<LayerListing>,
}

/// Reads a `docker save` archive into an [`ImageListing`], one layer in memory at a time.
pub(crate) fn read_export(archive: impl Read) -> Result<ImageListing> {
    let mut reader = tar::Archive::new(archive);
    let mut layers: BTreeMap<String, (Digest, BTreeMap<String, FileFacts>)> = BTreeMap::new();
    let mut jsons: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for entry in reader.entries().context("reading the image export")? {
        let mut entry = entry.context("reading the image export")?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path()?.to_string_lossy().into_owned();
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes)?;
        if path.ends_with(".json") {
            jsons.insert(path, bytes);
        } else if path.ends_with(".tar") || path.starts_with("blobs/") {
            let files = layer_files(&bytes).with_context(|| format!("reading layer {path}"))?;
            layers.insert(path, (Digest::of(&bytes), files));
        }
    }
    let manifest: Value = serde_json::from_slice(
        jsons
            .get("manifest.json")
            .ok_or_else(|| anyhow!("the image export has no manifest.json"))?,
    )?;
    let image = &manifest[0];
    let config_name = image["Config"]
        .as_str()
        .ok_or_else(|| anyhow!("the export's manifest.json names no Config"))?;
    let config: Value = serde_json::from_slice(
        jsons
            .get(config_name)
            .ok_or_else(|| anyhow!("the image export has no {config_name}"))?,
    )?;
    let steps: Vec<Option<String>> = config["history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|step| step["empty_layer"].as_bool() != Some(true))
        .map(|step| step["created_by"].as_str().map(str::to_string))
        .collect();
    let mut listed = Vec::new();
    for (index, name) in image["Layers"].as_array().into_iter().flatten().enumerate() {
        let name = name.as_str().unwrap_or_default();
        let (diff_id, files) = layers
            .get(name)
            .cloned()
            .ok_or_else(|| anyhow!("the image export has no layer {name}"))?;
        listed.push(LayerListing {
            diff_id,
            step: steps.get(index).cloned().flatten(),
            files,
        });
    }
    Ok(ImageListing {
        config,
        layers: listed,
    })
}

/// Every leaf of a JSON value by its JSON pointer.
fn leaves(value: &Value, pointer: String, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                leaves(value, format!("{pointer}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (index, value) in items.iter().enumerate() {
                leaves(value, format!("{pointer}/{index}"), out);
            }
        }
        other => {
            out.insert(pointer, other.to_string());
        }
    }
}

fn describe(facts: &FileFacts) -> String {
    format!(
        "{} {} bytes mode {:o} {}",
        facts.kind,
        facts.size,
        facts.mode,
        facts.content.short()
    )
}

/// The differences between `a` and `b`, for people; empty when they are the same image.
pub(crate) fn diff_images(a: &ImageListing, b: &ImageListing) -> String {
    let mut out = String::new();
    let (mut config_a, mut config_b) = (BTreeMap::new(), BTreeMap::new());
    leaves(&a.config, String::new(), &mut config_a);
    leaves(&b.config, String::new(), &mut config_b);
    let mut config_lines = Vec::new();
    for (key, value) in &config_a {
        // diff_ids are the layers, reported below one by one.
        if key.starts_with("/rootfs/diff_ids") {
            continue;
        }
        match config_b.get(key) {
            None => config_lines.push(format!("  - {key} {value}")),
            Some(other) if other != value => {
                config_lines.push(format!("  ~ {key} {value} -> {other}"))
            }
            _ => {}
        }
    }
    for (key, value) in &config_b {
        if !key.starts_with("/rootfs/diff_ids") && !config_a.contains_key(key) {
            config_lines.push(format!("  + {key} {value}"));
        }
    }
    if !config_lines.is_empty() {
        writeln!(out, "config:").ok();
        for line in config_lines {
            writeln!(out, "{line}").ok();
        }
    }
    let count = a.layers.len().max(b.layers.len());
    let mut same = Vec::new();
    for index in 0..count {
        let number = index + 1;
        match (a.layers.get(index), b.layers.get(index)) {
            (Some(x), Some(y)) if x.diff_id == y.diff_id => same.push(number.to_string()),
            (Some(x), Some(y)) => {
                let step = y.step.as_deref().or(x.step.as_deref()).unwrap_or("?");
                writeln!(
                    out,
                    "layer {number} of {count} ({}): {} -> {}",
                    step.trim(),
                    x.diff_id.short(),
                    y.diff_id.short()
                )
                .ok();
                for (path, facts) in &x.files {
                    match y.files.get(path) {
                        None => writeln!(out, "  - {path} ({})", describe(facts)).ok(),
                        Some(other) if other != facts => {
                            let mut changes = Vec::new();
                            if facts.kind != other.kind {
                                changes.push(format!("type {} -> {}", facts.kind, other.kind));
                            }
                            if facts.size != other.size {
                                changes.push(format!("size {} -> {}", facts.size, other.size));
                            }
                            if facts.mode != other.mode {
                                changes.push(format!("mode {:o} -> {:o}", facts.mode, other.mode));
                            }
                            if facts.content != other.content {
                                changes.push(format!(
                                    "content {} -> {}",
                                    facts.content.short(),
                                    other.content.short()
                                ));
                            }
                            writeln!(out, "  ~ {path}: {}", changes.join(", ")).ok()
                        }
                        // Same facts, other bytes in the tar: an mtime, an owner name, the order.
                        _ => None,
                    };
                }
                for (path, facts) in &y.files {
                    if !x.files.contains_key(path) {
                        writeln!(out, "  + {path} ({})", describe(facts)).ok();
                    }
                }
                let named = x
                    .files
                    .iter()
                    .any(|(path, facts)| y.files.get(path) != Some(facts))
                    || y.files.keys().any(|path| !x.files.contains_key(path));
                if !named {
                    writeln!(
                        out,
                        "  the same files, sizes, modes and contents: the tars differ in times, owners' names or order"
                    )
                    .ok();
                }
            }
            (Some(x), None) => {
                writeln!(
                    out,
                    "layer {number} of {count}: only in the first ({})",
                    x.diff_id.short()
                )
                .ok();
            }
            (None, Some(y)) => {
                writeln!(
                    out,
                    "layer {number} of {count}: only in the second ({})",
                    y.diff_id.short()
                )
                .ok();
            }
            (None, None) => {}
        }
    }
    if !out.is_empty() && !same.is_empty() {
        writeln!(out, "same layers: {}", same.join(", ")).ok();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(files: &[(&str, &[u8], u32)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, data, mode) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(*mode);
            builder.append_data(&mut header, path, *data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn listing(config: Value, layers: &[Vec<u8>]) -> ImageListing {
        ImageListing {
            config,
            layers: layers
                .iter()
                .map(|bytes| LayerListing {
                    diff_id: Digest::of(bytes),
                    step: Some("RUN apt-get install -y htop".into()),
                    files: layer_files(bytes).unwrap(),
                })
                .collect(),
        }
    }

    #[test]
    fn names_each_file_that_differs_and_the_layers_that_do_not() {
        let base = layer(&[("bin/sh", b"sh", 0o755)]);
        let first = layer(&[
            ("usr/bin/htop", b"htop 3.2.1", 0o755),
            ("var/lib/apt/lists/deb", b"Date: Mon", 0o644),
            ("etc/old", b"x", 0o644),
        ]);
        let second = layer(&[
            ("usr/bin/htop", b"htop 3.2.2!", 0o755),
            ("var/lib/apt/lists/deb", b"Date: Tue", 0o600),
            ("etc/new", b"y", 0o644),
        ]);
        let config = serde_json::json!({"config": {"Labels": {"a": "1"}}});
        let other = serde_json::json!({"config": {"Labels": {"a": "2"}}});
        let report = diff_images(
            &listing(config.clone(), &[base.clone(), first]),
            &listing(other, &[base.clone(), second]),
        );
        let expected = format!(
            "config:\n  ~ /config/Labels/a \"1\" -> \"2\"\nlayer 2 of 2 (RUN apt-get install -y htop): {} -> {}\n  - etc/old (f 1 bytes mode 644 {})\n  ~ usr/bin/htop: size 10 -> 11, content {} -> {}\n  ~ var/lib/apt/lists/deb: mode 644 -> 600, content {} -> {}\n  + etc/new (f 1 bytes mode 644 {})\nsame layers: 1\n",
            report.lines().nth(2).unwrap().split(": ").nth(1).unwrap().split(" -> ").next().unwrap(),
            report.lines().nth(2).unwrap().split(" -> ").nth(1).unwrap(),
            Digest::of(b"x").short(),
            Digest::of(b"htop 3.2.1").short(),
            Digest::of(b"htop 3.2.2!").short(),
            Digest::of(b"Date: Mon").short(),
            Digest::of(b"Date: Tue").short(),
            Digest::of(b"y").short(),
        );
        assert_eq!(report, expected);
        assert_eq!(
            diff_images(
                &listing(config.clone(), std::slice::from_ref(&base)),
                &listing(config, &[base])
            ),
            "",
            "the same image has no differences"
        );
    }
}
