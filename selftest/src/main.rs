//! `gpu-selftest`: does this CUDA stack drive these GPUs at full speed? Thin entry point: parse
//! the flags, run, exit with 0 (all passed), 1 (a check failed) or 2 (could not run).

mod app;
mod baseline;
mod binary_name;
mod cli;
mod discovery;
mod expected;
mod framework;
mod gpu;
mod health;
mod loader;
mod monitor;
mod nvml;
mod plot;
mod report;
mod rules;
mod shm;
mod stats;

use clap::Parser;

fn main() {
    // NCCL connects its peers at the first collective unless told otherwise (NCCL 2.22 and
    // later); connecting them when the communicators are made moves that second of set-up onto
    // the thread that makes them beside the matmul check. A value the user set is kept. Set
    // here, before any thread exists.
    if std::env::var_os("NCCL_RUNTIME_CONNECT").is_none() {
        std::env::set_var("NCCL_RUNTIME_CONNECT", "0");
    }
    let arguments = cli::Cli::parse();
    if let Some(version) = &arguments.binary_for_cuda {
        // The architecture names of Docker platforms (linux/amd64, linux/arm64).
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        match binary_name::binary_for(version, arch) {
            Ok(name) => {
                println!("{name}");
                std::process::exit(0);
            }
            Err(message) => {
                eprintln!("gpu-selftest: {message}");
                std::process::exit(2);
            }
        }
    }
    std::process::exit(app::run(arguments));
}
