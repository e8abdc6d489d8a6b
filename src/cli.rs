//! Command-line interface: clap derive structures only. Turning flags into settings and printing
//! happen in `app`; `main` maps outcomes to exit codes.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

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
    pub matrix: PathBuf,
    /// A compatibility knowledge file merged over the embedded one (same schema).
    #[arg(long, global = true, env = "IMAGEGEN_KNOWLEDGE")]
    pub knowledge: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanFormat {
    Table,
    Json,
    /// For a pull-request comment or $GITHUB_STEP_SUMMARY.
    Markdown,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare the matrix with the manifest: new and rebuilt images (and why), alias moves, rising driver minimums, images no longer made.
    Plan {
        /// The manifest file.
        #[arg(long, default_value = crate::manifest::DEFAULT_PATH)]
        manifest: PathBuf,
        #[arg(long, value_enum, default_value_t = PlanFormat::Table)]
        format: PlanFormat,
    },
    /// Re-point an alias in the registry to an earlier digest recorded in the manifest, without a rebuild.
    Rollback {
        /// The alias to move, e.g. 2.7-cuda12.6-runtime or latest.
        alias: String,
        /// The digest to point it at (it must be recorded in the manifest).
        #[arg(
            long,
            conflicts_with = "previous",
            required_unless_present = "previous"
        )]
        to: Option<String>,
        /// Point it where it pointed before its last move.
        #[arg(long)]
        previous: bool,
        /// The manifest file.
        #[arg(long, default_value = crate::manifest::DEFAULT_PATH)]
        manifest: PathBuf,
    },
    /// Assemble and push an OCI image index per full tag (and move its aliases) from the per-platform images recorded in the manifest.
    Publish {
        /// The manifest file.
        #[arg(long, default_value = crate::manifest::DEFAULT_PATH)]
        manifest: PathBuf,
        /// Publish indexes whose platform images' self-test was skipped (no GPU, foreign platform); aliases still wait for a pass.
        #[arg(long)]
        allow_untested: bool,
        /// Check readiness and print what would be published; push nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show what changed between two images (tags, aliases or digests recorded in the manifest): versions and packages.
    Diff {
        from: String,
        to: String,
        /// The manifest file.
        #[arg(long, default_value = crate::manifest::DEFAULT_PATH)]
        manifest: PathBuf,
    },
    /// Show which images the matrix makes, on which drivers they run, and which cells are impossible and why.
    Resolve {
        /// Only keep images that this NVIDIA driver runs (e.g. 535.104.05).
        #[arg(long)]
        driver: Option<String>,
        /// With --driver: accept older driver branches that CUDA forward compatibility serves (data-center GPUs only).
        #[arg(long, requires = "driver")]
        forward_compat: bool,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Exit 1 when any cell is rejected.
        #[arg(long)]
        strict: bool,
    },
    /// Render one Dockerfile per image into the output directory (or check that it is up to date).
    Render {
        /// Output directory.
        #[arg(long, default_value = "images")]
        out: PathBuf,
        /// Write nothing; print a diff and exit 1 if the output directory is stale.
        #[arg(long)]
        check: bool,
    },
    /// Build the images through the Docker Engine API, test each with gpu-selftest, tag, push, and record them in the manifest.
    Build {
        /// Only images whose full tag contains this text (or matches it, with `*` as a wildcard); runtime images that selected devel images build on come along.
        #[arg(long)]
        only: Option<String>,
        /// How many images to build at once.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Build the I-th of N deterministic parts of the matrix (e.g. 2/4), one per CI runner.
        #[arg(long)]
        shard: Option<crate::plan::Shard>,
        /// Only images of this platform (linux/amd64 or linux/arm64): run one build per platform, each on a runner of that platform.
        #[arg(long)]
        platform: Option<String>,
        /// Push full tags (and moved aliases) to the matrix's registry.
        #[arg(long)]
        push: bool,
        /// Do not run gpu-selftest (aliases then do not move).
        #[arg(long)]
        no_test: bool,
        /// Fail every image whose self-test could not run on GPUs (no GPU on this host).
        #[arg(long)]
        require_gpu: bool,
        /// Move aliases of images whose self-test was skipped for lack of GPUs (never of failed ones).
        #[arg(long)]
        move_untested_aliases: bool,
        /// Directory of rendered images.
        #[arg(long, default_value = "images")]
        images: PathBuf,
        /// Directory holding gpu-selftest-cu11, -cu12 and -cu13 (from selftest/build.sh).
        #[arg(long, default_value = "target/selftest")]
        selftest_dir: PathBuf,
        /// The manifest file.
        #[arg(long, default_value = crate::manifest::DEFAULT_PATH)]
        manifest: PathBuf,
        /// Where each image's full build log goes.
        #[arg(long, default_value = ".imagegen/logs")]
        log_dir: PathBuf,
        /// Attempts per push before a transient registry failure counts (backoff 1 s, 2 s, 4 s, ...).
        #[arg(long, default_value_t = 5)]
        push_attempts: u32,
        /// Print the plan (images, build keys, order, aliases) and build nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Export the resolved matrix as a docker-bake.json for `docker buildx bake` (BuildKit, remote builders).
    Bake {
        /// The bake file to write (`-` prints it); the self-test binaries are staged beside it under .imagegen/bake/.
        #[arg(long, default_value = "docker-bake.json")]
        out: PathBuf,
        /// Directory holding gpu-selftest-cu11, -cu12 and -cu13 (from selftest/build.sh).
        #[arg(long, default_value = "target/selftest")]
        selftest_dir: PathBuf,
        /// Write only the bake file; do not stage the self-test binaries into the build contexts.
        #[arg(long)]
        no_stage: bool,
    },
    /// Print a Kubernetes Job (YAML) that runs an image of the matrix on GPUs, kept off nodes whose driver is too old.
    K8s {
        /// A full tag or alias the matrix makes (with or without the repository).
        image: String,
        /// GPUs per node; more than one runs the command under torchrun.
        #[arg(long, default_value_t = 1)]
        gpus: u32,
        /// Nodes; more than one makes an Indexed Job with a headless Service and a static torchrun rendezvous.
        #[arg(long, default_value_t = 1)]
        nodes: u32,
        #[arg(long, default_value = "default")]
        namespace: String,
        /// The Job name (default: the repository's last component and the tag, as a DNS label).
        #[arg(long)]
        name: Option<String>,
        /// Leave out the node affinity on NVIDIA GPU feature discovery's driver labels.
        #[arg(long)]
        no_driver_affinity: bool,
        /// The manifest whose recorded digest pins the image (`repository:tag@sha256:...`); a missing file pins nothing.
        #[arg(long, default_value = crate::manifest::DEFAULT_PATH)]
        manifest: PathBuf,
        /// The program to run, last on the line (default: the image's gpu-selftest), e.g. --command python train.py --epochs 3.
        #[arg(long, num_args = 1.., allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Print the build fan-out as a GitHub Actions strategy.matrix (JSON): one job per shard or per image family.
    Ci {
        /// Emit the GitHub Actions matrix (`{"include": [...]}`), the only CI format so far.
        #[arg(long, required = true)]
        github: bool,
        /// At most N jobs (1 to 256, GitHub's limit), image families dealt round-robin (`imagegen build --shard I/N`).
        #[arg(long, conflicts_with = "per_image", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
        shards: Option<usize>,
        /// One job per image family (a runtime image and the devel images on it); the default.
        #[arg(long)]
        per_image: bool,
    },
    /// Work with manifests (imagegen-manifest.json).
    Manifest {
        #[command(subcommand)]
        action: ManifestAction,
    },
    /// Work with the compatibility knowledge.
    Knowledge {
        #[command(subcommand)]
        action: KnowledgeAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum KnowledgeAction {
    /// Print the knowledge entry of a release as its wheels' own metadata gives it (Python and manylinux tags, platforms, the CUDA runtime, cuDNN and NCCL pins), read from a PyPI-style index.
    Derive {
        /// The package (only torch so far).
        package: DerivePackage,
        /// The release, e.g. 2.13.0.
        version: String,
        /// The simple index to read (PEP 691 JSON or PEP 503 HTML, with PEP 658 .metadata files).
        #[arg(long, default_value = crate::knowledge_command::DEFAULT_INDEX)]
        index: String,
        /// Compare with the knowledge in use; exit 1 when they differ.
        #[arg(long)]
        check: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DerivePackage {
    Torch,
}

#[derive(Debug, Subcommand)]
pub enum ManifestAction {
    /// Merge manifests (e.g. one per CI shard): newest record per tag wins, histories are unioned, aliases take their newest move.
    Merge {
        /// The manifests to merge (a missing file counts as empty).
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Where to write the result (default: print it).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}
