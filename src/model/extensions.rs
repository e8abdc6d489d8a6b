//! The team's own additions to an image (`pip`, `extra_indexes`, `apt`, `steps`, `env`, `labels`,
//! `user`, `workdir`), written at the top of `matrix.yaml` for every image or on an `include`
//! rule for the images that rule matches. This module holds their schema, the checks that make
//! each value safe where it goes (a requirements file, a Dockerfile line, an apt command line),
//! and how the matrix's and the rules' values add up for one image. It does no I/O: the step
//! fragments are read by the loader (`project.rs`) and rendered by `render/`.
//!
//! Credentials never appear here: an extra index is a URL without a user or password, and its
//! credentials come from the environment (`username_env`, `password_env`) or a netrc file when
//! `imagegen lock` and `imagegen build` reach it on the host. Nothing of them reaches a
//! Dockerfile, a layer, a log or the manifest.

use std::collections::BTreeMap;
use std::path::{Component, Path};
use std::str::FromStr;

use imagegen_python::IndexRequirement;
use serde::{Deserialize, Serialize};

use crate::model::http_url::HttpUrl;

/// A package index beside the image's own (a team's private index).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExtraIndex {
    /// A PEP 503 simple index, without credentials: `https://pypi.team.example/simple`; parsed
    /// and checked when the matrix is read ([`HttpUrl`]).
    pub(crate) url: HttpUrl,
    /// The environment variable holding the user name (else a netrc file's `login`).
    #[serde(default)]
    pub(crate) username_env: Option<String>,
    /// The environment variable holding the password or token (else a netrc file's `password`).
    #[serde(default)]
    pub(crate) password_env: Option<String>,
}

/// The non-root user an image runs as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImageUser {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Default `/home/<name>`.
    #[serde(default)]
    pub(crate) home: Option<String>,
}

impl ImageUser {
    /// The home folder: as written, or `/home/<name>`.
    pub(crate) fn home(&self) -> String {
        self.home
            .clone()
            .unwrap_or_else(|| format!("/home/{}", self.name))
    }
}

/// What one image adds, with the matrix's and its include rules' values added up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Extensions {
    /// Extra requirements (PEP 508), resolved into the image's lock together with torch.
    pub(crate) pip: Vec<String>,
    pub(crate) extra_indexes: Vec<ExtraIndex>,
    /// Extra Debian/Ubuntu packages (`htop`, `git=1:2.39.5-0+deb12u2`).
    pub(crate) apt: Vec<String>,
    /// A Dockerfile fragment under the project, rendered with the image's values after the
    /// lock install; the path as the matrix writes it.
    pub(crate) steps: Option<String>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) user: Option<ImageUser>,
    pub(crate) workdir: Option<String>,
}

impl Extensions {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Extensions::default()
    }

    /// `self` with `more` added: lists appended (without repeats), maps merged (`more` wins),
    /// single values replaced.
    pub(crate) fn merged(mut self, more: &Extensions) -> Extensions {
        for item in &more.pip {
            if !self.pip.contains(item) {
                self.pip.push(item.clone());
            }
        }
        for index in &more.extra_indexes {
            if !self.extra_indexes.contains(index) {
                self.extra_indexes.push(index.clone());
            }
        }
        for item in &more.apt {
            if !self.apt.contains(item) {
                self.apt.push(item.clone());
            }
        }
        self.env.extend(more.env.clone());
        self.labels.extend(more.labels.clone());
        if more.steps.is_some() {
            self.steps = more.steps.clone();
        }
        if more.user.is_some() {
            self.user = more.user.clone();
        }
        if more.workdir.is_some() {
            self.workdir = more.workdir.clone();
        }
        self
    }

    /// What a devel image adds on top of its runtime image (`parent`), which it is built FROM
    /// and which installed `parent`'s additions already: only what differs. The user stays (the
    /// devel image switches to root for its own steps and back to it at the end).
    pub(crate) fn beyond(&self, parent: &Extensions) -> Extensions {
        Extensions {
            pip: self
                .pip
                .iter()
                .filter(|item| !parent.pip.contains(item))
                .cloned()
                .collect(),
            extra_indexes: self.extra_indexes.clone(),
            apt: self
                .apt
                .iter()
                .filter(|item| !parent.apt.contains(item))
                .cloned()
                .collect(),
            steps: self
                .steps
                .clone()
                .filter(|steps| parent.steps.as_ref() != Some(steps)),
            env: self
                .env
                .iter()
                .filter(|(key, value)| parent.env.get(*key) != Some(*value))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            labels: self.labels.clone(),
            user: self.user.clone(),
            workdir: self.workdir.clone(),
        }
    }
}

