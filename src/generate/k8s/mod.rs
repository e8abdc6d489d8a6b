//! `imagegen k8s`: a Kubernetes `batch/v1` Job (and, across nodes, the headless Service its pods
//! find each other through) that runs one of the matrix's images on GPUs. Pure: an image spec and
//! settings in, `k8s-openapi` objects out (`objects`), serialized as deterministic YAML. Nothing
//! here talks to a cluster; `validate` checks the rules the API server would enforce on what this
//! module emits.
//!
//! What the Job carries, and why:
//! - `nvidia.com/gpu` limits (the NVIDIA device plugin's resource; requests default to limits).
//! - `/dev/shm` as a memory-backed `emptyDir`: container runtimes give 64 MiB, which DataLoader
//!   workers (they pass batches through shared memory) and NCCL's shared-memory transport
//!   overflow. Its `sizeLimit` is 8 GiB per GPU ([`SHM_GIB_PER_GPU`]): tmpfs pages count
//!   against the pod's memory only once written, and the limit evicts a runaway pod instead of
//!   letting it take the node's RAM. `imagegen build` runs gpu-selftest with the same 8 GiB.
//! - Node affinity that keeps the pod off nodes whose driver is below the image's `driver_min`,
//!   read from the labels NVIDIA GPU feature discovery sets (`nvidia.com/cuda.driver.major`,
//!   `.minor`, `.rev`). `Gt`/`Lt` compare integers, so "driver ≥ 560.35.05" becomes three
//!   ORed terms ([`driver_affinity_terms`]); equality is `Gt v-1` and `Lt v+1`, which, unlike
//!   `In`, does not care whether a label is zero-padded (`05`). Nodes without the labels never
//!   match: the pod stays pending rather than running on an unknown driver.
//! - Node affinity on `kubernetes.io/arch`: an image built for `linux/amd64` must not land on an
//!   arm64 GPU node (Grace Hopper), and the other way round. With several platforms in the
//!   matrix, naming the full tag or an alias runs the OCI index (each node pulls its own
//!   architecture) on any of the index's architectures; naming a per-platform tag keeps that one.
//! - Several GPUs: `torchrun --standalone --nproc-per-node N`. Several nodes: an Indexed Job
//!   (`completions = parallelism = M`), a headless Service named like the Job as the pods'
//!   `subdomain`, and a static rendezvous: every pod runs `torchrun --nnodes M --node-rank
//!   $(NODE_RANK)` with `NODE_RANK` its completion index, and the store on pod 0
//!   (`<job>-0.<job>:29500`). `backoffLimit: 0`: a failed rank fails the run, it is not retried
//!   into a world that has moved on.

pub(crate) mod objects;
pub(crate) mod test_jobs;
mod validation;

use std::collections::BTreeMap;

pub use objects::*;
pub use validation::validate;

use crate::model::digest::Digest;
use crate::model::version::DriverVersion;
use crate::resolve::image::ImageSpec;

/// `/dev/shm` size per GPU.
pub(crate) const SHM_GIB_PER_GPU: u32 = 8;
/// The rendezvous (TCP store) port of multi-node jobs, torchrun's default.
pub(crate) const RENDEZVOUS_PORT: u16 = 29500;
/// Labels NVIDIA GPU feature discovery sets on GPU nodes.
pub(crate) const DRIVER_MAJOR_LABEL: &str = "nvidia.com/cuda.driver.major";
pub(crate) const DRIVER_MINOR_LABEL: &str = "nvidia.com/cuda.driver.minor";
pub(crate) const DRIVER_REV_LABEL: &str = "nvidia.com/cuda.driver.rev";
/// The well-known label of a node's CPU architecture (`amd64`, `arm64`).
pub(crate) const ARCH_LABEL: &str = "kubernetes.io/arch";
/// The longest Job name: Indexed pods are named `<job>-<index>` and must stay a DNS label (63).
const JOB_NAME_MAX: usize = 52;

// ---------------------------------------------------------------------------------------------

