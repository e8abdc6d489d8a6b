//! `imagegen k8s IMAGE`: prints the Kubernetes Job (and Service) that `generate::k8s` makes for
//! a full tag or alias, pinned to the digest the manifest recorded for the image's current good
//! build, if any.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};

use crate::attest::policy::cluster_image_policy;
use crate::cli::SigningArgs;
use crate::commands::attest;

use crate::cli::K8sArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{emit, note};
use crate::commands::stages::resolve_project;
use crate::generate::k8s::test_jobs::{default_gpu_product, test_jobs};
use crate::generate::k8s::{checked_job_name, manifests, JobSettings};
use crate::history::manifest::{AliasRecord, Manifest, RecordStatus};
use crate::project::{load_manifest, Project};
use crate::resolve::image::{ImageSpec, ResolveOptions};
use crate::resolve::lookup::find_images;

/// `imagegen k8s IMAGE`: prints the Job (and Service) YAML, pinned to the digest `manifest`
/// recorded for the image's current good build, if any.
pub(crate) fn run(project: &Project, args: &K8sArgs) -> Result<Outcome> {
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
    let mut named = find_images(&images, image)?;
    let recorded = load_manifest(manifest)?;
    // An alias runs where the manifest says it points now (after a rollback, the digest rolled
    // back to, which may be another tag of the matrix), not the matrix's newest image.
    if let Some((alias, record)) = recorded_alias(&recorded, image, &named) {
        let digest = recorded.alias_digest(alias);
        if let Some(target) = images.iter().find(|spec| spec.tag == record.tag) {
            named = vec![target];
        } else if !recorded.indexes().contains_key(&record.tag) {
            note(format!(
                "note: {alias} points at {}, which the matrix no longer makes; the Job keeps the driver floor of {}",
                record.tag, named[0].tag
            ));
        }
        if let Some(reason) = recorded.alias_hold(alias) {
            note(format!("note: {reason}"));
        }
        if digest.is_some() {
            settings.digest = digest;
            if args.test {
                return print_test_jobs(project, args, &named, &settings);
            }
            emit(manifests(&named, &settings)?.to_yaml())?;
            return Ok(Outcome::Success);
        }
    }
    // A digest pins one image; an index of several platforms runs by its tag.
    if let [image] = named.as_slice() {
        settings.digest = recorded
            .images()
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
    if args.test {
        return print_test_jobs(project, args, &named, &settings);
    }
    let manifests = manifests(&named, &settings)?;
    emit(manifests.to_yaml())?;
    Ok(Outcome::Success)
}

/// The alias `text` names (as given, or after `registry/repository:`) when the manifest records
/// it and the named images take it, with its record.
fn recorded_alias<'a>(
    manifest: &'a Manifest,
    text: &'a str,
    named: &[&ImageSpec],
) -> Option<(&'a str, &'a AliasRecord)> {
    let alias = match manifest.aliases().get_key_value(text) {
        Some((alias, _)) => alias.as_str(),
        None => text.rsplit_once(':').map(|(_, alias)| alias)?,
    };
    let record = manifest.aliases().get(alias)?;
    named
        .iter()
        .any(|spec| spec.aliases.iter().any(|a| a == alias))
        .then_some((alias, record))
}

/// `imagegen k8s IMAGE --test`: one self-test Job per GPU model of the policy, against the
/// image's recorded digest (a test of a digest needs one: refused without).
fn print_test_jobs(
    project: &Project,
    args: &K8sArgs,
    named: &[&ImageSpec],
    settings: &JobSettings,
) -> Result<Outcome> {
    let [image] = named else {
        bail!(
            "--test tests one pushed image: {} names {} (the per-platform images of an index); name one of their tags",
            args.image.as_deref().unwrap_or_default(),
            named.len()
        );
    };
    let Some(digest) = settings.digest.clone() else {
        bail!(
            "--test runs the self-test against the digest {} records for {}, and it records none for this build\nhint: `imagegen build --push` records it",
            args.manifest.display(),
            image.tag
        );
    };
    let mut products: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in &args.gpu_products {
        let Some((model, value)) = entry.split_once('=') else {
            bail!("--gpu-product {entry:?}: write MODEL=VALUE, e.g. H100=NVIDIA-H100-80GB-HBM3");
        };
        if !value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            || value.is_empty()
            || value.len() > 63
        {
            bail!("--gpu-product {entry:?}: {value:?} is not a Kubernetes label value (letters, digits, `-`, `_`, `.`; at most 63)");
        }
        products
            .entry(model.to_ascii_lowercase())
            .or_default()
            .push(value.to_string());
    }
    let require = &project.matrix()?.tests.require;
    let models: Vec<(String, Vec<String>)> = if require.is_empty() {
        vec![("any".to_string(), Vec::new())]
    } else {
        require
            .iter()
            .map(|model| {
                let values = products
                    .remove(&model.to_ascii_lowercase())
                    .unwrap_or_else(|| vec![default_gpu_product(model)]);
                (model.clone(), values)
            })
            .collect()
    };
    if let Some(model) = products.keys().next() {
        bail!(
            "--gpu-product names {model}, which matrix.yaml's `tests.require` does not list ({})",
            if require.is_empty() {
                "it lists none".to_string()
            } else {
                require.join(", ")
            }
        );
    }
    let jobs = test_jobs(image, &digest, &models, settings)?;
    let text: String = jobs.iter().map(|job| job.to_yaml()).collect();
    emit(text)?;
    note(format!(
        "{} Job(s); after each, `kubectl logs job/NAME > NAME.json` and `imagegen test import NAME.json ...` record the results",
        jobs.len()
    ));
    Ok(Outcome::Success)
}

/// `imagegen k8s --policy --key PUB`: the ClusterImagePolicy for every repository the manifest
/// records a pushed image of.
fn policy(args: &K8sArgs) -> Result<Outcome> {
    let key = args.key.as_deref().context("--policy needs --key PUB")?;
    let verifier = attest::load_verifier(Some(key), &SigningArgs::default())?;
    let manifest = load_manifest(&args.manifest)?;
    let repositories: BTreeSet<String> = manifest
        .images()
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