/// Environment variables an image's `env:` may not set: those the templates set (`PATH`,
/// `VIRTUAL_ENV`, `HOME`, the `NVIDIA_*` the container toolkit reads), and those that change
/// what the locked venv loads: the dynamic loader's (`LD_PRELOAD`, `LD_LIBRARY_PATH`,
/// `LD_AUDIT`, … : every `LD_*`) and Python's search path (`PYTHONPATH`, `PYTHONHOME`,
/// `PYTHONUSERBASE`, `PYTHONPLATLIBDIR`, `PYTHONSTARTUP`). pip's `PIP_*` would change what a
/// later install takes from where.
const RESERVED_ENV: &[&str] = &[
    "PATH",
    "VIRTUAL_ENV",
    "HOME",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONPLATLIBDIR",
    "PYTHONSTARTUP",
];
const RESERVED_ENV_PREFIXES: &[&str] = &["NVIDIA_", "IMAGEGEN_", "PIP_", "LD_"];

/// A PEP 508 requirement from an index: a name, optional `[extras]`, optional version
/// specifiers, optional `; markers`. No URLs (`name @ https://...`), no pip options, nothing a
/// requirements file reads as something else. The requirement is parsed by `pep508_rs`
/// (through `imagegen_python::IndexRequirement`); the text is then checked for where it is
/// written: a line of the lock's input file and a `RUN pip install` line, so only the characters
/// a requirement needs, and never `--` (pip reads an option).
pub(crate) fn check_requirement(text: &str) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            "pip requirement {text:?} {why} (write `name`, `name>=1.2`, `name[extra]==1.*`, `name; python_version >= \"3.11\"`)"
        ))
    };
    if text.trim() != text || text.is_empty() {
        return refuse("is empty or has spaces around it");
    }
    if text.len() > 200 {
        return refuse("is longer than 200 characters");
    }
    if let Err(error) = IndexRequirement::from_str(text) {
        return refuse(&error.to_string());
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || " ._-<>=!~'\"()[],;*+".contains(c);
    if let Some(bad) = text.chars().find(|c| !plain(*c)) {
        return refuse(&format!(
            "contains {bad:?}, which a requirement written on a RUN line may not hold"
        ));
    }
    if text.contains("--") {
        return refuse("holds `--`, which pip reads as an option");
    }
    Ok(())
}

/// A Debian package name, optionally `=version`, safe on an `apt-get install` line.
pub(crate) fn check_apt_package(text: &str) -> Result<(), String> {
    let (name, version) = match text.split_once('=') {
        Some((name, version)) => (name, Some(version)),
        None => (text, None),
    };
    let name_ok = name.len() >= 2
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-".contains(c));
    let version_ok = version.is_none_or(|version| {
        !version.is_empty()
            && version.starts_with(|c: char| c.is_ascii_digit())
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".+~:-".contains(c))
    });
    if name_ok && version_ok {
        Ok(())
    } else {
        Err(format!(
            "apt package {text:?} is not a Debian package name (lowercase letters, digits, `+.-`), optionally `=version`"
        ))
    }
}

