//! `imagegen doctor`: whether this machine has what `build` needs, each piece checked for real
//! (the daemon answers, the registry answers `GET /v2/` with our credentials, the base images are
//! in the daemon, uv runs, the self-test binaries are there, the disk has room) and, for each
//! that is missing, what to do. Changes nothing. Exit 0 when nothing blocks a build, 1 when
//! something does.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;

use crate::cli::DoctorArgs;
use crate::commands::output::table;
use crate::commands::stages::render_project;
use crate::commands::Outcome;
use crate::docker::{Engine, Registries, RetryPolicy};
use crate::project::{free_bytes, missing_files, Project};

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    /// Builds go on, with less (no GPU: self-tests skipped).
    Warn,
    /// A build would fail for it.
    Missing,
    /// There, but wrong: a build would fail for it (a matrix or template that does not load).
    Broken,
}

struct Check {
    name: &'static str,
    verdict: Verdict,
    detail: String,
    fix: String,
}

fn check(name: &'static str, verdict: Verdict, detail: String, fix: &str) -> Check {
    Check {
        name,
        verdict,
        detail,
        fix: fix.to_string(),
    }
}

pub(crate) fn run(project: &Project, args: &DoctorArgs) -> Result<Outcome> {
    let mut checks = Vec::new();
    let resolution = render_project(project).map(|(resolution, _)| resolution);
    let images = match &resolution {
        Ok(resolution) if !resolution.images.is_empty() => {
            checks.push(check(
                "matrix",
                Verdict::Ok,
                format!(
                    "{}: {} images",
                    project.matrix_path.display(),
                    resolution.images.len()
                ),
                "",
            ));
            resolution.images.clone()
        }
        Ok(_) => {
            checks.push(check(
                "matrix",
                Verdict::Missing,
                format!("{} makes no image", project.matrix_path.display()),
                "`imagegen resolve` says why each cell is rejected",
            ));
            Vec::new()
        }
        Err(error) => {
            let template = error.downcast_ref::<crate::render::TemplateSyntax>();
            checks.push(check(
                if template.is_some() {
                    "templates"
                } else {
                    "matrix"
                },
                if project.matrix_path.exists() {
                    Verdict::Broken
                } else {
                    Verdict::Missing
                },
                crate::commands::describe(error).replace('\n', " "),
                if template.is_some() {
                    "fix the template at the line the error names"
                } else {
                    "fix the matrix as the error says"
                },
            ));
            Vec::new()
        }
    };
    let timeout = Duration::from_secs(args.timeout);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match Engine::connect_with_timeout(timeout).await {
            Err(error) => checks.push(check(
                "docker daemon",
                Verdict::Missing,
                error.to_string().replace('\n', " "),
                "start Docker (`sudo systemctl start docker`) or point DOCKER_HOST at a daemon; your user needs access to its socket (the `docker` group)",
            )),
            Ok(engine) => {
                let platform = engine.platform().await.unwrap_or_else(|_| "?".into());
                checks.push(check(
                    "docker daemon",
                    Verdict::Ok,
                    format!("{} ({platform})", engine.address()),
                    "",
                ));
                match engine.gpu_runtime_available().await {
                    Ok(true) => checks.push(check("gpu runtime", Verdict::Ok, "NVIDIA runtime or CDI devices".into(), "")),
                    _ => checks.push(check(
                        "gpu runtime",
                        Verdict::Warn,
                        "no NVIDIA runtime on the daemon: self-tests run without GPUs and are recorded as skipped".into(),
                        "install the NVIDIA Container Toolkit on a GPU machine; elsewhere `imagegen test` on a GPU node records the results later",
                    )),
                }
                // The bases the images build FROM (a devel image builds on its runtime image).
                let bases: BTreeSet<&str> = images
                    .iter()
                    .filter(|image| image.parent.is_none())
                    .map(|image| image.base_image.as_str())
                    .collect();
                for base in bases {
                    let name = base.split('@').next().unwrap_or(base);
                    let present = matches!(engine.image(base).await, Ok(Some(_)))
                        || matches!(engine.image(name).await, Ok(Some(_)));
                    checks.push(if present {
                        check("base image", Verdict::Ok, format!("{name} is in the daemon"), "")
                    } else {
                        check(
                            "base image",
                            Verdict::Missing,
                            format!("{name} is not in the daemon (build pulls it, which needs its registry)"),
                            "`docker pull` or `docker load` it here, or name a base you have in base_images.runtime",
                        )
                    });
                }
            }
        }
        let registry = args
            .registry
            .clone()
            .or_else(|| project.matrix().ok().map(|m| m.registry.clone()));
        if let (Some(registry), Ok(matrix)) = (registry, project.matrix()) {
            let repository = format!("{registry}/{}", matrix.repository);
            let registries = Registries::new(timeout, RetryPolicy::no_retries());
            let credentials = registries.credentials(&repository);
            let with = match &credentials {
                Ok(Some(_)) => "with the credentials of the Docker config",
                Ok(None) => "without credentials (none in the Docker config for it)",
                Err(_) => "the Docker config cannot be read",
            };
            match registries.client(&repository) {
                Err(error) => checks.push(check("registry", Verdict::Missing, error.to_string(), "fix the Docker config (DOCKER_CONFIG, ~/.docker/config.json)")),
                Ok(client) => match client.ping().await {
                    Ok(()) => checks.push(check("registry", Verdict::Ok, format!("{registry} answers, {with}"), "")),
                    Err(error) => {
                        let text = error.to_string().replace('\n', " ");
                        let fix = if text.contains("401") || text.contains("403") || text.contains("unauthorized") {
                            "`docker login` to it (imagegen reads the Docker config and its credential helpers)"
                        } else {
                            "start it (a local one without Docker Hub: Debian's docker-registry package, `docker-registry serve CONFIG &` with a config such as imagegen's examples/offline/registry.yml (127.0.0.1:5000); or `docker run -d -p 127.0.0.1:5000:5000 registry:2`) or set --registry/IMAGEGEN_REGISTRY; only build --push needs it"
                        };
                        checks.push(check("registry", Verdict::Missing, format!("{text} ({with})"), fix));
                    }
                },
            }
        }
    });
    let uv = args
        .uv
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("uv"));
    match std::process::Command::new(&uv).arg("--version").output() {
        Ok(output) if output.status.success() => checks.push(check(
            "uv",
            Verdict::Ok,
            String::from_utf8_lossy(&output.stdout).trim().to_string(),
            "",
        )),
        _ => checks.push(check(
            "uv",
            Verdict::Missing,
            format!("{} does not run", uv.display()),
            "`imagegen lock` needs it: `pip install uv` (or `bash .ci/install-deps.sh`, then --uv .ci/venv/bin/uv / IMAGEGEN_UV)",
        )),
    }
    let binaries: Vec<String> = images
        .iter()
        .map(|image| image.selftest.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !binaries.is_empty() {
        let missing = missing_files(&args.selftest_dir, &binaries);
        checks.push(if missing.is_empty() {
            check(
                "self-test binaries",
                Verdict::Ok,
                format!("{} in {}", binaries.join(", "), args.selftest_dir.display()),
                "",
            )
        } else {
            check(
                "self-test binaries",
                Verdict::Missing,
                format!("{} not in {}", missing.join(", "), args.selftest_dir.display()),
                "`bash selftest/build.sh` builds them (`--help` lists the builds and their cost), or pass --selftest-dir",
            )
        });
    }
    let root = project.root();
    match free_bytes(root) {
        Some(bytes) => {
            let gib = bytes / (1 << 30);
            checks.push(check(
                "disk",
                if gib >= args.min_free_gib { Verdict::Ok } else { Verdict::Warn },
                format!("{gib} GiB free where the project is"),
                "free space (`docker image prune` removes dangling images), or build fewer images at once (--jobs 1)",
            ));
        }
        None => checks.push(check(
            "disk",
            Verdict::Warn,
            "df cannot say".into(),
            "check free space by hand",
        )),
    }
    let mut rows = vec![vec!["CHECK".to_string(), "STATUS".into(), "DETAIL".into()]];
    for item in &checks {
        let status = match item.verdict {
            Verdict::Ok => "ok",
            Verdict::Warn => "warning",
            Verdict::Missing => "missing",
            Verdict::Broken => "broken",
        };
        rows.push(vec![
            item.name.to_string(),
            status.into(),
            item.detail.clone(),
        ]);
    }
    print!("{}", table(&rows));
    let todo: Vec<&Check> = checks.iter().filter(|c| c.verdict != Verdict::Ok).collect();
    if !todo.is_empty() {
        println!("\nwhat to do:");
        let mut said = BTreeSet::new();
        for item in &todo {
            // Several base images missing share one fix.
            if said.insert((item.name, item.fix.as_str())) {
                println!("  {}: {}", item.name, item.fix);
            }
        }
    }
    Ok(
        if checks
            .iter()
            .any(|c| matches!(c.verdict, Verdict::Missing | Verdict::Broken))
        {
            Outcome::Failed
        } else {
            Outcome::Success
        },
    )
}
