//! The base images' pins (`images/bases.lock`) as data: which bytes each base reference the
//! images are built `FROM` stood for when `imagegen lock` looked it up. A base a registry serves
//! is pinned by its manifest digest (an index's when it is one, with each platform's manifest
//! digest beside it); a base only the daemon holds (loaded or imported, no registry digest) by
//! its image ID. This module owns the file's schema and text, and reading a registry manifest
//! into a pin; what the pins mean for the images is `resolve::bases`'.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::digest::Digest;
/// The file name of the pins, at the top of the images directory.
pub(crate) const BASES_FILE: &str = "bases.lock";

/// The `format` the file declares.
const FORMAT: &str = "imagegen-bases-v1";

/// What one base reference is pinned to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "lowercase", deny_unknown_fields)]
pub enum BasePin {
    /// A registry serves it: the digest the tag resolved to (an index's, or a single manifest's),
    /// and for an index each platform's manifest digest (`linux/amd64`, `linux/arm64/v8`).
    Registry {
        digest: Digest,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        platforms: BTreeMap<String, Digest>,
    },
    /// Only the daemon holds it (loaded or imported): its image ID.
    Daemon { image_id: Digest },
}

impl BasePin {
    /// The digest or image ID, for people.
    pub(crate) fn id(&self) -> &Digest {
        match self {
            BasePin::Registry { digest, .. } => digest,
            BasePin::Daemon { image_id } => image_id,
        }
    }

    /// How it is pinned, in words (`registry sha256:…` or `daemon image ID sha256:…`).
    pub fn describe(&self) -> String {
        match self {
            BasePin::Registry { digest, .. } => format!("registry digest {digest}"),
            BasePin::Daemon { image_id } => format!("daemon image ID {image_id}"),
        }
    }
}

/// Every pin, by base reference as the matrix resolves it (`nvidia/cuda:13.0.0-base-ubuntu24.04`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BasePins {
    format: String,
    pub(crate) bases: BTreeMap<String, BasePin>,
}

impl BasePins {
    pub(crate) fn new(bases: BTreeMap<String, BasePin>) -> BasePins {
        BasePins {
            format: FORMAT.to_string(),
            bases,
        }
    }

    /// Reads the file's text; `Err` says what is wrong (the caller names the file).
    pub(crate) fn parse(text: &str) -> Result<BasePins, String> {
        let pins: BasePins = serde_json::from_str(text).map_err(|error| {
            format!("{error} (line {}, column {})", error.line(), error.column())
        })?;
        if pins.format != FORMAT {
            return Err(format!(
                "format {:?} is not {FORMAT:?}: it was written by another imagegen",
                pins.format
            ));
        }
        for reference in pins.bases.keys() {
            if reference.contains('@') {
                return Err(format!(
                    "{reference:?} carries a digest: pins are keyed by the reference as the matrix names it"
                ));
            }
        }
        Ok(pins)
    }

    /// The file's text: pretty JSON with sorted keys and a final newline (same pins, same bytes).
    pub(crate) fn to_text(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("pins serialize");
        text.push('\n');
        text
    }
}

/// The pin of a registry manifest `digest` whose bytes are `manifest`: for an index (OCI index or
/// Docker manifest list), each platform's manifest digest; for a single manifest, none.
pub(crate) fn registry_pin(digest: Digest, manifest: &[u8]) -> Result<BasePin, String> {
    let value: serde_json::Value = serde_json::from_slice(manifest)
        .map_err(|error| format!("the manifest is not JSON: {error}"))?;
    let mut platforms = BTreeMap::new();
    if let Some(entries) = value["manifests"].as_array() {
        for entry in entries {
            let platform = &entry["platform"];
            let (Some(os), Some(architecture)) =
                (platform["os"].as_str(), platform["architecture"].as_str())
            else {
                continue;
            };
            // Attestation manifests (BuildKit's `unknown/unknown`) are not images.
            if os == "unknown" {
                continue;
            }
            let name = match platform["variant"].as_str() {
                Some(variant) => format!("{os}/{architecture}/{variant}"),
                None => format!("{os}/{architecture}"),
            };
            let entry_digest = entry["digest"]
                .as_str()
                .ok_or_else(|| format!("the index entry of {name} has no digest"))?;
            let entry_digest = Digest::parse(entry_digest)
                .map_err(|error| format!("the index entry of {name}: {error}"))?;
            platforms.insert(name, entry_digest);
        }
    }
    Ok(BasePin::Registry { digest, platforms })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(byte: u8) -> Digest {
        Digest::of(&[byte])
    }

    fn registry(byte: u8) -> BasePin {
        BasePin::Registry {
            digest: digest(byte),
            platforms: BTreeMap::new(),
        }
    }

    #[test]
    fn pins_round_trip_through_their_text_with_sorted_keys() {
        let pins = BasePins::new(BTreeMap::from([
            ("z/base:1".to_string(), registry(1)),
            (
                "a/local:1".to_string(),
                BasePin::Daemon {
                    image_id: digest(2),
                },
            ),
        ]));
        let text = pins.to_text();
        assert!(text.find("a/local:1").unwrap() < text.find("z/base:1").unwrap());
        assert!(text.contains("\"source\": \"daemon\""), "{text}");
        assert_eq!(BasePins::parse(&text).unwrap(), pins);
    }

    #[test]
    fn a_pins_file_of_another_format_or_with_digests_in_keys_is_refused() {
        let other = r#"{"format": "v0", "bases": {}}"#;
        assert!(BasePins::parse(other).unwrap_err().contains("v0"));
        let keyed = format!(
            r#"{{"format": "{FORMAT}", "bases": {{"x/y:1@{}": {{"source": "daemon", "image_id": "{}"}}}}}}"#,
            digest(1),
            digest(1)
        );
        assert!(BasePins::parse(&keyed)
            .unwrap_err()
            .contains("carries a digest"));
        let unknown = format!(r#"{{"format": "{FORMAT}", "bases": {{}}, "extra": 1}}"#);
        assert!(BasePins::parse(&unknown).unwrap_err().contains("extra"));
    }

    #[test]
    fn an_index_pin_lists_its_platforms_without_attestations() {
        let index = format!(
            r#"{{"schemaVersion": 2, "manifests": [
                {{"digest": "{}", "platform": {{"os": "linux", "architecture": "amd64"}}}},
                {{"digest": "{}", "platform": {{"os": "linux", "architecture": "arm64", "variant": "v8"}}}},
                {{"digest": "{}", "platform": {{"os": "unknown", "architecture": "unknown"}}}}
            ]}}"#,
            digest(1),
            digest(2),
            digest(3)
        );
        let BasePin::Registry { platforms, .. } =
            registry_pin(digest(9), index.as_bytes()).unwrap()
        else {
            panic!("a registry pin")
        };
        assert_eq!(
            platforms.keys().collect::<Vec<_>>(),
            ["linux/amd64", "linux/arm64/v8"]
        );
        let single = registry_pin(digest(9), br#"{"schemaVersion": 2, "layers": []}"#).unwrap();
        assert_eq!(single, registry(9));
    }
}