/// An environment variable name an image may set.
pub(crate) fn check_env_key(key: &str) -> Result<(), String> {
    if key.is_empty()
        || !key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(format!(
            "env {key:?} is not a variable name (letters, digits and `_`, not starting with a digit)"
        ));
    }
    if RESERVED_ENV.contains(&key) || RESERVED_ENV_PREFIXES.iter().any(|p| key.starts_with(p)) {
        return Err(format!(
            "env {key} is reserved: imagegen's templates set it, or it changes what the locked venv loads (PATH, VIRTUAL_ENV, HOME, PYTHONPATH, PYTHONHOME, PYTHONUSERBASE, PYTHONPLATLIBDIR, PYTHONSTARTUP, LD_*, NVIDIA_*, IMAGEGEN_*, PIP_*)"
        ));
    }
    Ok(())
}

/// An absolute path safe on a Dockerfile line: letters, digits, `._-/`, no `..`.
pub(crate) fn check_absolute_path(what: &str, path: &str) -> Result<(), String> {
    if !path.starts_with('/')
        || path.len() > 200
        || path.split('/').any(|part| part == "..")
        || !path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
    {
        return Err(format!(
            "{what} {path:?} must be an absolute path of letters, digits and `._-/`, without `..`"
        ));
    }
    Ok(())
}

/// Folders of the base system and of imagegen's own layers. A `workdir` is handed to the image's
/// user, so it may be none of these, nothing inside them, and no folder above them (whoever owns
/// `/opt` can rename `/opt/venv` and put another venv in its place).
const SYSTEM_FOLDERS: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt/imagegen",
    "/opt/venv",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
];

/// Shared folders of the base whose own ownership matters (every user's home is in `/home`,
/// `/tmp` is sticky): a folder made inside them is fine, they themselves are never handed over.
const SHARED_FOLDERS: &[&str] = &["/home", "/media", "/mnt", "/opt", "/srv", "/tmp"];

/// A `workdir`: an absolute path (see [`check_absolute_path`]) that is no system folder, inside
/// none and above none. The build also refuses a folder that exists in the image and is not the
/// user's already (extensions.j2): imagegen only ever hands over a folder it makes.
pub(crate) fn check_workdir(path: &str) -> Result<(), String> {
    check_absolute_path("workdir", path)?;
    let components: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    if components.is_empty() {
        return Err(
            "workdir / is the root of the image: choose a folder of its own, such as /workspace"
                .into(),
        );
    }
    if components.contains(&".") {
        return Err(format!(
            "workdir {path:?} holds `.`: write the folder plainly"
        ));
    }
    if let Some(shared) = SHARED_FOLDERS
        .iter()
        .find(|shared| format!("/{}", components.join("/")) == **shared)
    {
        return Err(format!(
            "workdir {path} is the shared folder {shared} of the base; the user would own it: choose a folder inside it, such as {shared}/work"
        ));
    }
    let normalized = format!("/{}", components.join("/"));
    let within =
        |inner: &str, outer: &str| inner == outer || inner.starts_with(&format!("{outer}/"));
    if let Some(system) = SYSTEM_FOLDERS
        .iter()
        .find(|system| within(&normalized, system) || within(system, &normalized))
    {
        return Err(format!(
            "workdir {path} is {} {system}, which the base or imagegen's layers hold; the user would own it and could change what the image runs (the locked venv included): choose a new folder such as /workspace",
            if normalized == **system {
                "the system folder"
            } else if within(&normalized, system) {
                "inside"
            } else {
                "above"
            }
        ));
    }
    Ok(())
}

