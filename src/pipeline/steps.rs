//! The build as data: the steps of one image ([`Step`]) and of the whole run ([`RunStep`]), as
//! the plan (`plan::plan`) lists them before the first Docker call. The executor runs an image's
//! steps with one `match` (`executor::run_step`), `build --dry-run` and `imagegen plan` print the
//! same values, and the names people read in logs and tables come from here. Only types: what
//! the steps of an image are is decided in `plan`, how each runs in `executor` and the Docker
//! builder. A step may be passed over at run time for what only the run can know (an earlier
//! build found by its build key); each variant says when.

use std::fmt;

use serde::Serialize;

use crate::model::digest::Digest;
use crate::model::matrix::WheelSource;

/// The flags of a build that change its steps (`imagegen build` and `imagegen plan` take them
/// alike), with the matrix's wheel source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlanOptions {
    /// `--push`: full tags and aliases go to the registry.
    pub(crate) push: bool,
    /// Not `--no-test`: gpu-selftest runs in each image made or reused here.
    pub(crate) test: bool,
    /// `--require-gpu`: a self-test skipped for lack of GPUs fails the image.
    pub(crate) require_gpu: bool,
    /// `--move-untested-aliases`: aliases move after a skipped self-test (never a failed one).
    pub(crate) move_untested_aliases: bool,
    /// A signing key is configured: each pushed image is signed before its aliases move.
    pub(crate) sign: bool,
    /// The matrix's `wheels:`.
    pub(crate) wheels: WheelSource,
}

impl Default for PlanOptions {
    /// What `imagegen build` does with no flags: build, test, tag locally.
    fn default() -> PlanOptions {
        PlanOptions {
            push: false,
            test: true,
            require_gpu: false,
            move_untested_aliases: false,
            sign: false,
            wheels: WheelSource::default(),
        }
    }
}

/// A step of the run, before any image's steps: what serves every image at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub(crate) enum RunStep {
    /// Fetch on the host, into the content-addressed wheel cache, every file the locks of these
    /// images install (each checked against its sha256), and check that each image's wheels
    /// install side by side; before the first Docker call, so a bad lock builds nothing.
    FetchWheels { images: Vec<String> },
    /// Settle the alias moves an earlier run of these repositories left pending (killed, or the
    /// registry died mid-move), by what the registry serves for each alias.
    SettleAliasMoves { repositories: Vec<String> },
}

impl RunStep {
    /// The step's name, as JSON writes it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            RunStep::FetchWheels { .. } => "fetch-wheels",
            RunStep::SettleAliasMoves { .. } => "settle-alias-moves",
        }
    }
}

impl fmt::Display for RunStep {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunStep::FetchWheels { images } => {
                write!(out, "{} (for {} image(s))", self.name(), images.len())
            }
            RunStep::SettleAliasMoves { repositories } => {
                write!(out, "{} ({})", self.name(), repositories.join(", "))
            }
        }
    }
}

/// How an image's Python packages reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Wheels {
    /// pip in the Docker build downloads the lock from the indexes (`wheels: index`).
    Index,
    /// The lock's wheels, fetched on the host into its cache ([`RunStep::FetchWheels`]), go
    /// into the build context, and a build stage installs them with no index (`wheels: cache`;
    /// devel and flavour images of `wheels: host`).
    Cache,
    /// The venv is made on the host (`wheels: host`, runtime images): its layer is written from
    /// the fetched wheels beside the Docker build, host-venv.sh runs in a container of that
    /// build, and both layers go above the build's normalized ones.
    Host,
}

/// Where an alias moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum AliasVia {
    /// In the registry (`--push`), through the one alias move (`history::alias_transaction`): stored
    /// as exactly the manifest the full tag serves; the daemon's tag follows.
    Registry,
    /// In the daemon only: a tag of the image.
    Daemon,
}

