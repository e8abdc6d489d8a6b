//! The command line: clap derive structures only, one `Args` struct per verb. Turning flags into
//! settings and printing happen in `commands`; `main` maps the outcome to the exit code. This
//! file imports no domain module: values that need parsing (a shard, a driver version) arrive as
//! text and are parsed by the command, which names the flag in its error.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

/// The package index `knowledge derive` reads by default.
pub(crate) const DEFAULT_PACKAGE_INDEX: &str = "https://pypi.org/simple";

/// The manifest file every command that reads or writes one defaults to.
pub(crate) const DEFAULT_MANIFEST: &str = "imagegen-manifest.json";

#[derive(Debug, Parser)]
#[command(name = "imagegen", version, about = "Resolve, render, build, test and publish GPU deep-learning container images from one matrix", long_about = None)]
pub struct Cli {
    /// The matrix file.
    #[arg(
        long,
        global = true,
        env = "IMAGEGEN_MATRIX",
        default_value = "matrix.yaml"
    )]
    pub(crate) matrix: PathBuf,
    /// A compatibility knowledge file merged over the embedded one (same schema).
    #[arg(long, global = true, env = "IMAGEGEN_KNOWLEDGE")]
    pub(crate) knowledge: Option<PathBuf>,
    /// The project's folder: the matrix is DIR/matrix.yaml (a relative --matrix is taken in DIR). Without it the matrix's own folder is the project's: images/, the manifest and .imagegen/ (their defaults), ca_bundle, templates and steps are relative to it, wherever imagegen runs.
    #[arg(long, global = true, env = "IMAGEGEN_PROJECT", value_name = "DIR")]
    pub(crate) project: Option<PathBuf>,
    /// The options given on the command line or in the environment, by id (filled by
    /// `commands::parse`): a path given there is relative to the working directory, a default one
    /// to the project's folder.
    #[arg(skip)]
    pub(crate) given: Vec<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Table,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PlanFormat {
    Table,
    Json,
    /// For a pull-request comment or $GITHUB_STEP_SUMMARY.
    Markdown,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show which images the matrix makes, on which drivers they run, and which cells are impossible and why.
    Resolve(ResolveArgs),
    /// Render one Dockerfile per image into the output directory (or check that it and the images' locks are up to date).
    Render(RenderArgs),
    /// Build the images through the Docker Engine API, test each with gpu-selftest, tag, push, and record them in the manifest.
    Build(BuildArgs),
    /// Resolve each image's Python packages to exact versions and hashes with uv and write its lock (images/<name>/requirements.lock); the one command that needs the network.
    Lock(LockImagesArgs),
    /// Compare the matrix with the manifest: new and rebuilt images (and why), alias moves, rising driver minimums, images no longer made.
    Plan(PlanArgs),
    /// Re-point an alias in the registry to an earlier digest recorded in the manifest, without a rebuild.
    Rollback(RollbackArgs),
    /// Let builds, tests and publishes move an alias a rollback holds again (the manifest only; the registry is not asked).
    Release(ReleaseArgs),
    /// Put the digest the manifest records for a full tag back under that tag in the registry (after someone overwrote it), without a rebuild.
    Restore(RestoreArgs),
    /// Assemble and push an OCI image index per full tag (and move its aliases) from the per-platform images recorded in the manifest.
    Publish(PublishArgs),
    /// Show what changed between two images (tags, aliases or digests recorded in the manifest): versions and packages.
    Diff(DiffArgs),
    /// Name what differs between two builds of an image (two images in the Docker daemon, pulled when missing): config fields, and per layer each file whose type, size, mode or content differs; exit 1 when they differ.
    DiffBuild(DiffBuildArgs),
    /// Export the resolved matrix as a docker-bake.json for `docker buildx bake` (BuildKit, remote builders).
    Bake(BakeArgs),
    /// Print a Kubernetes Job (YAML) that runs an image of the matrix on GPUs, kept off nodes whose driver is too old.
    K8s(K8sArgs),
    /// Print the build fan-out as a GitHub Actions strategy.matrix (JSON): one job per shard or per image family.
    Ci(CiArgs),
    /// Work with manifests (imagegen-manifest.json).
    Manifest(ManifestArgs),
    /// Work with the compatibility knowledge.
    Knowledge(KnowledgeArgs),
    /// Check every full tag, alias and index the manifest records against what the registry serves; exit 1 on any difference, naming the command that fixes it.
    Verify(VerifyArgs),
    /// Sign and attach the provenance, SBOM and gpu-selftest statements of recorded images (cosign's layout), or show an image's verified statements.
    Attest(AttestArgs),
    /// Check what a build needs on this machine (the Docker daemon and its GPU runtime, the registry and credentials, the base images, uv, the self-test binaries, free disk) and say what to do for each missing piece.
    Doctor(DoctorArgs),
    /// Pull recorded images by digest, run gpu-selftest in each on this node's GPUs, record the result under the digest, and move aliases once the test policy holds; `test import` ingests reports made elsewhere.
    Test(TestArgs),
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct TestArgs {
    #[command(subcommand)]
    pub(crate) action: Option<TestAction>,
    /// Test only the recorded images whose full tag matches (`*` wildcards, else a substring).
    #[arg(long)]
    pub(crate) only: Option<String>,
    /// Test the recorded image with this digest (repeatable), whatever its tag.
    #[arg(long = "digest", value_name = "DIGEST")]
    pub(crate) digests: Vec<String>,
    /// The node name recorded with each result (default: this machine's host name).
    #[arg(long, env = "IMAGEGEN_NODE_NAME", value_name = "NAME")]
    pub(crate) node: Option<String>,
    /// Record the results only; leave aliases waiting even where the policy now holds (CI test jobs: the record job moves them after merging every shard).
    #[arg(long)]
    pub(crate) no_move: bool,
    /// Judge every figure also against this gpu-selftest baseline (as `build --selftest-baseline`).
    #[arg(long, env = "IMAGEGEN_SELFTEST_BASELINE", value_name = "FILE")]
    pub(crate) selftest_baseline: Option<PathBuf>,
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    /// `table` for people, `json` for machines.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
    #[command(flatten)]
    pub(crate) signing: SigningArgs,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TestAction {
    /// Record gpu-selftest JSON reports made elsewhere (a Kubernetes Job, a GPU runner); each must name a digest the manifest records (`image_digest`) and its node (`node_name`).
    Import(TestImportArgs),
    /// Move the aliases waiting on images whose recorded results now satisfy the test policy (after `manifest merge` of test shards); runs no test.
    Settle(TestSettleArgs),
}

#[derive(Debug, Args)]
pub(crate) struct TestSettleArgs {
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    /// `table` for people, `json` for machines.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
}

#[derive(Debug, Args)]
pub(crate) struct TestImportArgs {
    /// gpu-selftest JSON reports (`gpu-selftest --format json --image-digest D --node-name N`).
    #[arg(required = true, value_name = "REPORT")]
    pub(crate) reports: Vec<PathBuf>,
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    /// Record the results only; leave aliases waiting even where the policy now holds.
    #[arg(long)]
    pub(crate) no_move: bool,
    /// `table` for people, `json` for machines.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
    #[command(flatten)]
    pub(crate) signing: SigningArgs,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
}

/// Deadlines of the calls a command makes to registries and the Docker daemon.
#[derive(Debug, Clone, Args)]
pub(crate) struct DeadlineArgs {
    /// Seconds each registry request may take; also the longest a push may go without progress. A registry that accepts connections and never answers fails each attempt within it.
    #[arg(long, env = "IMAGEGEN_REGISTRY_TIMEOUT", default_value_t = 60, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) registry_timeout: u64,
    /// Seconds each Docker daemon request may take until its answer begins (a build's or push's streamed output is not cut off by it).
    #[arg(long, env = "IMAGEGEN_DAEMON_TIMEOUT", default_value_t = 300, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) daemon_timeout: u64,
}

/// How long a command that writes the manifest waits for another run's lock on it.
#[derive(Debug, Clone, Args)]
pub(crate) struct LockArgs {
    /// Seconds to wait for another run that holds the manifest's lock (or publishes the same tag) before giving up, naming it; 0 gives up at once.
    #[arg(
        long,
        env = "IMAGEGEN_LOCK_TIMEOUT",
        default_value_t = 600,
        value_name = "SECONDS"
    )]
    pub(crate) lock_timeout: u64,
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    /// `table` for people, `json` for machines.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
    /// Ask this registry (`host[:port]`) instead of the one each record names, e.g. a mirror in CI; by default the matrix's `registry` where it differs from the recorded one.
    #[arg(long, env = "IMAGEGEN_REGISTRY", value_name = "HOST")]
    pub(crate) registry: Option<String>,
    /// Settle alias moves left in between (begun, not written down as done) by what the registry serves, and write that down; nothing else is changed.
    #[arg(long)]
    pub(crate) adopt: bool,
    /// How many registry requests at once (each a HEAD of one tag).
    #[arg(long, env = "IMAGEGEN_VERIFY_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) concurrency: u16,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
    /// Check the signed attestations instead of the tags: every pushed image has its provenance, SBOM and gpu-selftest statements and its signature, each verifies with the key, and each statement's subject is the digest the registry serves.
    #[arg(long, conflicts_with = "adopt")]
    pub(crate) attestations: bool,
    /// The public key (PEM) to verify with; without it, the public half of the signing key.
    #[arg(long, requires = "attestations", value_name = "PUB")]
    pub(crate) key: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) signing: SigningArgs,
}

