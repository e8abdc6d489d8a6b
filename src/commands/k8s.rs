//! `imagegen k8s IMAGE`: prints the Kubernetes Job (and Service) that `generate::k8s` makes for
//! a full tag or alias, pinned to the digest the manifest recorded for the image's current good
//! build, if any.

use anyhow::Result;

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
    let named = find_images(&images, &args.image)?;
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
