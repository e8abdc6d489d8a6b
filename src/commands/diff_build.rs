//! `imagegen diff-build A B`: names what differs between two builds of an image — the config's
//! fields, and per layer each file whose type, size, mode or content differs, with the step that
//! made the layer — so a rebuild that did not give the recorded digest is explained. A and B are
//! images in the Docker daemon (tag, `name@sha256:…` or ID), pulled first when it lacks them.
//! Exit 0 when they are the same image, 1 when they differ.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::cli::DiffBuildArgs;
use crate::commands::outcome::Outcome;
use crate::docker::{Engine, Registries, RetryPolicy};
use crate::pipeline::image_diff::{diff_images, read_export, ImageListing};
use crate::project::Project;

pub(crate) fn run(_project: &Project, args: &DiffBuildArgs) -> Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (first, second) = runtime.block_on(async {
        let engine =
            Engine::connect_with_timeout(Duration::from_secs(args.deadlines.daemon_timeout))
                .await?;
        let timeout = Duration::from_secs(args.deadlines.registry_timeout);
        let first = listing(&engine, &args.first, timeout).await?;
        let second = listing(&engine, &args.second, timeout).await?;
        anyhow::Ok((first, second))
    })?;
    let report = diff_images(&first, &second);
    if report.is_empty() {
        println!("{} and {} are the same image", args.first, args.second);
        return Ok(Outcome::Success);
    }
    println!("{} -> {}", args.first, args.second);
    print!("{report}");
    Ok(Outcome::Failed)
}

/// The files of every layer of `reference`, pulled when the daemon lacks it.
async fn listing(
    engine: &Engine,
    reference: &str,
    registry_timeout: Duration,
) -> Result<ImageListing> {
    if engine.image(reference).await?.is_none() {
        let registries = Registries::new(registry_timeout, RetryPolicy::default());
        let credentials = registries.credentials(reference)?;
        engine
            .pull(reference, None, credentials.as_ref(), |_| {})
            .await
            .with_context(|| format!("{reference} is not in the Docker daemon"))?;
    }
    let archive = engine.export_image(reference);
    tokio::task::spawn_blocking(move || read_export(std::io::BufReader::new(archive)))
        .await
        .map_err(|error| anyhow!("reading {reference}: {error}"))?
        .with_context(|| format!("reading the export of {reference}"))
}