/// The key attestations are signed with: a PEM file (unencrypted PKCS#8 or SEC1, ECDSA P-256)
/// only its owner may read, or the PEM text itself in `IMAGEGEN_SIGNING_KEY`.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct SigningArgs {
    /// The signing key, a PEM file (ECDSA P-256) readable by its owner only; `IMAGEGEN_SIGNING_KEY` may hold the PEM text instead. With `build --push`, every pushed image is signed and its attestations attached.
    #[arg(long, env = "IMAGEGEN_SIGNING_KEY_FILE", value_name = "KEY")]
    pub(crate) signing_key: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct AttestArgs {
    #[command(subcommand)]
    pub(crate) action: AttestAction,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AttestAction {
    /// Build, sign and push the three statements and the signature of recorded images (all pushed ones, or those named), and record them in the manifest.
    Sign(AttestSignArgs),
    /// Print the statements of IMAGE that verify with the key, and what is missing or bad (exit 1).
    Show(AttestShowArgs),
    /// Print the CycloneDX 1.6 SBOM of a recorded image (built, pushed or not) as the attestation would carry it, unsigned: the lock's Python packages with their hashes, the Debian packages and binaries read from the image, CUDA, cuDNN and NCCL; for auditors and scanners to compare.
    Sbom(AttestSbomArgs),
}

#[derive(Debug, Args)]
pub(crate) struct AttestSbomArgs {
    /// A full tag the manifest records (with or without `registry/repository:`).
    pub(crate) image: String,
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct AttestSignArgs {
    /// Full tags (with or without `registry/repository:`); none: every pushed image.
    pub(crate) images: Vec<String>,
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    #[command(flatten)]
    pub(crate) signing: SigningArgs,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
}

#[derive(Debug, Args)]
pub(crate) struct AttestShowArgs {
    /// A full tag the manifest records (with or without `registry/repository:`).
    pub(crate) image: String,
    /// The public key (PEM) to verify with; without it, the public half of the signing key.
    #[arg(long, value_name = "PUB")]
    pub(crate) key: Option<PathBuf>,
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    #[command(flatten)]
    pub(crate) signing: SigningArgs,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
}

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    /// How to print the plan: a table for a terminal, JSON, or markdown for a pull request.
    #[arg(long, value_enum, default_value_t = PlanFormat::Table)]
    pub(crate) format: PlanFormat,
    /// The steps of `build --push`: each image pushed, signed where a key is set, its aliases
    /// moved in the registry.
    #[arg(long)]
    pub(crate) push: bool,
    /// The steps of `build --no-test`.
    #[arg(long)]
    pub(crate) no_test: bool,
    /// The steps of `build --require-gpu`.
    #[arg(long)]
    pub(crate) require_gpu: bool,
    /// The steps of `build --move-untested-aliases`.
    #[arg(long)]
    pub(crate) move_untested_aliases: bool,
    #[command(flatten)]
    pub(crate) signing: SigningArgs,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["to", "previous"])))]
