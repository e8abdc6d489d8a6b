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

#[derive(Debug, Subcommand)]
pub enum Command {
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
}
