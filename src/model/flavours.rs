//! Flavours: named images built FROM a runtime image (`…-runtime-jupyter`), each with its own
//! tag, aliases, lock, fingerprint, self-test and record. This module holds their schema in
//! `matrix.yaml` (`flavours:`), the two built in (`jupyter`, `ssh`: off until the matrix names
//! them), the checks on a flavour's name and values, and what a flavour adds once the built-in
//! part and the matrix's are put together. It does no I/O.
//!
//! ```yaml
//! flavours:
//!   jupyter: {}                 # JupyterLab on 8888 as the image's user, token from JUPYTER_TOKEN
//!   ssh: {}                     # OpenSSH on 2222, key-only, host keys made at container start
//!   tools:                      # a flavour of the team's own
//!     pip: [rich]
//!     apt: [git]
//!     steps: steps/tools.Dockerfile
//!   build:                      # built FROM each devel image instead (`…-devel-build`)
//!     from: devel
//!     apt: [make]
//! ```
//!
//! A flavour is built FROM the runtime images unless it says `from: devel`. Its Python packages
//! are resolved into its own lock with its parent image's lock as
//! constraints, so nothing the parent image holds changes version; its apt packages are
//! installed on top (their versions are recorded like the runtime image's).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What `matrix.yaml` says of one flavour (all optional: `jupyter: {}` turns a built-in on).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlavourDefinition {
    /// The variant whose images the flavour is built FROM; runtime when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) from: Option<FlavourFrom>,
    /// Extra requirements (PEP 508), locked within the runtime image's lock.
    #[serde(default)]
    pub(crate) pip: Vec<String>,
    /// Extra Debian/Ubuntu packages.
    #[serde(default)]
    pub(crate) apt: Vec<String>,
    /// A Dockerfile fragment under the project, rendered with the image's values (as root).
    #[serde(default)]
    pub(crate) steps: Option<PathBuf>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
}

/// The variant whose images a flavour is built FROM (`from:`): the names of `model::axes::Variant`,
/// kept apart so this module imports no other (`Matrix` checks the matrix makes it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FlavourFrom {
    #[default]
    Runtime,
    Devel,
}

impl FlavourFrom {
    /// The variant's name, as `variants:` and the templates (`flavour.from`) spell it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FlavourFrom::Runtime => "runtime",
            FlavourFrom::Devel => "devel",
        }
    }
}

/// The flavours imagegen knows how to start as a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Builtin {
    /// JupyterLab, listening on [`JUPYTER_PORT`] as the image's user.
    Jupyter,
    /// OpenSSH's server, listening on [`SSH_PORT`] as the image's user, key-only.
    Ssh,
}

/// The port JupyterLab listens on.
pub(crate) const JUPYTER_PORT: u16 = 8888;
/// The port sshd listens on: above 1024, since it runs as the image's user, not root.
pub(crate) const SSH_PORT: u16 = 2222;

impl Builtin {
    pub(crate) fn from_name(name: &str) -> Option<Builtin> {
        match name {
            "jupyter" => Some(Builtin::Jupyter),
            "ssh" => Some(Builtin::Ssh),
            _ => None,
        }
    }

    /// The Python packages the built-in needs (ranges: the lock picks the versions).
    fn pip(self) -> Vec<String> {
        match self {
            // ipykernel is the kernel: the image's own /opt/venv Python, with torch.
            Builtin::Jupyter => vec!["jupyterlab>=4.2,<5".into(), "ipykernel>=6.29".into()],
            Builtin::Ssh => Vec::new(),
        }
    }

    /// The apt packages the built-in needs.
    fn apt(self) -> Vec<String> {
        match self {
            Builtin::Jupyter => Vec::new(),
            Builtin::Ssh => vec!["openssh-server".into()],
        }
    }

    /// The port the service listens on.
    pub(crate) fn port(self) -> u16 {
        match self {
            Builtin::Jupyter => JUPYTER_PORT,
            Builtin::Ssh => SSH_PORT,
        }
    }
}

/// One flavour as an image builds it: the built-in part (if any) with the matrix's additions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Flavour {
    pub(crate) name: String,
    /// The variant of the images it is built FROM.
    pub(crate) from: FlavourFrom,
    /// Serialized as `null` when absent: templates test it under strict undefined.
    pub(crate) builtin: Option<Builtin>,
    /// The port the built-in service listens on (for `EXPOSE`).
    pub(crate) port: Option<u16>,
    pub(crate) pip: Vec<String>,
    pub(crate) apt: Vec<String>,
    pub(crate) steps: Option<String>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) labels: BTreeMap<String, String>,
}