/// What `imagegen k8s` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobSettings {
    /// GPUs per node (pod).
    pub(crate) gpus: u32,
    /// Nodes (pods); more than one makes an Indexed Job with a headless Service.
    pub(crate) nodes: u32,
    pub(crate) namespace: String,
    /// The program to run; empty runs the image's gpu-selftest (single node only).
    pub(crate) command: Vec<String>,
    /// The Job name; `None` derives it from the repository and tag.
    pub(crate) name: Option<String>,
    /// Keep the driver node affinity (off only for clusters without GPU feature discovery).
    pub(crate) driver_affinity: bool,
    /// The registry digest the manifest recorded for the image: the pod then pins it
    /// (`repository:tag@sha256:...`), so every node runs the same bytes as the self-test did.
    pub(crate) digest: Option<Digest>,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            gpus: 1,
            nodes: 1,
            namespace: "default".into(),
            command: Vec::new(),
            name: None,
            driver_affinity: true,
            digest: None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum K8sError {
    #[error("--gpus 0: a GPU job needs at least one GPU per node")]
    NoGpus,
    #[error("--nodes 0: a job needs at least one node")]
    NoNodes,
    #[error("--nodes {nodes} needs --command: the program every node runs under torchrun (e.g. --command python train.py)")]
    MultiNodeWithoutCommand { nodes: u32 },
    #[error(
        "--name {name:?} is not a valid Job name: {rule}\nhint: for example --name {suggestion}"
    )]
    BadName {
        name: String,
        rule: String,
        suggestion: String,
    },
    #[error("no image to run")]
    NoImage,
    #[error("--nodes {nodes}: more than a Job's completions can count")]
    TooManyNodes { nodes: u32 },
    #[error("the generated manifests break Kubernetes rules: {}", problems.join("; "))]
    Invalid { problems: Vec<String> },
}

/// One NodeSelectorRequirement.
fn requirement(key: &str, operator: &str, value: u64) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: Some(vec![value.to_string()]),
    }
}

/// A node selector term of ANDed `expressions` (and no field selectors).
fn term(expressions: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(expressions),
        match_fields: None,
    }
}

/// `key == value` for integer labels: `Gt value-1` (unless 0) and `Lt value+1`.
fn equals(key: &str, value: u64) -> Vec<NodeSelectorRequirement> {
    let mut requirements = Vec::new();
    if value > 0 {
        requirements.push(requirement(key, "Gt", value - 1));
    }
    requirements.push(requirement(key, "Lt", value + 1));
    requirements
}

/// Node selector terms (ORed) that match exactly the nodes whose driver, as GPU feature discovery
/// labels it, is at least `minimum` (`560.35.05`, or `570.26` with no revision):
/// major > M, or major = M and minor > m, or major = M and minor = m and rev ≥ r. When r is 0
/// the last two collapse into major = M and minor ≥ m.
pub(crate) fn driver_affinity_terms(minimum: &DriverVersion) -> Vec<NodeSelectorTerm> {
    let (major, minor, revision) = (minimum.part(0), minimum.part(1), minimum.part(2));
    let mut terms = vec![term(vec![requirement(DRIVER_MAJOR_LABEL, "Gt", major)])];
    if revision == 0 {
        let mut expressions = equals(DRIVER_MAJOR_LABEL, major);
        if minor > 0 {
            expressions.push(requirement(DRIVER_MINOR_LABEL, "Gt", minor - 1));
        }
        terms.push(term(expressions));
    } else {
        let mut newer_minor = equals(DRIVER_MAJOR_LABEL, major);
        newer_minor.push(requirement(DRIVER_MINOR_LABEL, "Gt", minor));
        let mut same_minor = equals(DRIVER_MAJOR_LABEL, major);
        same_minor.extend(equals(DRIVER_MINOR_LABEL, minor));
        same_minor.push(requirement(DRIVER_REV_LABEL, "Gt", revision - 1));
        terms.push(term(newer_minor));
        terms.push(term(same_minor));
    }
    terms
}

/// Whether a node with `labels` satisfies `terms`, as the scheduler decides it: terms are ORed,
/// expressions ANDed, `Gt`/`Lt` parse the label as a base-10 integer and fail on a missing or
/// non-numeric label. A term with field selectors (`matchFields`, which this module never writes)
/// is not decided here and matches nothing. Used by the tests; kept beside what it checks.
#[cfg(test)]
pub(crate) fn node_matches(terms: &[NodeSelectorTerm], labels: &BTreeMap<String, String>) -> bool {
    terms.iter().any(|term| {
        let expressions = term.match_expressions.as_deref().unwrap_or_default();
        !expressions.is_empty()
            && term.match_fields.as_deref().unwrap_or_default().is_empty()
            && expressions.iter().all(|expression| {
                let label = labels.get(&expression.key);
                let values = expression.values.as_deref().unwrap_or_default();
                match expression.operator.as_str() {
                    "In" => label.is_some_and(|value| values.contains(value)),
                    "NotIn" => label.is_none_or(|value| !values.contains(value)),
                    "Exists" => label.is_some(),
                    "DoesNotExist" => label.is_none(),
                    "Gt" | "Lt" => {
                        let (Some(value), Some(bound)) = (
                            label.and_then(|value| value.parse::<i64>().ok()),
                            values.first().and_then(|bound| bound.parse::<i64>().ok()),
                        ) else {
                            return false;
                        };
                        if expression.operator == "Gt" {
                            value > bound
                        } else {
                            value < bound
                        }
                    }
                    _ => false,
                }
            })
    })
}

