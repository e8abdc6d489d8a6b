//! The bake file as `docker buildx bake` reads it, typed, so `imagegen bake` can only write keys
//! buildx knows and a test can read the written JSON back refusing anything else.
//!
//! buildx publishes no JSON schema for bake files (its `json-schema` command covers build
//! policies only, and SchemaStore's `docker-bake.json` is out of date), so this mirrors the Go
//! types that buildx decodes a bake file into: `Config`, `Group` and `Target` in `bake/bake.go`,
//! and the attribute types of `util/buildflags/*_cty.go`, at docker/buildx commit
//! 461836ba0fcb3e847dab6045a726889faa150bdb (2026-08-20). A JSON bake file is HCL's JSON form:
//! `group` and `target` are objects keyed by block label (the name), and each block's attributes
//! are the struct's `json`/`hcl` keys, kebab-case. buildx refuses an attribute a block does not
//! have ("Unsupported argument"), which `deny_unknown_fields` reproduces.
//!
//! Left out on purpose: top-level `variable` and `function` blocks and a target's `matrix` and
//! `name` (HCL-level features that `bake/hclparser` expands before decoding: imagegen writes
//! every target out itself), and top-level attributes, which buildx would read as variables.
//!
//! Key order: the fields are declared in alphabetical order of their keys, and
//! [`BakeFile::to_json`] sorts keys anyway, so the file is byte-identical for the same matrix.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A `docker-bake.json`: `Config` in bake.go (`group`, `target`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BakeFile {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group: BTreeMap<String, Group>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub target: BTreeMap<String, Target>,
}

/// `Group` in bake.go: `targets` is required (`hcl:"targets"`, no `optional`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    pub targets: Vec<String>,
}

/// `Target` in bake.go, every attribute optional. Maps of `*string` (`args`, `labels`,
/// `extra-hosts`) take `null` to unset an inherited value, hence `Option<String>` values.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Target {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) annotations: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) args: BTreeMap<String, Option<String>>,
    /// `buildflags.Attests`: `"type=sbom"` or `{"type": "sbom", ...}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) attest: Vec<StringOrAttributes>,
    /// `buildflags.CacheOptions`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) cache_from: Vec<StringOrAttributes>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) cache_to: Vec<StringOrAttributes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) call: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) context: Option<String>,
    /// Named contexts: a reference or stage name to a path, URL, `docker-image://` or
    /// `target:<name>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) contexts: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    /// Relative to `context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) dockerfile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) dockerfile_inline: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) entitlements: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) extra_hosts: BTreeMap<String, Option<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) inherits: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) labels: BTreeMap<String, Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) network: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) no_cache: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) no_cache_filter: Vec<String>,
    /// `buildflags.Exports`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) output: Vec<StringOrAttributes>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) platforms: Vec<String>,
    /// `buildflags.PolicyConfigs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) policy: Vec<StringOrAttributes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pull: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resources: Option<Resources>,
    /// `buildflags.Secrets`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) secret: Vec<SecretEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) shm_size: Option<String>,
    /// `buildflags.SSHKeys`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) ssh: Vec<SshEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tags: Vec<String>,
    /// The Dockerfile stage to build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) ulimits: Vec<String>,
}

/// A list entry buildx takes as a CSV string (`type=registry,ref=...`) or as an object of
/// attributes (`cty.Map(cty.String)` in `cache_cty.go`, `attests_cty.go`, `export_cty.go`;
/// string, bool or number values in `policy_cty.go`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum StringOrAttributes {
    String(String),
    Attributes(BTreeMap<String, Scalar>),
}

/// An attribute value: HCL converts a bool or a number to the string a `cty.Map(cty.String)`
/// wants, so buildx takes all three.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Scalar {
    String(String),
    Bool(bool),
    Number(serde_json::Number),
}

/// A `secret` entry: `id=...,src=...` or `{"id", "src", "env"}` (`secrets_cty.go`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum SecretEntry {
    String(String),
    Object(Secret),
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Secret {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) src: Option<String>,
}

/// An `ssh` entry: `default` or `{"id", "paths"}` (`ssh_cty.go`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum SshEntry {
    String(String),
    Object(Ssh),
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Ssh {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) paths: Vec<String>,
}

/// `buildflags.ResourcesConfig` (`resources_cty.go`): cgroup limits of `RUN` steps.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Resources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cpu_period: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cpu_quota: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cpu_shares: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cpuset_cpus: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cpuset_mems: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) memory: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) memory_swap: Option<String>,
}