impl Flavour {
    /// The flavour `name` as `definition` asks: a built-in's packages first, then the matrix's.
    pub(crate) fn new(name: &str, definition: &FlavourDefinition) -> Flavour {
        let builtin = Builtin::from_name(name);
        let mut pip = builtin.map(Builtin::pip).unwrap_or_default();
        let mut apt = builtin.map(Builtin::apt).unwrap_or_default();
        for item in &definition.pip {
            if !pip.contains(item) {
                pip.push(item.clone());
            }
        }
        for item in &definition.apt {
            if !apt.contains(item) {
                apt.push(item.clone());
            }
        }
        Flavour {
            name: name.to_string(),
            from: definition.from.unwrap_or_default(),
            builtin,
            port: builtin.map(Builtin::port),
            pip,
            apt,
            steps: definition
                .steps
                .as_ref()
                .map(|path| path.to_string_lossy().into_owned()),
            env: definition.env.clone(),
            labels: definition.labels.clone(),
        }
    }

    /// The flavour's definition as its fingerprint covers it, one line per part, each present
    /// only when set (so `plan` names the part that changed).
    pub(crate) fn fingerprint_inputs(&self) -> Vec<(String, String)> {
        let mut inputs = vec![("flavour".to_string(), self.name.clone())];
        let mut add = |key: &str, value: String| {
            if !value.is_empty() {
                inputs.push((format!("flavour.{key}"), value));
            }
        };
        // Said only of flavours FROM devel, so a runtime flavour's fingerprint is what it was.
        if self.from != FlavourFrom::Runtime {
            add("from", self.from.as_str().to_string());
        }
        add(
            "builtin",
            self.builtin
                .map(|builtin| format!("{builtin:?}").to_lowercase())
                .unwrap_or_default(),
        );
        add("pip", self.pip.join("\n"));
        add("apt", self.apt.join("\n"));
        add(
            "env",
            self.env.iter().map(|(k, v)| format!("{k}={v}\n")).collect(),
        );
        add(
            "labels",
            self.labels
                .iter()
                .map(|(k, v)| format!("{k}={v}\n"))
                .collect(),
        );
        inputs
    }
}

/// A flavour's name: it ends the image's tag (`…-runtime-jupyter`), so lowercase letters, digits
/// and `-`, starting with a letter, at most 32 characters.
pub(crate) fn check_flavour_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "flavour name {name:?} must be lowercase letters, digits and `-`, start with a letter and be at most 32 characters (it ends the image's tag)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_bring_their_packages_and_the_matrix_adds_to_them() {
        let jupyter = Flavour::new(
            "jupyter",
            &FlavourDefinition {
                pip: vec!["jupyterlab-git".into(), "ipykernel>=6.29".into()],
                ..FlavourDefinition::default()
            },
        );
        assert_eq!(jupyter.builtin, Some(Builtin::Jupyter));
        assert_eq!(jupyter.port, Some(8888));
        assert_eq!(
            jupyter.pip,
            ["jupyterlab>=4.2,<5", "ipykernel>=6.29", "jupyterlab-git"]
        );
        let ssh = Flavour::new("ssh", &FlavourDefinition::default());
        assert_eq!(ssh.apt, ["openssh-server"]);
        assert!(ssh.pip.is_empty());
        assert_eq!(ssh.port, Some(2222));
        let own = Flavour::new(
            "tools",
            &FlavourDefinition {
                apt: vec!["git".into()],
                ..FlavourDefinition::default()
            },
        );
        assert_eq!(own.builtin, None);
        assert_eq!(own.port, None);
        assert_eq!(
            own.fingerprint_inputs(),
            [
                ("flavour".to_string(), "tools".to_string()),
                ("flavour.apt".to_string(), "git".to_string())
            ]
        );
    }

    #[test]
    fn names_end_a_tag() {
        for good in ["jupyter", "ssh", "team-tools2"] {
            check_flavour_name(good).unwrap();
        }
        for bad in [
            "",
            "Jupyter",
            "2fast",
            "a_b",
            "tools-",
            "a b",
            &"x".repeat(33),
        ] {
            assert!(check_flavour_name(bad).is_err(), "{bad:?}");
        }
    }
}
