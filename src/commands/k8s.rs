//! `imagegen k8s IMAGE`: prints the Kubernetes Job (and Service) that `generate::k8s` makes for
//! a full tag or alias, pinned to the digest the manifest recorded for the image's current good
//! build, if any.

use std::collections::BTreeSet;

use anyhow::{bail, Context, Result};

use crate::attest::policy::cluster_image_policy;
use crate::cli::SigningArgs;
use crate::commands::attest;

use crate::cli::K8sArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{emit, note};
use crate::commands::stages::resolve_project;
use crate::generate::k8s::{checked_job_name, manifests, JobSettings};
use crate::history::manifest::RecordStatus;
use crate::project::{load_manifest, Project};
use crate::resolve::image::ResolveOptions;
use crate::resolve::lookup::find_images;

/// `imagegen k8s IMAGE`: prints the Job (and Service) YAML, pinned to the digest `manifest`
/// recorded for the image's current good build, if any.
pub fn run(project: &Project, args: &K8sArgs) -> Result<Outcome> {
    let Some(image) = &args.image else {
        return policy(args);
    };
    if let Some(name) = &args.name {
        checked_job_name(name)?;
    }
    let mut settings = JobSettings {
        gpus: args.gpus,
        nodes: args.nodes,
        namespace: args.namespace.clone(),
        command: args.command.clone(),
        name: args.name.clone(),
        driver_affinity: !args.no_driver_affinity,
        digest: None,
    };
    let manifest = args.manifest.as_path();
    let images = resolve_project(project, ResolveOptions::default())?.images;
    let named = find_images(&images, image)?;
    // A digest pins one image; an index of several platforms runs by its tag.
    if let [image] = named.as_slice() {
        let recorded = load_manifest(manifest)?;
        settings.digest = recorded
            .images
            .get(&image.tag)
            .filter(|record| {
                record.status == RecordStatus::Ok && record.fingerprint == image.fingerprint
            })
            .and_then(|record| record.digest.clone());
        if settings.digest.is_none() {
            note(format!(
                "note: {} has no pushed build of {} with this fingerprint; the Job uses the tag without a digest",
                manifest.display(),
                image.tag
            ));
        }
    }
    let manifests = manifests(&named, &settings)?;
    emit(manifests.to_yaml())?;
    Ok(Outcome::Success)
}

/// `imagegen k8s --policy --key PUB`: the ClusterImagePolicy for every repository the manifest
/// records a pushed image of.
fn policy(args: &K8sArgs) -> Result<Outcome> {
    let key = args.key.as_deref().context("--policy needs --key PUB")?;
    let verifier = attest::load_verifier(Some(key), &SigningArgs::default())?;
    let manifest = load_manifest(&args.manifest)?;
    let repositories: BTreeSet<String> = manifest
        .images
        .values()
        .filter(|record| record.digest.is_some())
        .map(|record| record.repository.clone())
        .collect();
    if repositories.is_empty() {
        bail!(
            "{} records no pushed image: no repository to write a policy for\nhint: `imagegen build --push --signing-key KEY` first",
            args.manifest.display()
        );
    }
    let repositories: Vec<String> = repositories.into_iter().collect();
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| "imagegen-signed-and-gpu-tested".into());
    checked_job_name(&name)?;
    let object = cluster_image_policy(&name, &repositories, &verifier.to_pem());
    emit(serde_yaml::to_string(&object)?)?;
    Ok(Outcome::Success)
}