/// One step of one image, in the order the executor runs them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub(crate) enum Step {
    /// An alias the image earns but does not move, with why: held from the start (a rollback's
    /// hold, the never-backwards guard), or, for a platform image of an index, left to
    /// `imagegen publish`.
    HoldAlias { alias: String, reason: String },
    /// Look for an image carrying the build key: a normalized one in the daemon, else, where
    /// `in_registry` names the digest the manifest records for the key (only when pushing), the
    /// registry's full tag with that key and digest. Found: `resolve-base` and `build` are
    /// passed over and the image is reused (one in the daemon is tagged with its full tag).
    FindEarlierBuild { in_registry: Option<Digest> },
    /// Make sure the image the Dockerfile builds `FROM` is in the daemon: a base image is pulled
    /// once for all the images on it (and must still be the image ID `images/bases.lock` pins);
    /// an image of this plan (`parent`) was built first, and is loaded where this run left it
    /// out of the daemon. Opens the image's log.
    ResolveBase {
        base: String,
        pinned_id: Option<Digest>,
        parent: Option<String>,
    },
    /// Make the image: the Docker build (or, where only its labels differ from a kept build of
    /// the same inputs, that build relabelled without Docker), normalized (one epoch, sorted
    /// layers, fixed compression; layers an earlier build normalized taken from the layer
    /// store), with the venv's layers above it for [`Wheels::Host`], and loaded into the daemon
    /// unless `load` is false (a `wheels: host` image this run pushes and runs nothing of).
    Build { wheels: Wheels, load: bool },
    /// List the image's packages (pip, dpkg, the venv's metadata, apt extras) in a container of
    /// it. Passed over for an image reused with a recorded pass, or only in the registry.
    ReadPackages,
    /// gpu-selftest in a container with all GPUs (`run`; else recorded as not run), judged:
    /// a failure or an error fails the image, and so does a skip (no GPU) with `require_gpu`.
    /// An image reused with a pass recorded against `baseline` is not tested again; one only in
    /// the registry is not tested by this run.
    SelfTest {
        run: bool,
        require_gpu: bool,
        baseline: Option<Digest>,
    },
    /// Wait until no other run publishes the full tag, and keep others out until the aliases
    /// moved.
    ClaimTag,
    /// Push the normalized image under its full tag (nothing when the registry holds the tag
    /// with this build key already; refused when it holds other content); passed over for an
    /// image only in the registry.
    Push,
    /// Write the pushed full tag into the manifest, before anything that may fail later.
    RecordPush,
    /// Sign the pushed image and push its attestations, before any alias moves.
    Attest,
    /// Decide once whether the aliases may move: after a pass that leaves nothing of the test
    /// policy wanting (`wait_for`: GPU models, or `any GPU`); after a skipped self-test only
    /// with `move_untested` or nothing wanted, else they wait for `imagegen test` where
    /// `untested_wait` (pushing) and are held otherwise; never after a failure.
    JudgeAliases {
        move_untested: bool,
        wait_for: Vec<String>,
        untested_wait: bool,
    },
    /// Move one alias to the image, if `judge-aliases` allows it (never backwards, judged
    /// against the manifest as it is when the alias moves).
    MoveAlias { alias: String, via: AliasVia },
    /// Write the image's result into the manifest. Every image ends with it, also one not built
    /// because the image it builds on failed, or interrupted.
    Record,
}

/// The phase of a build a failure is named by (`failed_stage` of a result): what people know a
/// build to go through, coarser than the steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Stage {
    /// Looking for an earlier build (locally or in the registry).
    Lookup,
    Build,
    Test,
    Push,
    Sign,
    Alias,
    /// Writing the manifest.
    Record,
}

impl fmt::Display for Stage {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        out.write_str(match self {
            Stage::Lookup => "lookup",
            Stage::Build => "build",
            Stage::Test => "test",
            Stage::Push => "push",
            Stage::Sign => "sign",
            Stage::Alias => "alias",
            Stage::Record => "record",
        })
    }
}

impl Step {
    /// The step's name, as JSON writes it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Step::HoldAlias { .. } => "hold-alias",
            Step::FindEarlierBuild { .. } => "find-earlier-build",
            Step::ResolveBase { .. } => "resolve-base",
            Step::Build { .. } => "build",
            Step::ReadPackages => "read-packages",
            Step::SelfTest { .. } => "self-test",
            Step::ClaimTag => "claim-tag",
            Step::Push => "push",
            Step::RecordPush => "record-push",
            Step::Attest => "attest",
            Step::JudgeAliases { .. } => "judge-aliases",
            Step::MoveAlias { .. } => "move-alias",
            Step::Record => "record",
        }
    }

    /// What an image is doing while at this step, for the report of an interruption
    /// (`interrupted while building`).
    pub(crate) fn doing(&self) -> &'static str {
        match self {
            Step::HoldAlias { .. } | Step::JudgeAliases { .. } | Step::MoveAlias { .. } => {
                "moving its aliases"
            }
            Step::FindEarlierBuild { .. } => "looking for an earlier build",
            Step::ResolveBase { .. } => "getting its base image",
            Step::Build { .. } => "building",
            Step::ReadPackages => "reading its packages",
            Step::SelfTest { .. } => "running its self-test",
            Step::ClaimTag => "waiting for another run that publishes the same tag",
            Step::Push | Step::RecordPush => "pushing its full tag",
            Step::Attest => "signing its attestations",
            Step::Record => "writing down its result",
        }
    }

    /// The phase a failure of this step is named by.
    pub(crate) fn stage(&self) -> Stage {
        match self {
            Step::FindEarlierBuild { .. } => Stage::Lookup,
            Step::ResolveBase { .. } | Step::Build { .. } | Step::ReadPackages => Stage::Build,
            Step::SelfTest { .. } => Stage::Test,
            Step::ClaimTag | Step::Push => Stage::Push,
            Step::RecordPush | Step::Record => Stage::Record,
            Step::Attest => Stage::Sign,
            Step::HoldAlias { .. } | Step::JudgeAliases { .. } | Step::MoveAlias { .. } => {
                Stage::Alias
            }
        }
    }
}