/// A non-root user with a fixed uid and gid and a home that is a plain absolute path.
pub(crate) fn check_user(user: &ImageUser) -> Result<(), String> {
    let name_ok = !user.name.is_empty()
        && user.name.len() <= 32
        && user
            .name
            .starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && user
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-".contains(c));
    if !name_ok {
        return Err(format!(
            "user.name {:?} is not a user name (lowercase letters, digits, `_`, `-`; at most 32)",
            user.name
        ));
    }
    if user.name == "root" || user.uid == 0 || user.gid == 0 {
        return Err(
            "user must not be root: give a name other than root and a uid and gid above 0".into(),
        );
    }
    if user.uid > 2_000_000_000 || user.gid > 2_000_000_000 {
        return Err("user.uid and user.gid must be below 2000000000".into());
    }
    if let Some(home) = &user.home {
        check_absolute_path("user.home", home)?;
        if home == "/" {
            return Err("user.home must not be /".into());
        }
    }
    Ok(())
}

/// An extra index: its URL was parsed and checked when read ([`HttpUrl`]); here the variable
/// names for its credentials.
pub(crate) fn check_extra_index(index: &ExtraIndex) -> Result<(), String> {
    for name in [&index.username_env, &index.password_env]
        .into_iter()
        .flatten()
    {
        if name.is_empty()
            || !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "extra_indexes: {name:?} is not an environment variable name"
            ));
        }
    }
    if index.username_env.is_some() != index.password_env.is_some() {
        return Err(
            "extra_indexes: name both `username_env` and `password_env`, or neither (netrc)".into(),
        );
    }
    Ok(())
}

/// A step fragment's path: relative, under the project (no `..`, not absolute).
pub(crate) fn check_steps_path(path: &Path) -> Result<(), String> {
    let text = path.to_string_lossy();
    if path.as_os_str().is_empty()
        || path.is_absolute()
        || path
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        || !text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
    {
        return Err(format!(
            "steps {text:?} must be a file under the project, relative to matrix.yaml (letters, digits, `._-/`, no `..`)"
        ));
    }
    Ok(())
}