impl BakeFile {
    /// Pretty JSON with sorted keys and a final newline: what `imagegen bake` writes.
    pub fn to_json(&self) -> String {
        // Through `Value`, whose maps (serde_json without `preserve_order`) sort their keys.
        let value = serde_json::to_value(self).expect("a bake file serializes");
        let mut text = serde_json::to_string_pretty(&value).expect("a JSON value serializes");
        text.push('\n');
        text
    }

    /// Reads a bake file, refusing any key buildx's bake definition does not have.
    pub fn from_json(text: &str) -> Result<BakeFile, serde_json::Error> {
        serde_json::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every attribute of buildx's `Target` (bake.go at 461836ba), as its `json` tag spells it.
    const BUILDX_TARGET_KEYS: [&str; 29] = [
        "description",
        "inherits",
        "annotations",
        "attest",
        "context",
        "contexts",
        "dockerfile",
        "dockerfile-inline",
        "args",
        "labels",
        "tags",
        "cache-from",
        "cache-to",
        "target",
        "secret",
        "ssh",
        "platforms",
        "output",
        "pull",
        "no-cache",
        "network",
        "no-cache-filter",
        "shm-size",
        "ulimits",
        "resources",
        "call",
        "entitlements",
        "extra-hosts",
        "policy",
    ];

    /// A target with every attribute set, each in the shapes buildx accepts.
    fn full_target() -> serde_json::Value {
        serde_json::json!({
            "description": "d", "inherits": ["base"], "annotations": ["index:k=v"],
            "attest": ["type=sbom", {"type": "provenance", "mode": "max"}],
            "context": ".", "contexts": {"base": "target:base"}, "dockerfile": "Dockerfile",
            "dockerfile-inline": "FROM scratch", "args": {"A": "1", "UNSET": null},
            "labels": {"l": "v"}, "tags": ["r/i:t"],
            "cache-from": ["type=registry,ref=r/c"],
            "cache-to": [{"type": "registry", "ref": "r/c", "ignore-error": true, "compression-level": 3}],
            "target": "stage", "secret": ["id=s,src=f", {"id": "t", "env": "T"}],
            "ssh": ["default", {"id": "key", "paths": ["/k"]}], "platforms": ["linux/amd64"],
            "output": ["type=registry"], "pull": true, "no-cache": false, "network": "host",
            "no-cache-filter": ["stage"], "shm-size": "128m", "ulimits": ["nofile=1024:1024"],
            "resources": {"memory": "2g", "memory-swap": "4g", "cpu-shares": 512,
                          "cpu-period": 100000, "cpu-quota": 50000, "cpuset-cpus": "0-1",
                          "cpuset-mems": "0"},
            "call": "build", "entitlements": ["network.host"], "extra-hosts": {"h": "10.0.0.1"},
            "policy": ["filename=a.rego", {"filename": "p.rego", "reset": true}]
        })
    }

    #[test]
    fn every_buildx_target_key_is_modelled_and_round_trips() {
        let target = full_target();
        let keys: Vec<&str> = target
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = BUILDX_TARGET_KEYS.to_vec();
        expected.sort_unstable();
        assert_eq!(keys, expected, "the fixture sets every buildx key once");
        let file =
            serde_json::json!({"group": {"default": {"targets": ["t"]}}, "target": {"t": target}});
        let text = serde_json::to_string_pretty(&file).unwrap() + "\n";
        let read = BakeFile::from_json(&text).unwrap();
        assert_eq!(read.to_json(), text, "nothing dropped or reordered");
    }

    #[test]
    fn keys_buildx_does_not_have_are_refused() {
        for (key, value) in [
            ("platform", serde_json::json!(["linux/amd64"])),
            ("dockerfile_inline", serde_json::json!("FROM scratch")),
            ("cache_from", serde_json::json!([])),
            ("matrix", serde_json::json!({"v": ["1"]})),
        ] {
            let mut target = full_target();
            target[key] = value;
            let text = serde_json::json!({"target": {"t": target}}).to_string();
            let error = BakeFile::from_json(&text).unwrap_err().to_string();
            assert!(error.contains(&format!("unknown field `{key}`")), "{error}");
        }
        let mut resources = full_target();
        resources["resources"]["memory_swap"] = serde_json::json!("1g");
        let text = serde_json::json!({"target": {"t": resources}}).to_string();
        assert!(BakeFile::from_json(&text).is_err());
        for file in [
            serde_json::json!({"targets": {}}),
            serde_json::json!({"group": {"default": {}}}),
            serde_json::json!({"group": {"default": {"targets": ["t"], "target": "t"}}}),
            serde_json::json!({"target": {"t": {"tags": "r/i:t"}}}),
        ] {
            assert!(BakeFile::from_json(&file.to_string()).is_err(), "{file}");
        }
    }
}