/// The hex digits of the digest a shortened label ends with.
const LABEL_DIGEST_CHARS: usize = 6;

/// A DNS-1123 label from free text: lowercase letters, digits and `-`, starting with a letter,
/// at most `max` characters (at least 8). A text too long for `max` keeps its head and ends with
/// `-` and the first hex digits of the sha256 of its whole label: two texts that share their head
/// (the flavours of one image, `…-ubuntu24-04-jupyter` and `…-ubuntu24-04-tools`, or the
/// self-test Jobs of two OS images) keep different names.
pub(crate) fn dns_label(text: &str, max: usize) -> String {
    let mut label = String::new();
    for character in text.chars() {
        let character = character.to_ascii_lowercase();
        if character.is_ascii_alphanumeric() {
            label.push(character);
        } else if !label.ends_with('-') && !label.is_empty() {
            label.push('-');
        }
    }
    if !label.starts_with(|c: char| c.is_ascii_lowercase()) {
        label.insert_str(0, "job-");
    }
    let label = label.trim_end_matches('-');
    if label.len() <= max {
        return label.to_string();
    }
    let digest = Digest::of(label.as_bytes());
    let head = label[..max.saturating_sub(LABEL_DIGEST_CHARS + 1)].trim_end_matches('-');
    format!("{head}-{}", &digest.hex()[..LABEL_DIGEST_CHARS])
}

/// A Job name as given, or why it is not one: never rewritten, so the Job is named as asked.
pub(crate) fn checked_job_name(name: &str) -> Result<String, K8sError> {
    if validation::is_dns_label(name) && name.len() <= JOB_NAME_MAX {
        return Ok(name.to_string());
    }
    Err(K8sError::BadName {
        name: name.to_string(),
        rule: format!("a Job name is a DNS label of at most {JOB_NAME_MAX} characters (its pods add `-<index>` within 63): lowercase letters, digits and `-`, starting with a letter and ending with a letter or digit"),
        suggestion: dns_label(name, JOB_NAME_MAX),
    })
}

/// The default Job name: the repository's last component and the tag
/// (`pytorch-2-7-1-cuda12-6-cudnn9-runtime-ubuntu24-04`).
pub(crate) fn default_job_name(repository: &str, tag: &str) -> String {
    let repository = repository.rsplit('/').next().unwrap_or("image");
    dns_label(&format!("{repository}-{tag}"), JOB_NAME_MAX)
}

/// The CPU architecture of a platform (`linux/arm64` → `arm64`).
fn architecture(platform: &str) -> String {
    platform.rsplit('/').next().unwrap_or(platform).to_string()
}

/// The container command: the user's program, under torchrun when it spans several GPUs or nodes.
fn container_command(settings: &JobSettings, job_name: &str) -> Vec<String> {
    let program: Vec<String> = if settings.command.is_empty() {
        vec!["gpu-selftest".into()]
    } else {
        settings.command.clone()
    };
    if settings.command.is_empty() || (settings.gpus == 1 && settings.nodes == 1) {
        // gpu-selftest uses every visible GPU from one process; one GPU needs no launcher.
        return program;
    }
    let mut command = vec!["torchrun".to_string()];
    if settings.nodes == 1 {
        command.push("--standalone".into());
        command.push("--nnodes=1".into());
    } else {
        command.push(format!("--nnodes={}", settings.nodes));
        command.push("--node-rank=$(NODE_RANK)".into());
        command.push(format!("--master-addr={job_name}-0.{job_name}"));
        command.push(format!("--master-port={RENDEZVOUS_PORT}"));
    }
    command.push(format!("--nproc-per-node={}", settings.gpus));
    // torchrun runs a Python script itself; anything else needs --no-python.
    match program.first().map(String::as_str) {
        Some("python" | "python3") if program.len() > 1 => {
            command.extend(program.into_iter().skip(1));
        }
        _ => {
            command.push("--no-python".into());
            command.extend(program);
        }
    }
    command
}

