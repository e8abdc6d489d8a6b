//! `imagegen k8s IMAGE --test`: one Job per GPU model of the test policy (`tests.require`; one Job
//! for any GPU under the default policy) that runs gpu-selftest in the image pinned to its
//! recorded digest, on a node of that model, and prints the JSON report as the pod's only output,
//! so `kubectl logs job/NAME > report.json` gives what `imagegen test import` reads. Pure: the
//! Job of [`manifests`] with the self-test's command, environment and node affinity.
//!
//! - Node affinity on `nvidia.com/gpu.product`, the label the GPU Operator's feature discovery
//!   sets to the GPU's product name. The value for a model is `NVIDIA-` and the model's words
//!   joined by `-` (`H200` → `NVIDIA-H200`, what CUDA's name `NVIDIA H200` becomes with its space
//!   replaced), unless `--gpu-product MODEL=VALUE` names the value(s) a cluster uses (`H100` nodes
//!   are labelled with the full product name, e.g. the SXM board's CUDA name is
//!   `NVIDIA H100 80GB HBM3`). The default rule was not checked against a cluster here.
//! - `GPU_SELFTEST_IMAGE_DIGEST` (the digest) and `GPU_SELFTEST_NODE_NAME` (the downward API's
//!   `spec.nodeName`: a pod's host name is its own, not the node's) put both into the report.
//! - The report goes to a file and then to standard output, and the self-test's standard error to
//!   another file, so the log is the JSON report alone (a pod's log mixes both streams).

use crate::model::digest::Digest;
use crate::resolve::image::ImageSpec;

use super::{dns_label, manifests, EnvVar, EnvVarSource, JobSettings, K8sError, Manifests};
use super::{NodeSelectorRequirement, ObjectFieldSelector};

/// The label the GPU Operator's feature discovery sets to a node's GPU product.
pub(crate) const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// The longest Job name (as in `manifests`: Indexed pods append `-<index>`).
const JOB_NAME_MAX: usize = 52;

/// The pod's command: the report alone on standard output, the exit code the self-test's.
pub(crate) const TEST_COMMAND: &str = "gpu-selftest --format json --output /tmp/gpu-selftest-report.json 2>/tmp/gpu-selftest-stderr.txt; code=$?; cat /tmp/gpu-selftest-report.json; exit $code";

/// The `nvidia.com/gpu.product` value assumed for a policy model: `NVIDIA-` and its words.
pub(crate) fn default_gpu_product(model: &str) -> String {
    let words: Vec<&str> = model
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    format!("NVIDIA-{}", words.join("-"))
}

/// One Job per entry of `models` (a model and the `nvidia.com/gpu.product` values of its nodes;
/// no values: any GPU node) that tests `image` at `digest`.
pub(crate) fn test_jobs(
    image: &ImageSpec,
    digest: &Digest,
    models: &[(String, Vec<String>)],
    settings: &JobSettings,
) -> Result<Vec<Manifests>, K8sError> {
    let base = settings
        .name
        .clone()
        .unwrap_or_else(|| super::default_job_name(&image.repository, &image.tag));
    let mut jobs = Vec::new();
    for (model, products) in models {
        // The suffix is kept whole: the base is shortened to make room for it.
        let suffix = dns_label(&format!("test-{model}"), 24);
        let head = dns_label(&base, JOB_NAME_MAX - suffix.len() - 1);
        let settings = JobSettings {
            command: Vec::new(),
            nodes: 1,
            name: Some(format!("{head}-{suffix}")),
            digest: Some(digest.clone()),
            ..settings.clone()
        };
        let mut job = manifests(&[image], &settings)?;
        let pod = job
            .job
            .spec
            .as_mut()
            .and_then(|spec| spec.template.spec.as_mut())
            .ok_or(K8sError::NoImage)?;
        let container = pod.containers.first_mut().ok_or(K8sError::NoImage)?;
        container.command = Some(vec!["sh".into(), "-c".into(), TEST_COMMAND.into()]);
        container.env = Some(vec![
            EnvVar {
                name: "GPU_SELFTEST_IMAGE_DIGEST".into(),
                value: Some(digest.to_string()),
                ..Default::default()
            },
            EnvVar {
                name: "GPU_SELFTEST_NODE_NAME".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "spec.nodeName".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]);
        if !products.is_empty() {
            let requirement = NodeSelectorRequirement {
                key: GPU_PRODUCT_LABEL.into(),
                operator: "In".into(),
                values: Some(products.clone()),
            };
            let terms = pod
                .affinity
                .as_mut()
                .and_then(|a| a.node_affinity.as_mut())
                .and_then(|n| {
                    n.required_during_scheduling_ignored_during_execution
                        .as_mut()
                })
                .map(|selector| &mut selector.node_selector_terms)
                .ok_or(K8sError::NoImage)?;
            // Every ORed term (driver, architecture) also requires the GPU product.
            for term in terms {
                term.match_expressions
                    .get_or_insert_with(Vec::new)
                    .push(requirement.clone());
            }
        }
        if let Some(annotations) = job.job.metadata.annotations.as_mut() {
            annotations.insert("imagegen/test-gpu-model".into(), model.clone());
            annotations.insert("imagegen/digest".into(), digest.to_string());
        }
        let problems = super::validate(&job);
        if !problems.is_empty() {
            return Err(K8sError::Invalid { problems });
        }
        jobs.push(job);
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_job_per_model_pinned_to_the_digest_on_nodes_of_that_product() {
        let images = crate::resolve::test_images("registry: r.example\nrepository: t/p\ntorch: [\"2.7.1\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
        let digest = Digest::of(b"image");
        let models = vec![
            (
                "H100".to_string(),
                vec!["NVIDIA-H100-80GB-HBM3".to_string()],
            ),
            ("H200".to_string(), vec![default_gpu_product("H200")]),
        ];
        let jobs = test_jobs(&images[0], &digest, &models, &JobSettings::default()).unwrap();
        assert_eq!(jobs.len(), 2);
        let yaml = jobs[1].to_yaml();
        assert!(
            yaml.contains("name: p-2.7.1-cuda12.6-cudnn9-runtime-ubuntu24-04-test-h200")
                || yaml.contains("-test-h200\n"),
            "{yaml}"
        );
        assert!(yaml.contains(&format!("@{digest}")), "{yaml}");
        assert!(yaml.contains("key: nvidia.com/gpu.product"), "{yaml}");
        assert!(yaml.contains("- NVIDIA-H200"), "{yaml}");
        assert!(yaml.contains("fieldPath: spec.nodeName"), "{yaml}");
        assert!(yaml.contains("GPU_SELFTEST_IMAGE_DIGEST"), "{yaml}");
        // What is written reads back through the Kubernetes types unchanged.
        assert_eq!(Manifests::from_yaml(&yaml).unwrap(), jobs[1]);
        let name = jobs[0].job.metadata.name.clone().unwrap();
        assert!(name.ends_with("-test-h100") && name.len() <= 52, "{name}");
        // The default policy: one Job, on any GPU node.
        let any = test_jobs(
            &images[0],
            &digest,
            &[("any".into(), vec![])],
            &JobSettings::default(),
        )
        .unwrap();
        assert!(!any[0].to_yaml().contains("gpu.product"));
    }
}
