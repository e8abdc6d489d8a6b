//! What each image's lock (`images/<name>/requirements.lock`) is resolved from, and whether the
//! lock on disk is still the one the matrix asks for. Pure: the lock's inputs are values of the
//! spec; `imagegen lock` hands them to uv, and `render --check` compares them, offline, with the
//! first line of the lock on disk.
//!
//! A lock pins the exact version and hashes of every Python package an image installs, for its
//! Python and platform. Its first line is `# imagegen-lock-inputs: sha256:...`, a digest over
//! every input below: a matrix or knowledge change that would resolve differently changes the
//! digest, and the lock is reported stale. The lock's own bytes are covered by the image's
//! fingerprint, so a refreshed lock rebuilds the image.

use std::collections::BTreeMap;

use crate::model::digest::Digest;
use crate::model::extensions::ExtraIndex;
use crate::model::version::VersionText;
use crate::resolve::fingerprint::fingerprint;
pub(crate) use crate::resolve::image::{LockSpec, ParentLock};
use crate::resolve::image::{LockedCuda, PipIndexes};

/// The file name of a lock, beside the image's Dockerfile.
pub(crate) const LOCK_FILE: &str = "requirements.lock";

/// The first line's prefix.
pub(crate) const INPUTS_PREFIX: &str = "# imagegen-lock-inputs: ";

impl LockSpec {
    /// A lock spec with its inputs digest computed.
    pub(crate) fn new(
        requirements: Vec<String>,
        constraints: Vec<String>,
        indexes: PipIndexes,
        python: &str,
        python_platform: String,
        parent: Option<ParentLock>,
    ) -> LockSpec {
        let mut spec = LockSpec {
            requirements,
            constraints,
            indexes,
            python: python.to_string(),
            python_platform,
            parent,
            extras: Vec::new(),
            extra_indexes: Vec::new(),
            inputs_digest: Digest::of(b""),
        };
        spec.inputs_digest = fingerprint(&spec.inputs());
        spec
    }

    /// This spec with the matrix's extra requirements and indexes (inputs only when present, so
    /// a lock without any keeps its digest).
    pub(crate) fn with_extras(
        mut self,
        extras: Vec<String>,
        extra_indexes: Vec<ExtraIndex>,
    ) -> LockSpec {
        self.extras = extras;
        self.extra_indexes = extra_indexes;
        self.inputs_digest = fingerprint(&self.inputs());
        self
    }

    /// The URLs of the extra indexes.
    pub(crate) fn extra_index_urls(&self) -> Vec<&str> {
        self.extra_indexes
            .iter()
            .map(|index| index.url.as_str())
            .collect()
    }

    /// The inputs, by name, as the digest covers them.
    fn inputs(&self) -> BTreeMap<&'static str, String> {
        let mut inputs = BTreeMap::new();
        inputs.insert("format", "imagegen-lock-v1".to_string());
        inputs.insert("requirements", self.requirements.join("\n"));
        inputs.insert("constraints", self.constraints.join("\n"));
        inputs.insert("indexes", self.indexes.all().join("\n"));
        inputs.insert("python", self.python.clone());
        inputs.insert("python_platform", self.python_platform.clone());
        inputs.insert(
            "parent_lock",
            self.parent
                .as_ref()
                .map(|parent| {
                    format!(
                        "{} {}",
                        parent.image,
                        parent.digest.as_ref().map(Digest::as_str).unwrap_or("none")
                    )
                })
                .unwrap_or_default(),
        );
        if !self.extras.is_empty() {
            inputs.insert("extras", self.extras.join("\n"));
        }
        if !self.extra_indexes.is_empty() {
            inputs.insert("extra_indexes", self.extra_index_urls().join("\n"));
        }
        inputs
    }

    /// The header lines that say, for people, what the lock was resolved from (after the
    /// inputs line and the generator line).
    /// This lock's inputs with the runtime lock it is resolved against at `digest` (the runtime
    /// lock a rename carries, before it is on disk).
    pub(crate) fn with_parent_digest(&self, digest: Digest) -> LockSpec {
        let mut spec = self.clone();
        if let Some(parent) = &mut spec.parent {
            parent.digest = Some(digest);
        }
        spec.inputs_digest = fingerprint(&spec.inputs());
        spec
    }

    pub(crate) fn description(&self) -> Vec<String> {
        let mut lines = vec![
            format!("# python: {} ({})", self.python, self.python_platform),
            format!("# indexes: {}", self.indexes.all().join(" ")),
            format!("# requirements: {}", self.requirements.join(" ")),
            format!("# constraints: {}", self.constraints.join(" ")),
        ];
        if !self.extras.is_empty() {
            lines.push(format!(
                "# extras (within the pins of the requirements alone): {}",
                self.extras.join(" | ")
            ));
        }
        if !self.extra_indexes.is_empty() {
            lines.push(format!(
                "# extra indexes: {}",
                self.extra_index_urls().join(" ")
            ));
        }
        if let Some(parent) = &self.parent {
            lines.push(format!(
                "# constrained by: ../{}/{LOCK_FILE} ({})",
                parent.image,
                parent.digest.as_ref().map(Digest::as_str).unwrap_or("none")
            ));
        }
        lines
    }

    /// The lock's header: the inputs line, what made it, and the description.
    pub(crate) fn header(&self, resolver: &str) -> String {
        let mut text = format!("{INPUTS_PREFIX}{}\n", self.inputs_digest);
        text.push_str(&format!(
            "# GENERATED by `imagegen lock` ({resolver}). DO NOT EDIT: change matrix.yaml and run `imagegen lock`.\n"
        ));
        for line in self.description() {
            text.push_str(&line);
            text.push('\n');
        }
        text
    }
}