/// The Job (and Service) that runs `images` as `settings` say: one image, or the per-platform
/// images of one OCI index (then the pod runs the index tag on any of their architectures).
pub(crate) fn manifests(
    images: &[&ImageSpec],
    settings: &JobSettings,
) -> Result<Manifests, K8sError> {
    let Some(image) = images.first().copied() else {
        return Err(K8sError::NoImage);
    };
    // The tag the pod pulls: the index for several platforms, else the image's own tag.
    let published_tag = match (&image.index, images.len()) {
        (Some(index), count) if count > 1 => index.clone(),
        _ => image.tag.clone(),
    };
    let mut architectures: Vec<String> = images
        .iter()
        .map(|image| architecture(image.platform.as_str()))
        .collect();
    architectures.sort();
    architectures.dedup();
    if settings.gpus == 0 {
        return Err(K8sError::NoGpus);
    }
    if settings.nodes == 0 {
        return Err(K8sError::NoNodes);
    }
    if settings.nodes > 1 && settings.command.is_empty() {
        return Err(K8sError::MultiNodeWithoutCommand {
            nodes: settings.nodes,
        });
    }
    let driver_min = &image.driver_min;
    let mut reference = format!("{}:{published_tag}", image.repository);
    if let Some(digest) = &settings.digest {
        reference = format!("{reference}@{digest}");
    }
    let name = match settings.name.as_deref() {
        Some(name) => checked_job_name(name)?,
        None => default_job_name(&image.repository, &published_tag),
    };
    let multi_node = settings.nodes > 1;
    let pod_labels: BTreeMap<String, String> = [
        ("app.kubernetes.io/name".to_string(), name.clone()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "imagegen".to_string(),
        ),
    ]
    .into();
    let annotations: BTreeMap<String, String> = [
        (
            "imagegen/image".to_string(),
            format!("{}:{published_tag}", image.repository),
        ),
        (
            "imagegen/driver-min".to_string(),
            image.driver_min.to_string(),
        ),
        (
            "imagegen/fingerprint".to_string(),
            images
                .iter()
                .map(|image| image.fingerprint.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ),
    ]
    .into();

    let mut env = Vec::new();
    let mut ports = Vec::new();
    if multi_node {
        env.push(EnvVar {
            name: "NODE_RANK".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                        .into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        ports.push(ContainerPort {
            name: Some("rendezvous".into()),
            container_port: RENDEZVOUS_PORT.into(),
            ..Default::default()
        });
    }
    let container = Container {
        name: "main".into(),
        image: Some(reference),
        command: Some(container_command(settings, &name)),
        env: (!env.is_empty()).then_some(env),
        ports: (!ports.is_empty()).then_some(ports),
        resources: Some(ResourceRequirements {
            limits: Some(
                [(
                    "nvidia.com/gpu".to_string(),
                    Quantity(settings.gpus.to_string()),
                )]
                .into(),
            ),
            ..Default::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "dshm".into(),
            mount_path: "/dev/shm".into(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    // Every ORed term also requires one of the image's architectures.
    let architecture_requirement = NodeSelectorRequirement {
        key: ARCH_LABEL.into(),
        operator: "In".into(),
        values: Some(architectures),
    };
    let mut terms = if settings.driver_affinity {
        driver_affinity_terms(driver_min)
    } else {
        vec![term(Vec::new())]
    };
    for term in &mut terms {
        term.match_expressions
            .get_or_insert_with(Vec::new)
            .push(architecture_requirement.clone());
    }
    let affinity = Some(Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: terms,
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let nodes = i32::try_from(settings.nodes).map_err(|_| K8sError::TooManyNodes {
        nodes: settings.nodes,
    })?;
    let job = Job {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(settings.namespace.clone()),
            labels: Some(pod_labels.clone()),
            annotations: Some(annotations.clone()),
            ..Default::default()
        },
        spec: Some(JobSpec {
            completion_mode: multi_node.then(|| "Indexed".to_string()),
            completions: Some(nodes),
            parallelism: Some(nodes),
            backoff_limit: Some(0),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels.clone()),
                    annotations: Some(annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    subdomain: multi_node.then(|| name.clone()),
                    affinity,
                    tolerations: Some(vec![Toleration {
                        key: Some("nvidia.com/gpu".into()),
                        operator: Some("Exists".into()),
                        effect: Some("NoSchedule".into()),
                        ..Default::default()
                    }]),
                    containers: vec![container],
                    volumes: Some(vec![Volume {
                        name: "dshm".into(),
                        empty_dir: Some(EmptyDirVolumeSource {
                            medium: Some("Memory".into()),
                            size_limit: Some(Quantity(format!(
                                "{}Gi",
                                u64::from(SHM_GIB_PER_GPU) * u64::from(settings.gpus)
                            ))),
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    };
    let service = multi_node.then(|| Service {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(settings.namespace.clone()),
            labels: Some(pod_labels.clone()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some([("app.kubernetes.io/name".to_string(), name.clone())].into()),
            ports: Some(vec![ServicePort {
                name: Some("rendezvous".into()),
                port: RENDEZVOUS_PORT.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    });
    let manifests = Manifests { service, job };
    let problems = validate(&manifests);
    if !problems.is_empty() {
        return Err(K8sError::Invalid { problems });
    }
    Ok(manifests)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> ImageSpec {
        crate::resolve::test_images("registry: r.example\nrepository: team/pytorch\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n")
        .remove(0)
    }

    fn node(major: &str, minor: &str, revision: Option<&str>) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        labels.insert(ARCH_LABEL.to_string(), "amd64".to_string());
        labels.insert(DRIVER_MAJOR_LABEL.to_string(), major.to_string());
        labels.insert(DRIVER_MINOR_LABEL.to_string(), minor.to_string());
        if let Some(revision) = revision {
            labels.insert(DRIVER_REV_LABEL.to_string(), revision.to_string());
        }
        labels
    }

    fn version(text: &str) -> DriverVersion {
        DriverVersion::parse(text).unwrap()
    }

    fn job_spec(manifests: &Manifests) -> &JobSpec {
        manifests.job.spec.as_ref().unwrap()
    }

    fn pod(manifests: &Manifests) -> &PodSpec {
        job_spec(manifests).template.spec.as_ref().unwrap()
    }

    fn pod_mut(manifests: &mut Manifests) -> &mut PodSpec {
        manifests
            .job
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
    }

    fn container(manifests: &Manifests) -> &Container {
        &pod(manifests).containers[0]
    }

    fn command(manifests: &Manifests) -> &[String] {
        container(manifests).command.as_deref().unwrap()
    }

    fn shm_volume(manifests: &Manifests) -> &EmptyDirVolumeSource {
        pod(manifests).volumes.as_ref().unwrap()[0]
            .empty_dir
            .as_ref()
            .unwrap()
    }

    #[test]
    fn driver_terms_admit_exactly_the_drivers_at_or_above_the_minimum() {
        let terms = driver_affinity_terms(&version("560.35.05"));
        // (major, minor, rev label, admitted)
        let table = [
            ("560", "35", Some("05"), true),
            ("560", "35", Some("5"), true),
            ("560", "35", Some("04"), false),
            ("560", "35", Some("10"), true),
            ("560", "36", Some("00"), true),
            ("560", "34", Some("99"), false),
            ("561", "0", Some("0"), true),
            ("570", "26", Some(""), true),
            ("570", "26", None, true),
            ("560", "35", Some(""), false),
            ("560", "35", None, false),
            ("555", "99", Some("99"), false),
            ("535", "104", Some("05"), false),
            ("1000", "1", Some("1"), true),
        ];
        for (major, minor, revision, admitted) in table {
            assert_eq!(
                node_matches(&terms, &node(major, minor, revision)),
                admitted,
                "driver {major}.{minor}.{revision:?}"
            );
        }
        assert!(
            !node_matches(&terms, &BTreeMap::new()),
            "a node without GPU feature discovery labels never matches"
        );
    }

    #[test]
    fn driver_terms_agree_with_version_ordering_over_a_grid() {
        for minimum in [
            "560.35.05",
            "525.60.13",
            "570.26",
            "580.0.0",
            "450.80.02",
            "580.65.06",
        ] {
            let terms = driver_affinity_terms(&version(minimum));
            for major in [
                449, 450, 451, 524, 525, 526, 559, 560, 561, 569, 570, 571, 579, 580, 581,
            ] {
                for minor in [
                    0, 1, 25, 26, 27, 34, 35, 36, 59, 60, 61, 64, 65, 66, 79, 80, 81,
                ] {
                    for revision in [0, 1, 2, 4, 5, 6, 12, 13, 14] {
                        let node_driver = version(&format!("{major}.{minor}.{revision}"));
                        let expected = node_driver >= version(minimum);
                        let labels = node(
                            &major.to_string(),
                            &minor.to_string(),
                            Some(&format!("{revision:02}")),
                        );
                        assert_eq!(
                            node_matches(&terms, &labels),
                            expected,
                            "node {major}.{minor}.{revision:02} vs minimum {minimum}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn driver_terms_shape() {
        let terms = driver_affinity_terms(&version("560.35.05"));
        assert_eq!(terms.len(), 3);
        assert_eq!(
            terms[0].match_expressions,
            Some(vec![requirement(DRIVER_MAJOR_LABEL, "Gt", 560)])
        );
        assert_eq!(
            terms[2].match_expressions.as_ref().unwrap().last().unwrap(),
            &requirement(DRIVER_REV_LABEL, "Gt", 4)
        );
        assert_eq!(driver_affinity_terms(&version("570.26")).len(), 2);
    }

    #[test]
    fn single_gpu_runs_the_command_as_is_with_shm_and_gpu_limit() {
        let manifests = manifests(&[&image()], &JobSettings::default()).unwrap();
        assert!(manifests.service.is_none());
        assert_eq!(command(&manifests), ["gpu-selftest"]);
        let limits = container(&manifests)
            .resources
            .as_ref()
            .unwrap()
            .limits
            .as_ref()
            .unwrap();
        assert_eq!(limits["nvidia.com/gpu"], Quantity("1".into()));
        let shm = shm_volume(&manifests);
        assert_eq!(shm.size_limit, Some(Quantity("8Gi".into())));
        assert_eq!(shm.medium.as_deref(), Some("Memory"));
        assert_eq!(
            container(&manifests).volume_mounts.as_ref().unwrap()[0].mount_path,
            "/dev/shm"
        );
        assert!(job_spec(&manifests).completion_mode.is_none());
        assert!(manifests
            .job
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("pytorch-2-7-1-cuda12-6"));
    }

    #[test]
    fn every_image_of_a_matrix_with_flavours_gets_a_job_name_of_its_own() {
        let images = crate::resolve::test_images("registry: r.example\nrepository: team/pytorch\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu22.04, ubuntu24.04]\nvariants: [runtime, devel]\nuser: {name: dev, uid: 1000, gid: 1000}\nflavours:\n  jupyter: {}\n  tools: {apt: [git]}\n  trainer: {apt: [make]}\n");
        assert_eq!(images.len(), 10);
        let name_of = |manifests: &Manifests| manifests.job.metadata.name.clone().unwrap();
        let mut jobs = BTreeMap::new();
        let mut test_jobs = BTreeMap::new();
        for image in &images {
            let name = name_of(&manifests(&[image], &JobSettings::default()).unwrap());
            assert!(
                validation::is_dns_label(&name) && name.len() <= JOB_NAME_MAX,
                "{name}"
            );
            if let Some(other) = jobs.insert(name.clone(), image.tag.clone()) {
                panic!("{} and {other} share the Job name {name}", image.tag);
            }
            let tests = test_jobs::test_jobs(
                image,
                &Digest::of(image.tag.as_bytes()),
                &[("H100".to_string(), Vec::new())],
                &JobSettings::default(),
            )
            .unwrap();
            let name = name_of(&tests[0]);
            assert!(
                name.ends_with("-test-h100") && name.len() <= JOB_NAME_MAX,
                "{name}"
            );
            if let Some(other) = test_jobs.insert(name.clone(), image.tag.clone()) {
                panic!("{} and {other} share the test Job name {name}", image.tag);
            }
        }
        // A name that fits is the tag's, as before; one that does not keeps its head and ends
        // with a digest of the whole.
        assert!(jobs.contains_key("pytorch-2-7-1-cuda12-6-cudnn9-runtime-ubuntu24-04"));
        let tools = default_job_name(
            "team/pytorch",
            "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04-tools",
        );
        assert_eq!(
            tools,
            "pytorch-2-7-1-cuda12-6-cudnn9-runtime-ubuntu2-fa14df"
        );
        assert_eq!(tools.len(), JOB_NAME_MAX, "{tools}");
        assert!(
            tools.starts_with("pytorch-2-7-1-cuda12-6-cudnn9-runtime-ubuntu2-"),
            "{tools}"
        );
        let digest = Digest::of(b"pytorch-2-7-1-cuda12-6-cudnn9-runtime-ubuntu24-04-tools");
        assert!(
            tools.ends_with(&format!("-{}", &digest.hex()[..6])),
            "{tools}"
        );
        assert_eq!(dns_label("9 lives--", 52), "job-9-lives");
    }

    #[test]
    fn several_gpus_use_torchrun_standalone() {
        let settings = JobSettings {
            gpus: 4,
            command: vec![
                "python".into(),
                "train.py".into(),
                "--lr".into(),
                "3e-4".into(),
            ],
            ..Default::default()
        };
        let manifests = manifests(&[&image()], &settings).unwrap();
        assert_eq!(
            command(&manifests),
            [
                "torchrun",
                "--standalone",
                "--nnodes=1",
                "--nproc-per-node=4",
                "train.py",
                "--lr",
                "3e-4"
            ]
        );
        assert_eq!(
            shm_volume(&manifests).size_limit,
            Some(Quantity("32Gi".into()))
        );
        let settings = JobSettings {
            gpus: 2,
            command: vec!["./bench".into()],
            ..Default::default()
        };
        let manifests = manifests_for(settings);
        assert_eq!(
            &command(&manifests)[3..],
            ["--nproc-per-node=2", "--no-python", "./bench"]
        );
    }

    fn manifests_for(settings: JobSettings) -> Manifests {
        manifests(&[&image()], &settings).unwrap()
    }

    #[test]
    fn several_nodes_make_an_indexed_job_with_a_headless_service() {
        let manifests = manifests_for(JobSettings {
            gpus: 8,
            nodes: 3,
            namespace: "training".into(),
            command: vec!["python".into(), "train.py".into()],
            name: Some("llama-finetune".into()),
            driver_affinity: true,
            digest: None,
        });
        let job = &manifests.job;
        assert_eq!(job.metadata.name.as_deref(), Some("llama-finetune"));
        let spec = job_spec(&manifests);
        assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
        assert_eq!((spec.completions, spec.parallelism), (Some(3), Some(3)));
        assert_eq!(pod(&manifests).subdomain.as_deref(), Some("llama-finetune"));
        assert_eq!(
            command(&manifests).join(" "),
            "torchrun --nnodes=3 --node-rank=$(NODE_RANK) --master-addr=llama-finetune-0.llama-finetune --master-port=29500 --nproc-per-node=8 train.py"
        );
        assert_eq!(
            container(&manifests).env.as_ref().unwrap()[0].name,
            "NODE_RANK"
        );
        let service = manifests.service.as_ref().unwrap();
        assert_eq!(
            service.spec.as_ref().unwrap().cluster_ip.as_deref(),
            Some("None")
        );
        assert!(validate(&manifests).is_empty());
    }

    #[test]
    fn a_recorded_digest_pins_the_image() {
        let digest = Digest::parse(&format!("sha256:{}", "ab".repeat(32))).unwrap();
        let manifests = manifests_for(JobSettings {
            digest: Some(digest.clone()),
            ..Default::default()
        });
        let image = container(&manifests).image.as_deref().unwrap();
        assert!(
            image.ends_with(&format!("-ubuntu24.04@{digest}")),
            "{image}"
        );
    }

    fn node_affinity_terms(manifests: &Manifests) -> &[NodeSelectorTerm] {
        &pod(manifests)
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()
            .node_selector_terms
    }

    #[test]
    fn the_pod_stays_on_the_architectures_the_image_has() {
        let amd64_only = manifests_for(JobSettings::default());
        let terms = node_affinity_terms(&amd64_only);
        let mut arm64_node = node("580", "65", Some("06"));
        arm64_node.insert(ARCH_LABEL.to_string(), "arm64".to_string());
        assert!(node_matches(terms, &node("580", "65", Some("06"))));
        assert!(
            !node_matches(terms, &arm64_node),
            "an amd64 image on an arm64 node"
        );
        let without_driver = manifests_for(JobSettings {
            driver_affinity: false,
            ..Default::default()
        });
        let terms = node_affinity_terms(&without_driver);
        assert_eq!(terms.len(), 1);
        assert!(node_matches(terms, &node("1", "0", None)));
        assert!(!node_matches(terms, &arm64_node));

        let images = crate::resolve::test_images("registry: r.example\nrepository: team/pytorch\ntorch: [\"2.13\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nplatforms: [linux/amd64, linux/arm64]\n");
        let all: Vec<&ImageSpec> = images.iter().collect();
        assert_eq!(all.len(), 2);
        let index = manifests(&all, &JobSettings::default()).unwrap();
        let index_tag = images[0].index.clone().unwrap();
        assert_eq!(
            container(&index).image,
            Some(format!("r.example/team/pytorch:{index_tag}"))
        );
        assert!(node_matches(node_affinity_terms(&index), &arm64_node));
        let arm64_image = images.iter().find(|i| i.platform == "linux/arm64").unwrap();
        let one = manifests(&[arm64_image], &JobSettings::default()).unwrap();
        assert!(container(&one)
            .image
            .as_deref()
            .unwrap()
            .ends_with("-arm64"));
        assert!(node_matches(node_affinity_terms(&one), &arm64_node));
        assert!(!node_matches(
            node_affinity_terms(&one),
            &node("580", "65", Some("06"))
        ));
    }

    #[test]
    fn bad_settings_are_named() {
        let image = image();
        assert_eq!(
            manifests(&[], &JobSettings::default()),
            Err(K8sError::NoImage)
        );
        let image = [&image];
        assert_eq!(
            manifests(
                &image[..],
                &JobSettings {
                    gpus: 0,
                    ..Default::default()
                }
            ),
            Err(K8sError::NoGpus)
        );
        assert_eq!(
            manifests(
                &image[..],
                &JobSettings {
                    nodes: 2,
                    ..Default::default()
                }
            ),
            Err(K8sError::MultiNodeWithoutCommand { nodes: 2 })
        );
        // A Job counts completions in an int32.
        assert_eq!(
            manifests(
                &image[..],
                &JobSettings {
                    nodes: u32::MAX,
                    command: vec!["python".into(), "t.py".into()],
                    ..Default::default()
                }
            ),
            Err(K8sError::TooManyNodes { nodes: u32::MAX })
        );
        let error = manifests(
            &image[..],
            &JobSettings {
                namespace: "Not_A_Namespace".into(),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(error.to_string().contains("namespace"), "{error}");
        let error = manifests(
            &image[..],
            &JobSettings {
                name: Some("Bad_Name".into()),
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with(
                "--name \"Bad_Name\" is not a valid Job name: a Job name is a DNS label"
            ),
            "{error}"
        );
        assert!(
            error.contains("\nhint: for example --name bad-name"),
            "{error}"
        );
        let named = manifests(
            &image[..],
            &JobSettings {
                name: Some("finetune-7".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            named.job.metadata.name.as_deref(),
            Some("finetune-7"),
            "a good name is kept as given"
        );
    }

    #[test]
    fn validate_catches_what_the_api_server_would_refuse() {
        let mut broken = manifests_for(JobSettings {
            nodes: 2,
            command: vec!["python".into(), "t.py".into()],
            ..Default::default()
        });
        assert!(validate(&broken).is_empty());
        broken.job.spec.as_mut().unwrap().parallelism = Some(1);
        let pod = pod_mut(&mut broken);
        pod.restart_policy = Some("Always".into());
        pod.containers[0].volume_mounts.as_mut().unwrap()[0].name = "other".into();
        pod.subdomain = Some("elsewhere".into());
        pod.volumes.as_mut().unwrap()[0]
            .empty_dir
            .as_mut()
            .unwrap()
            .size_limit = Some(Quantity("8 GiB".into()));
        let terms = &mut pod
            .affinity
            .as_mut()
            .unwrap()
            .node_affinity
            .as_mut()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_mut()
            .unwrap()
            .node_selector_terms;
        terms[0].match_expressions.as_mut().unwrap()[0].values = Some(vec!["5.6".into()]);
        let problems = validate(&broken);
        assert_eq!(problems.len(), 6, "{problems:#?}");
        for expected in [
            "restartPolicy",
            "completions = parallelism",
            "names no volume",
            "subdomain",
            "sizeLimit",
            "integer",
        ] {
            assert!(
                problems.iter().any(|problem| problem.contains(expected)),
                "{expected}: {problems:#?}"
            );
        }
    }

    #[test]
    fn yaml_round_trips_through_the_kubernetes_types() {
        let manifests = manifests_for(JobSettings {
            gpus: 2,
            nodes: 2,
            command: vec!["python".into(), "train.py".into()],
            ..Default::default()
        });
        let yaml = manifests.to_yaml();
        assert_eq!(Manifests::from_yaml(&yaml), Ok(manifests.clone()));
        let documents: Vec<&str> = yaml.split("---\n").filter(|d| !d.is_empty()).collect();
        assert_eq!(documents.len(), 2);
        assert!(documents[0].starts_with("apiVersion: v1\nkind: Service\n"));
        assert!(documents[1].starts_with("apiVersion: batch/v1\nkind: Job\n"));
        // k8s-openapi alone would drop a field Kubernetes does not have; the read-back refuses it.
        let typo = yaml.replace("sizeLimit", "sizelimit");
        assert_eq!(
            Manifests::from_yaml(&typo),
            Err(ReadBackError::NotRoundTripped {
                index: 1,
                kind: "Job",
                path: "spec.template.spec.volumes[0].emptyDir.sizelimit".into(),
            })
        );
        // A value of the wrong type is refused by the types themselves.
        let wrong_type = yaml.replace(
            "publishNotReadyAddresses: true",
            "publishNotReadyAddresses: [true]",
        );
        assert!(matches!(
            Manifests::from_yaml(&wrong_type),
            Err(ReadBackError::Malformed { index: 0, .. })
        ));
        // The Service and the Job in the wrong order, or a Job alone where two were written.
        let swapped = format!("---\n{}---\n{}", documents[1], documents[0]);
        assert!(matches!(
            Manifests::from_yaml(&swapped),
            Err(ReadBackError::UnexpectedKind { index: 0, .. })
        ));
        let wrong_version = yaml.replace("apiVersion: batch/v1", "apiVersion: batch/v1beta1");
        assert!(matches!(
            Manifests::from_yaml(&wrong_version),
            Err(ReadBackError::Malformed { index: 1, .. })
        ));
    }
}