pub(crate) struct RollbackArgs {
    /// The alias to move, e.g. 2.7-cuda12.6-runtime or latest.
    pub(crate) alias: String,
    /// The digest to point it at (it must be recorded in the manifest), or a prefix of exactly one recorded digest (sha256:1ac1a03ff572).
    #[arg(long)]
    pub(crate) to: Option<String>,
    /// Point it where it pointed before its last move.
    #[arg(long)]
    pub(crate) previous: bool,
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The aliases to release (each held by a rollback).
    #[arg(required = true, value_name = "ALIAS")]
    pub(crate) aliases: Vec<String>,
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RestoreArgs {
    /// The full tag (or index tag) to restore, e.g. 2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04.
    pub(crate) tag: String,
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
}

#[derive(Debug, Args)]
pub(crate) struct PublishArgs {
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    /// Publish indexes whose platform images' self-test was skipped (no GPU, foreign platform); aliases still wait for a pass.
    #[arg(long)]
    pub(crate) allow_untested: bool,
    /// Check readiness and print what would be published; push nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
    /// With a signing key, each index is signed (provenance, SBOM and gpu-selftest statements made from its platform images') before its aliases move.
    #[command(flatten)]
    pub(crate) signing: SigningArgs,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
}

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// The earlier image: a full tag, an alias or a digest the manifest recorded.
    pub(crate) from: String,
    /// The later image: a full tag, an alias or a digest the manifest recorded.
    pub(crate) to: String,
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct DiffBuildArgs {
    /// The first build: a tag, `name@sha256:…` or image ID.
    pub(crate) first: String,
    /// The second build.
    pub(crate) second: String,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ResolveArgs {
    /// Only keep images that this NVIDIA driver runs: a full version (535.104.05), or a branch R535 meaning the lowest release of it the knowledge names.
    #[arg(long)]
    pub(crate) driver: Option<String>,
    /// With --driver: accept older driver branches that CUDA forward compatibility serves (data-center GPUs only).
    #[arg(long, requires = "driver")]
    pub(crate) forward_compat: bool,
    /// A table for people, or JSON (`{"images": [...], "rejected": [...]}`) for programs.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
    /// Exit 1 when any cell is rejected.
    #[arg(long)]
    pub(crate) strict: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RenderArgs {
    /// Output directory.
    #[arg(long, default_value = "images")]
    pub(crate) out: PathBuf,
    /// Write nothing; print a diff and exit 1 if the output directory is stale.
    #[arg(long)]
    pub(crate) check: bool,
    /// Accept a matrix that makes no image: render then removes every generated image directory (without it, that is an error).
    #[arg(long)]
    pub(crate) allow_empty: bool,
}

#[derive(Debug, Args)]
pub(crate) struct LockImagesArgs {
    /// Directory of rendered images (each lock is written beside its Dockerfile).
    #[arg(long, default_value = "images")]
    pub(crate) out: PathBuf,
    /// Only the images this names: a full tag, an alias (`latest`, `2.13-cuda13.0-runtime`, with or without `registry/repository:`) or a folder of images/ selects that image alone (not the flavours built on it), other text every image whose full tag contains it (`*` matches anything); a selected devel image's runtime lock is used as it is.
    #[arg(long)]
    pub(crate) only: Option<String>,
    /// Resolve every selected lock again to the newest versions the inputs allow, not only missing and stale ones (which keep the versions they had where they still fit).
    #[arg(long)]
    pub(crate) upgrade: bool,
    /// The uv executable (default: `uv` on PATH).
    #[arg(long, env = "IMAGEGEN_UV")]
    pub(crate) uv: Option<PathBuf>,
    /// Only the base images: look every base the images are built on up again (registry API, or the daemon for a base only it holds), write images/bases.lock and print what moved; no package is locked.
    #[arg(long, conflicts_with_all = ["no_bases", "upgrade"])]
    pub(crate) bases: bool,
    /// Lock the Python packages only: leave the base images' pins (images/bases.lock) as they are.
    #[arg(long)]
    pub(crate) no_bases: bool,
    /// Seconds each registry request may take while the bases are looked up.
    #[arg(long, env = "IMAGEGEN_REGISTRY_TIMEOUT", default_value_t = 60, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) registry_timeout: u64,
}

#[derive(Debug, Args)]
pub(crate) struct BuildArgs {
    /// Only the images this names: a full tag, an alias (`latest`, `2.13-cuda13.0-runtime`, with or without `registry/repository:`) or a folder of images/ selects that image alone (never the flavours built on it: a flavour is named by its own tag); other text selects every image whose full tag contains it (`*` matches anything). The images a selected one is built FROM (a devel image's runtime image, a flavour's parent) come along.
    #[arg(long)]
    pub(crate) only: Option<String>,
    /// How many images to build at once (at least 1).
    #[arg(long, default_value_t = 2, value_parser = at_least_one)]
    pub(crate) jobs: usize,
    /// Build the I-th of N deterministic parts of the matrix (e.g. 2/4), one per CI runner.
    #[arg(long)]
    pub(crate) shard: Option<String>,
    /// Only images of this platform (linux/amd64 or linux/arm64): run one build per platform, each on a runner of that platform.
    #[arg(long)]
    pub(crate) platform: Option<String>,
    /// Push full tags (and moved aliases) to the matrix's registry.
    #[arg(long)]
    pub(crate) push: bool,
    /// Do not run gpu-selftest (aliases then do not move).
    #[arg(long)]
    pub(crate) no_test: bool,
    /// Fail every image whose self-test could not run on GPUs (no GPU on this host).
    #[arg(long)]
    pub(crate) require_gpu: bool,
    /// A gpu-selftest baseline saved on a node known to be good (`gpu-selftest --save-baseline
    /// FILE`): each image's self-test also fails below its stated share of these figures.
    #[arg(long, env = "IMAGEGEN_SELFTEST_BASELINE", value_name = "FILE")]
    pub(crate) selftest_baseline: Option<PathBuf>,
    /// Move aliases of images whose self-test was skipped for lack of GPUs (never of failed ones).
    #[arg(long)]
    pub(crate) move_untested_aliases: bool,
    /// Directory of rendered images.
    #[arg(long, default_value = "images")]
    pub(crate) images: PathBuf,
    /// Directory holding gpu-selftest-cu11, -cu12 and -cu13 (from selftest/build.sh).
    #[arg(long, default_value = "target/selftest")]
    pub(crate) selftest_dir: PathBuf,
    /// The host-side wheel cache (content-addressed by sha256, shared by every image and run;
    /// keep it between CI jobs). Default: $XDG_CACHE_HOME/imagegen/wheels, else
    /// ~/.cache/imagegen/wheels, else .imagegen/wheels.
    #[arg(long, env = "IMAGEGEN_WHEEL_CACHE", value_name = "DIR")]
    pub(crate) wheel_cache: Option<PathBuf>,
    /// How many wheels are fetched at once.
    #[arg(long, env = "IMAGEGEN_WHEEL_JOBS", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub(crate) wheel_jobs: u64,
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    /// Where each image's full build log goes.
    #[arg(long, default_value = ".imagegen/logs")]
    pub(crate) log_dir: PathBuf,
    /// Attempts per push before a transient registry failure counts (backoff 1 s, 2 s, 4 s, ...).
    #[arg(long, default_value_t = 5)]
    pub(crate) push_attempts: u32,
    /// Print the plan (images, build keys, order, aliases) and build nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Release the holds rollbacks put on the aliases of the images to build, so this build may move them (as `imagegen release ALIAS`).
    #[arg(long)]
    pub(crate) release_holds: bool,
    /// `table` for people; `json` prints one JSON object on stdout at the end (`images`: each image's result; `left_undone`; `manifest`), the table going to stderr; with --dry-run, the plan as JSON.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
    /// Seconds one image's build may take before it is stopped.
    #[arg(long, env = "IMAGEGEN_BUILD_TIMEOUT", default_value_t = 21600, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) build_timeout: u64,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
    #[command(flatten)]
    pub(crate) signing: SigningArgs,
}

#[derive(Debug, Args)]
pub(crate) struct BakeArgs {
    /// The bake file to write (`-` prints it); .imagegen/ is ignored by git. Each image's build context (images/<name>/ and its self-test binary) is staged under .imagegen/bake/<name>/ of the working directory, where `docker buildx bake -f .imagegen/docker-bake.json` runs.
    #[arg(long, default_value = ".imagegen/docker-bake.json")]
    pub(crate) out: PathBuf,
    /// Directory holding gpu-selftest-cu11, -cu12 and -cu13 (from selftest/build.sh).
    #[arg(long, default_value = "target/selftest")]
    pub(crate) selftest_dir: PathBuf,
    /// Write only the bake file; do not stage the build contexts.
    #[arg(long)]
    pub(crate) no_stage: bool,
    /// The host-side wheel cache (as `imagegen build --wheel-cache`): the staged contexts'
    /// wheels/ are hard links into it (copies across file systems).
    #[arg(long, env = "IMAGEGEN_WHEEL_CACHE", value_name = "DIR")]
    pub(crate) wheel_cache: Option<PathBuf>,
    /// How many wheels are fetched at once.
    #[arg(long, env = "IMAGEGEN_WHEEL_JOBS", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub(crate) wheel_jobs: u64,
}

#[derive(Debug, Args)]
pub(crate) struct K8sArgs {
    /// A full tag or alias the matrix makes (with or without the repository).
    #[arg(required_unless_present = "policy")]
    pub(crate) image: Option<String>,
    /// Instead of a Job: a Sigstore policy-controller ClusterImagePolicy admitting the manifest's repositories' images only when signed by --key and their gpu-selftest attestation passed.
    #[arg(long, conflicts_with_all = ["image", "test"], requires = "key")]
    pub(crate) policy: bool,
    /// With --policy: the team's PEM public key (`openssl ec -in KEY -pubout`).
    #[arg(long)]
    pub(crate) key: Option<PathBuf>,
    /// GPUs per node; more than one runs the command under torchrun.
    #[arg(long, default_value_t = 1)]
    pub(crate) gpus: u32,
    /// Nodes; more than one makes an Indexed Job with a headless Service and a static torchrun rendezvous.
    #[arg(long, default_value_t = 1)]
    pub(crate) nodes: u32,
    /// The namespace of the Job (and Service).
    #[arg(long, default_value = "default")]
    pub(crate) namespace: String,
    /// The Job name, a DNS label of at most 52 characters (default: the repository's last component and the tag).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Leave out the node affinity on NVIDIA GPU feature discovery's driver labels.
    #[arg(long)]
    pub(crate) no_driver_affinity: bool,
    /// The manifest whose recorded digest pins the image (`repository:tag@sha256:...`); a missing file pins nothing.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    /// The program to run, last on the line (default: the image's gpu-selftest), e.g. --command python train.py --epochs 3.
    #[arg(long, num_args = 1.., allow_hyphen_values = true)]
    pub(crate) command: Vec<String>,
    /// Print one Job per GPU model of matrix.yaml's `tests.require` (one for any GPU without it) that runs gpu-selftest against the image's recorded digest on a node of that model (`nvidia.com/gpu.product`) and logs the JSON report `imagegen test import` reads.
    #[arg(long, conflicts_with_all = ["command", "nodes"])]
    pub(crate) test: bool,
    /// With --test: the `nvidia.com/gpu.product` value(s) of a model's nodes, MODEL=VALUE (repeatable; default NVIDIA- and the model's words joined by -, e.g. NVIDIA-H200).
    #[arg(long = "gpu-product", value_name = "MODEL=VALUE", requires = "test")]
    pub(crate) gpu_products: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CiFormat {
    /// The GitHub Actions `strategy.matrix` (`{"include": [...]}`) on one line.
    Github,
    /// A GitLab CI child pipeline (YAML): a build job per shard and a record job merging their manifests.
    Gitlab,
}

#[derive(Debug, Args)]
pub(crate) struct CiArgs {
    /// The CI system's format: a GitHub Actions matrix, or a GitLab CI child pipeline.
    #[arg(long, value_enum, default_value_t = CiFormat::Github)]
    pub(crate) format: CiFormat,
    /// The same as --format github (kept for existing workflows).
    #[arg(long, hide = true)]
    pub(crate) github: bool,
    /// At most N jobs (1 to 256, GitHub's limit), image families dealt round-robin (`imagegen build --shard I/N`).
    #[arg(long, conflicts_with = "per_image", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub(crate) shards: Option<usize>,
    /// One job per image family (a runtime image and the devel images on it); the default.
    #[arg(long)]
    pub(crate) per_image: bool,
    /// Print the test fan-out instead: one job per GPU model of matrix.yaml's `tests.require` (one `any` job without it), each for a self-hosted runner labelled `gpu-<model>` (or `gpu`) that tests the pushed digests.
    #[arg(long, conflicts_with_all = ["shards", "per_image"])]
    pub(crate) tests: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ManifestArgs {
    /// What to do with manifests.
    #[command(subcommand)]
    pub(crate) action: ManifestAction,
}

#[derive(Debug, Args)]
pub(crate) struct KnowledgeArgs {
    #[command(subcommand)]
    pub(crate) action: KnowledgeAction,
}

#[derive(Debug, Subcommand)]
pub(crate) enum KnowledgeAction {
    /// Print the knowledge entry of a release as its wheels' own metadata gives it (Python and manylinux tags, platforms, the CUDA runtime, cuDNN and NCCL pins), read from a PyPI-style index.
    Derive(DeriveArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DeriveArgs {
    /// The package (only torch so far).
    pub(crate) package: DerivePackage,
    /// The release, e.g. 2.13.0.
    pub(crate) version: String,
    /// The simple index to read (PEP 691 JSON or PEP 503 HTML, with PEP 658 .metadata files).
    #[arg(long, default_value = DEFAULT_PACKAGE_INDEX)]
    pub(crate) index: String,
    /// Compare with the knowledge in use; exit 1 when they differ.
    #[arg(long)]
    pub(crate) check: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DerivePackage {
    Torch,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ManifestAction {
    /// Merge manifests (e.g. one per CI shard): newest record per tag wins, histories are unioned, aliases take their newest move.
    Merge(MergeArgs),
    /// Drop records the manifest no longer needs: failed records older than a newer build of the same image, and with --keep N each image's earlier records beyond N; never one an alias points to. Says what it removes; writes only with --apply.
    Prune(PruneArgs),
}

#[derive(Debug, Args)]
pub(crate) struct PruneArgs {
    /// Also keep only the newest N earlier records of each image (records an alias points to stay).
    #[arg(long, value_name = "N")]
    pub(crate) keep: Option<usize>,
    /// Write the pruned manifest (without it, only say what would be removed).
    #[arg(long)]
    pub(crate) apply: bool,
    /// The manifest file.
    #[arg(long, default_value = DEFAULT_MANIFEST)]
    pub(crate) manifest: PathBuf,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
}

#[derive(Debug, Args)]
pub(crate) struct MergeArgs {
    /// The manifests to merge; each must exist (a missing one is an error, not an empty manifest).
    #[arg(required = true)]
    pub(crate) inputs: Vec<PathBuf>,
    /// Where to write the result (default: print it); written under its lock, with inputs read under it.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) lock: LockArgs,
}

/// `--jobs`: a count of at least 1 (0 would build nothing and wait forever).
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("0 would build nothing: give at least 1".into()),
        Ok(count) => Ok(count),
        Err(_) => Err(format!("{text:?} is not a number of images")),
    }
}

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The registry to check (default: the matrix's).
    #[arg(long, env = "IMAGEGEN_REGISTRY", value_name = "HOST")]
    pub(crate) registry: Option<String>,
    /// Directory holding gpu-selftest-cu11, -cu12 and -cu13 (from selftest/build.sh).
    #[arg(long, default_value = "target/selftest")]
    pub(crate) selftest_dir: PathBuf,
    /// The uv executable (default: `uv` on PATH).
    #[arg(long, env = "IMAGEGEN_UV")]
    pub(crate) uv: Option<PathBuf>,
    /// Free disk (GiB) below which the project's file system is reported (a torch image takes about 10).
    #[arg(long, default_value_t = 20)]
    pub(crate) min_free_gib: u64,
    /// Seconds each registry or daemon request may take.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) timeout: u64,
}