/// One line for people: the name and what sets this step apart (`build (wheels: host, not
/// loaded)`, `move-alias latest (registry)`).
impl fmt::Display for Step {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name();
        match self {
            Step::HoldAlias { alias, .. } => write!(out, "{name} {alias}"),
            Step::FindEarlierBuild {
                in_registry: Some(digest),
            } => write!(out, "{name} (daemon, registry {})", digest.short()),
            Step::FindEarlierBuild { in_registry: None } => write!(out, "{name} (daemon)"),
            Step::ResolveBase {
                parent: Some(parent),
                ..
            } => write!(out, "{name} ({parent}, built first)"),
            Step::ResolveBase {
                base, pinned_id, ..
            } => match pinned_id {
                Some(id) => write!(out, "{name} ({base}, image ID {})", id.short()),
                None => write!(out, "{name} ({base})"),
            },
            Step::Build { wheels, load } => {
                let wheels = match wheels {
                    Wheels::Index => "wheels: index",
                    Wheels::Cache => "wheels: cache",
                    Wheels::Host => "venv made on the host",
                };
                if *load {
                    write!(out, "{name} ({wheels})")
                } else {
                    write!(out, "{name} ({wheels}, not loaded)")
                }
            }
            Step::SelfTest { run: false, .. } => write!(out, "{name} (not run: --no-test)"),
            Step::SelfTest {
                require_gpu: true, ..
            } => write!(out, "{name} (GPU required)"),
            Step::JudgeAliases { wait_for, .. } if !wait_for.is_empty() => {
                write!(out, "{name} (wants {})", wait_for.join(", "))
            }
            Step::MoveAlias { alias, via } => match via {
                AliasVia::Registry => write!(out, "{name} {alias}"),
                AliasVia::Daemon => write!(out, "{name} {alias} (daemon tag)"),
            },
            _ => out.write_str(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every step's `name` is the tag its JSON carries, so people and programs read one word.
    #[test]
    fn names_are_the_json_tags() {
        let digest = Digest::of(b"x");
        let steps = [
            Step::HoldAlias {
                alias: "latest".into(),
                reason: "held".into(),
            },
            Step::FindEarlierBuild {
                in_registry: Some(digest.clone()),
            },
            Step::ResolveBase {
                base: "nvidia/cuda:12.6.3-base-ubuntu24.04".into(),
                pinned_id: None,
                parent: None,
            },
            Step::Build {
                wheels: Wheels::Host,
                load: false,
            },
            Step::ReadPackages,
            Step::SelfTest {
                run: true,
                require_gpu: false,
                baseline: Some(digest),
            },
            Step::ClaimTag,
            Step::Push,
            Step::RecordPush,
            Step::Attest,
            Step::JudgeAliases {
                move_untested: false,
                wait_for: vec![],
                untested_wait: true,
            },
            Step::MoveAlias {
                alias: "latest".into(),
                via: AliasVia::Registry,
            },
            Step::Record,
        ];
        for step in &steps {
            let json = serde_json::to_value(step).unwrap();
            assert_eq!(json["step"], step.name(), "{json}");
            assert!(step.to_string().starts_with(step.name()), "{step}");
        }
        for step in [
            RunStep::FetchWheels {
                images: vec!["a".into()],
            },
            RunStep::SettleAliasMoves {
                repositories: vec!["r/p".into()],
            },
        ] {
            let json = serde_json::to_value(&step).unwrap();
            assert_eq!(json["step"], step.name(), "{json}");
        }
    }

    /// The failure stages keep the words `failed_stage` always had.
    #[test]
    fn stages_read_as_before() {
        for (stage, word) in [
            (Stage::Lookup, "lookup"),
            (Stage::Build, "build"),
            (Stage::Test, "test"),
            (Stage::Push, "push"),
            (Stage::Sign, "sign"),
            (Stage::Alias, "alias"),
            (Stage::Record, "record"),
        ] {
            assert_eq!(stage.to_string(), word);
            assert_eq!(serde_json::to_value(stage).unwrap(), word);
        }
        assert_eq!(
            Step::Build {
                wheels: Wheels::Index,
                load: true
            }
            .doing(),
            "building"
        );
        assert_eq!(
            Step::SelfTest {
                run: true,
                require_gpu: false,
                baseline: None
            }
            .doing(),
            "running its self-test"
        );
    }
}