/// How a lock on disk compares with what the matrix asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LockStatus {
    Fresh,
    Missing,
    /// The inputs changed: what the lock says it was made from, and what is asked for now.
    Stale {
        found: Vec<String>,
        wanted: Vec<String>,
    },
}

/// The lock `text` (of a folder the matrix no longer makes) when it serves `spec` unchanged: the
/// same inputs under another folder name, as after a rename of `tags.full`. A devel image's lock
/// names its runtime image's folder (`# constrained by: ../NAME/requirements.lock (DIGEST)`);
/// when only that name differs and the runtime lock's digest is the same, the lock is carried
/// with its header naming the new folder and the new inputs digest. `None` when anything else
/// differs: then the image needs `imagegen lock`.
pub(crate) fn carried_lock(spec: &LockSpec, text: &str) -> Option<String> {
    let wanted_first = format!("{INPUTS_PREFIX}{}", spec.inputs_digest);
    if text.lines().next() == Some(wanted_first.as_str()) {
        return Some(text.to_string());
    }
    let found: Vec<&str> = text
        .lines()
        .take_while(|line| line.starts_with('#'))
        .filter(|line| !line.starts_with(INPUTS_PREFIX) && !line.starts_with("# GENERATED"))
        .collect();
    let wanted = spec.description();
    const CONSTRAINED: &str = "# constrained by: ../";
    // `../NAME/requirements.lock (DIGEST)`: the part after the folder name.
    let digest_part = |line: &str| line.rsplit_once(" (").map(|(_, digest)| digest.to_string());
    let same = found.len() == wanted.len()
        && found.iter().zip(&wanted).all(|(found, wanted)| {
            found == wanted
                || (found.starts_with(CONSTRAINED)
                    && wanted.starts_with(CONSTRAINED)
                    && digest_part(found).is_some()
                    && digest_part(found) == digest_part(wanted))
        });
    if !same || !text.starts_with(INPUTS_PREFIX) {
        return None;
    }
    let constrained = wanted.iter().find(|line| line.starts_with(CONSTRAINED));
    let mut carried: String = text
        .lines()
        .map(|line| {
            if line.starts_with(INPUTS_PREFIX) {
                wanted_first.as_str()
            } else if line.starts_with(CONSTRAINED) {
                constrained.map(String::as_str).unwrap_or(line)
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    carried.push('\n');
    Some(carried)
}

/// Compares `text` (the lock on disk, if any) with `spec`.
pub(crate) fn lock_status(spec: &LockSpec, text: Option<&str>) -> LockStatus {
    let Some(text) = text else {
        return LockStatus::Missing;
    };
    let first = text.lines().next().unwrap_or_default();
    if first == format!("{INPUTS_PREFIX}{}", spec.inputs_digest) {
        return LockStatus::Fresh;
    }
    // What the header says it was made from (without the inputs and generator lines).
    let found = text
        .lines()
        .take_while(|line| line.starts_with('#'))
        .filter(|line| !line.starts_with(INPUTS_PREFIX) && !line.starts_with("# GENERATED"))
        .map(str::to_string)
        .collect();
    LockStatus::Stale {
        found,
        wanted: spec.description(),
    }
}

/// The CUDA wheels `text` (a lock) pins: `nvidia-cuda-runtime` and `nvidia-cuda-nvcc`, with or
/// without the `-cuXY` suffix of CUDA 12 and older. The lock is read by the one lock reader
/// (`imagegen_python::lock::parse_lock`: PEP 508 requirements, PEP 503 names, PEP 440 versions,
/// full sha256 hashes); a lock it cannot read, or a pin whose version is not a plain version, is
/// refused as `line: why`, for the caller to prefix with the lock's path.
pub(crate) fn locked_cuda(text: &str) -> Result<LockedCuda, String> {
    let packages = imagegen_python::lock::parse_lock(text)
        .map_err(|error| format!("{}: {}", error.line, error.reason))?;
    let mut locked = LockedCuda::default();
    for package in packages {
        let name = package.name.to_string();
        let is = |wanted: &str| {
            name == wanted
                || name
                    .strip_prefix(wanted)
                    .and_then(|rest| rest.strip_prefix("-cu"))
                    .is_some_and(|major| major.chars().all(|c| c.is_ascii_digit()))
        };
        let slot = if is("nvidia-cuda-runtime") {
            &mut locked.runtime
        } else if is("nvidia-cuda-nvcc") {
            &mut locked.nvcc
        } else {
            continue;
        };
        let version = package.version.to_string();
        let parsed = VersionText::parse(&version).map_err(|error| {
            format!(
                "{}: {name} pins {version:?}, not a plain version: {}",
                package.line, error.why
            )
        })?;
        *slot = Some(parsed);
    }
    Ok(locked)
}

/// What `python3 -m venv` installs into a venv (ensurepip: pip; setuptools and wheel with older
/// Pythons), which a runtime image's venv made on the host uninstalls where the lock pins it, so
/// the lock's own version is the one the venv holds.
pub(crate) const ENSUREPIP_PACKAGES: &[&str] = &["pip", "setuptools", "wheel"];

/// The [`ENSUREPIP_PACKAGES`] `text` (a lock) pins, by name, sorted; a lock the one lock reader
/// cannot read is refused as `line: why`.
pub(crate) fn locked_ensurepip(text: &str) -> Result<Vec<String>, String> {
    let packages = imagegen_python::lock::parse_lock(text)
        .map_err(|error| format!("{}: {}", error.line, error.reason))?;
    let mut pinned: Vec<String> = packages
        .iter()
        .map(|package| package.name.to_string())
        .filter(|name| ENSUREPIP_PACKAGES.contains(&name.as_str()))
        .collect();
    pinned.sort();
    pinned.dedup();
    Ok(pinned)
}

/// uv's `--python-platform` for an architecture (`amd64`, `arm64`) and the OS's glibc (`2.39`):
/// the newest manylinux level the OS runs. uv knows manylinux 2.17, 2.28 and 2.31 to 2.40.
pub(crate) fn python_platform(arch: &str, glibc: &VersionText) -> String {
    let machine = if arch == "arm64" { "aarch64" } else { "x86_64" };
    // A glibc without a minor (`2`) is below every manylinux level: the oldest, 2.17.
    let minor = glibc.dotted().part(1);
    let level = match minor {
        0..=27 => 17,
        28..=30 => 28,
        31..=40 => minor,
        _ => 40,
    };
    format!("{machine}-manylinux_2_{level}")
}

/// The packages of a CUDA line that must stay on the wheel's CUDA `major.minor` although torch
/// does not pin them: nvJitLink comes in through cuSPARSE/cuSOLVER's `>=` requirement and would
/// float to the newest 13.x (13.5 beside cudart 13.0, whose PTX an R580 driver cannot JIT), and
/// cuda-bindings (torch's `>=` requirement) would too.
pub(crate) fn cuda_line_constraints(cuda: &VersionText) -> Vec<String> {
    let major = cuda.major();
    if major >= 13 {
        vec![
            format!("cuda-bindings=={cuda}.*"),
            format!("nvidia-nvjitlink=={cuda}.*"),
        ]
    } else {
        vec![format!("nvidia-nvjitlink-cu{major}=={cuda}.*")]
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cuda_wheels_of_a_lock_are_read_with_or_without_their_suffix() {
        let lock = format!(
            "# imagegen-lock-inputs: sha256:00\nnvidia-cuda-runtime==13.0.96 \\\n    --hash=sha256:{}\nnvidia-cuda-nvcc==13.0.88 \\\n    --hash=sha256:{}\nnvidia-cuda-runtime-dev==1.0\n",
            "a".repeat(64),
            "b".repeat(64)
        );
        let lock = lock.as_str();
        let locked = super::locked_cuda(lock).unwrap();
        assert_eq!(locked.runtime.as_deref(), Some("13.0.96"));
        assert_eq!(locked.nvcc.as_deref(), Some("13.0.88"));
        let old = super::locked_cuda(&format!(
            "nvidia_cuda_runtime_cu12==12.6.77 \\\n    --hash=sha256:{}\n",
            "c".repeat(64)
        ))
        .unwrap();
        assert_eq!(old.runtime.as_deref(), Some("12.6.77"));
        assert_eq!(old.nvcc, None);
        let marked =
            super::locked_cuda("nvidia-cuda-runtime==13.0.96 ; sys_platform == 'linux'\n").unwrap();
        assert_eq!(marked.runtime.as_deref(), Some("13.0.96"));
        assert_eq!(
            super::locked_cuda("torch==2.13.0\n").unwrap(),
            super::LockedCuda::default()
        );
    }

    #[test]
    fn a_cuda_pin_that_is_not_a_version_is_refused_with_its_line() {
        let lock = "# header\ntorch==2.13.0\nnvidia-cuda-nvcc==13.0.88rc1\n";
        let error = super::locked_cuda(lock).unwrap_err();
        assert!(
            error.starts_with("3: nvidia-cuda-nvcc pins \"13.0.88rc1\", not a plain version"),
            "{error}"
        );
        // What the lock reader refuses (a hash cut short) is refused here too, at its line.
        let error = super::locked_cuda(
            "torch==2.13.0\nnvidia-cuda-nvcc==13.0.88 \\\n    --hash=sha256:bb\n",
        )
        .unwrap_err();
        assert!(error.starts_with("2: "), "{error}");
    }

    use super::*;

    fn spec(requirements: &[&str]) -> LockSpec {
        LockSpec::new(
            requirements.iter().map(|r| r.to_string()).collect(),
            cuda_line_constraints(&"13.0".into()),
            PipIndexes {
                index_url: "https://pypi.org/simple".into(),
                extra_index_url: None,
            },
            "3.12",
            python_platform("amd64", &"2.39".into()),
            None,
        )
    }

    #[test]
    fn platforms_follow_the_os_glibc() {
        assert_eq!(
            python_platform("amd64", &"2.39".into()),
            "x86_64-manylinux_2_39"
        );
        assert_eq!(
            python_platform("arm64", &"2.35".into()),
            "aarch64-manylinux_2_35"
        );
        assert_eq!(
            python_platform("amd64", &"2.36".into()),
            "x86_64-manylinux_2_36"
        );
        assert_eq!(
            python_platform("amd64", &"2.29".into()),
            "x86_64-manylinux_2_28"
        );
        assert_eq!(
            python_platform("amd64", &"2.27".into()),
            "x86_64-manylinux_2_17"
        );
    }

    #[test]
    fn constraints_keep_the_cuda_line() {
        assert_eq!(
            cuda_line_constraints(&"13.0".into()),
            ["cuda-bindings==13.0.*", "nvidia-nvjitlink==13.0.*"]
        );
        assert_eq!(
            cuda_line_constraints(&"12.6".into()),
            ["nvidia-nvjitlink-cu12==12.6.*"]
        );
    }

    #[test]
    fn a_lock_is_fresh_missing_or_stale() {
        let wanted = spec(&["torch==2.13.0", "torchvision==0.28.0"]);
        let text = format!("{}torch==2.13.0 \\\n", wanted.header("uv 0.13.9"));
        assert_eq!(lock_status(&wanted, Some(&text)), LockStatus::Fresh);
        assert_eq!(lock_status(&wanted, None), LockStatus::Missing);
        let changed = spec(&["torch==2.13.0", "torchvision==0.28.1"]);
        match lock_status(&changed, Some(&text)) {
            LockStatus::Stale { found, wanted } => {
                assert!(found
                    .contains(&"# requirements: torch==2.13.0 torchvision==0.28.0".to_string()));
                assert!(wanted
                    .contains(&"# requirements: torch==2.13.0 torchvision==0.28.1".to_string()));
            }
            other => panic!("{other:?}"),
        }
        // The resolver's version is not an input: another uv makes the same lock fresh.
        let other_uv = format!("{}torch==2.13.0 \\\n", wanted.header("uv 0.14.0"));
        assert_eq!(lock_status(&wanted, Some(&other_uv)), LockStatus::Fresh);
    }

    #[test]
    fn the_parent_lock_is_an_input() {
        let parent = |digest: Option<Digest>| {
            LockSpec::new(
                vec!["ninja".into()],
                vec![],
                PipIndexes {
                    index_url: "https://pypi.org/simple".into(),
                    extra_index_url: None,
                },
                "3.12",
                "x86_64-manylinux_2_39".into(),
                Some(ParentLock {
                    image: "runtime".into(),
                    digest,
                }),
            )
        };
        assert_ne!(
            parent(None).inputs_digest,
            parent(Some(Digest::of(b"lock"))).inputs_digest
        );
        assert_ne!(
            parent(Some(Digest::of(b"a"))).inputs_digest,
            parent(Some(Digest::of(b"b"))).inputs_digest
        );
    }
}