/// A step fragment's raw text, checked when the loader reads it: its size and no control
/// characters. What its instructions are is checked after rendering, as Docker reads them in the
/// Dockerfile around them (`render::steps_check`). Returns the 1-based line of the problem.
pub(crate) fn check_steps_text(text: &str) -> Result<(), (usize, String)> {
    if text.len() > 64 * 1024 {
        return Err((1, "a step fragment is at most 64 KiB".into()));
    }
    for (index, line) in text.lines().enumerate() {
        if line.chars().any(|c| c.is_control() && c != '\t') {
            return Err((index + 1, "a control character".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_with_versions_ranges_extras_and_markers_pass() {
        for good in [
            "einops",
            "rich>=13,<15",
            "team-lib==0.1.0",
            "pandas[parquet]~=2.2",
            "tomli; python_version < \"3.11\"",
            "uvloop>=0.19; sys_platform == 'linux' and platform_machine == \"x86_64\"",
        ] {
            check_requirement(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in [
            "",
            " einops",
            "--index-url https://evil.example/simple",
            "-r other.txt",
            "team @ https://user:pw@git.example/team.whl",
            "rich>=13\nRUN curl evil",
            "rich=>13",
            "rich[x",
            "rich; $(id)",
            "rich>=13 && curl",
        ] {
            assert!(check_requirement(bad).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn apt_env_paths_and_users_are_checked() {
        check_apt_package("htop").unwrap();
        check_apt_package("git=1:2.39.5-0+deb12u2").unwrap();
        for bad in ["Htop", "htop;id", "htop=", "-y", "htop curl", "h"] {
            assert!(check_apt_package(bad).is_err(), "{bad:?}");
        }
        check_env_key("TEAM_CONFIG").unwrap();
        for bad in [
            "PATH",
            "NVIDIA_VISIBLE_DEVICES",
            "1X",
            "A-B",
            "PIP_INDEX_URL",
        ] {
            assert!(check_env_key(bad).is_err(), "{bad:?}");
        }
        check_absolute_path("workdir", "/workspace").unwrap();
        for bad in ["workspace", "/a/../etc", "/a b", "/$HOME"] {
            assert!(check_absolute_path("workdir", bad).is_err(), "{bad:?}");
        }
        let user = |name: &str, uid| ImageUser {
            name: name.into(),
            uid,
            gid: 1000,
            home: None,
        };
        check_user(&user("app", 1000)).unwrap();
        assert_eq!(user("app", 1000).home(), "/home/app");
        assert!(check_user(&user("root", 1000)).is_err());
        assert!(check_user(&user("app", 0)).is_err());
        assert!(check_user(&user("App", 1000)).is_err());
        check_steps_path(Path::new("steps/team.Dockerfile")).unwrap();
        for bad in ["/etc/passwd", "../x", "a/../../x", ""] {
            assert!(check_steps_path(Path::new(bad)).is_err(), "{bad:?}");
        }
        assert_eq!(
            check_steps_text("RUN echo hi\nRUN echo \u{1b}[2J\n")
                .unwrap_err()
                .0,
            2
        );
        check_steps_text("RUN echo hi\n").unwrap();
    }

    #[test]
    fn a_workdir_is_a_new_folder_never_a_system_one_or_one_above_it() {
        for good in [
            "/workspace",
            "/home/dev",
            "/home/dev/work",
            "/opt/work",
            "/data/team",
            "/srv/app",
            "/tmp/work",
        ] {
            check_workdir(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for (bad, why) in [
            ("/", "root of the image"),
            ("/opt", "the shared folder /opt"),
            ("/opt/venv", "the system folder /opt/venv"),
            ("/opt/venv/lib", "inside /opt/venv"),
            ("//opt/venv", "the system folder /opt/venv"),
            ("/opt/./venv", "`.`"),
            ("/usr", "the system folder /usr"),
            ("/usr/local/bin", "inside /usr"),
            ("/etc", "the system folder /etc"),
            ("/home", "the shared folder /home"),
            ("/srv", "the shared folder /srv"),
            ("/opt/imagegen/nvidia", "inside /opt/imagegen"),
            ("/var/lib/apt", "inside /var"),
            ("/tmp", "the shared folder /tmp"),
            ("/opt/venv/../x", "without `..`"),
        ] {
            let error = check_workdir(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }

    #[test]
    fn an_index_names_both_credential_variables_or_neither() {
        let index = |url: &str| ExtraIndex {
            url: HttpUrl::parse(url).unwrap(),
            username_env: None,
            password_env: None,
        };
        check_extra_index(&index("https://pypi.team.example/simple")).unwrap();
        let half = ExtraIndex {
            username_env: Some("TEAM_USER".into()),
            ..index("https://pypi.team.example/simple")
        };
        assert!(check_extra_index(&half).is_err());
        let bad_name = ExtraIndex {
            username_env: Some("TEAM USER".into()),
            password_env: Some("TOKEN".into()),
            ..index("https://pypi.team.example/simple")
        };
        assert!(check_extra_index(&bad_name).is_err());
    }

    #[test]
    fn merging_appends_and_a_devel_image_adds_only_what_differs() {
        let base = Extensions {
            pip: vec!["einops".into()],
            apt: vec!["htop".into()],
            steps: Some("steps/a".into()),
            env: BTreeMap::from([("A".into(), "1".into())]),
            ..Extensions::default()
        };
        let rule = Extensions {
            pip: vec!["rich".into(), "einops".into()],
            env: BTreeMap::from([("A".into(), "2".into())]),
            workdir: Some("/w".into()),
            ..Extensions::default()
        };
        let merged = base.clone().merged(&rule);
        assert_eq!(merged.pip, ["einops", "rich"]);
        assert_eq!(merged.env["A"], "2");
        assert_eq!(merged.workdir.as_deref(), Some("/w"));
        let devel = merged.beyond(&base);
        assert_eq!(devel.pip, ["rich"]);
        assert!(devel.apt.is_empty());
        assert_eq!(devel.steps, None);
        assert_eq!(devel.env["A"], "2");
        assert!(Extensions::default().is_empty());
    }
}
