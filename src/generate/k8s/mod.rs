//! `imagegen k8s`: a Kubernetes `batch/v1` Job (and, across nodes, the headless Service its pods
//! find each other through) that runs one of the matrix's images on GPUs. Pure: an image spec and
//! settings in, typed documents out, serialized as deterministic YAML. Nothing here talks to a
//! cluster; `validate` checks the rules the API server would enforce on what this module emits.
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

pub mod objects;
mod validation;

use std::collections::BTreeMap;

pub use objects::*;
pub use validation::validate;

use crate::model::digest::Digest;
use crate::model::version::DriverVersion;
use crate::resolve::image::ImageSpec;

/// `/dev/shm` size per GPU.
pub const SHM_GIB_PER_GPU: u32 = 8;
/// The rendezvous (TCP store) port of multi-node jobs, torchrun's default.
pub const RENDEZVOUS_PORT: u16 = 29500;
/// Labels NVIDIA GPU feature discovery sets on GPU nodes.
pub const DRIVER_MAJOR_LABEL: &str = "nvidia.com/cuda.driver.major";
pub const DRIVER_MINOR_LABEL: &str = "nvidia.com/cuda.driver.minor";
pub const DRIVER_REV_LABEL: &str = "nvidia.com/cuda.driver.rev";
/// The well-known label of a node's CPU architecture (`amd64`, `arm64`).
pub const ARCH_LABEL: &str = "kubernetes.io/arch";
/// The longest Job name: Indexed pods are named `<job>-<index>` and must stay a DNS label (63).
const JOB_NAME_MAX: usize = 52;

// ---------------------------------------------------------------------------------------------

/// What `imagegen k8s` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSettings {
    /// GPUs per node (pod).
    pub gpus: u32,
    /// Nodes (pods); more than one makes an Indexed Job with a headless Service.
    pub nodes: u32,
    pub namespace: String,
    /// The program to run; empty runs the image's gpu-selftest (single node only).
    pub command: Vec<String>,
    /// The Job name; `None` derives it from the repository and tag.
    pub name: Option<String>,
    /// Keep the driver node affinity (off only for clusters without GPU feature discovery).
    pub driver_affinity: bool,
    /// The registry digest the manifest recorded for the image: the pod then pins it
    /// (`repository:tag@sha256:...`), so every node runs the same bytes as the self-test did.
    pub digest: Option<Digest>,
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
pub enum K8sError {
    #[error("--gpus 0: a GPU job needs at least one GPU per node")]
    NoGpus,
    #[error("--nodes 0: a job needs at least one node")]
    NoNodes,
    #[error("--nodes {nodes} needs --command: the program every node runs under torchrun (e.g. --command python train.py)")]
    MultiNodeWithoutCommand { nodes: u32 },
    #[error("no image to run")]
    NoImage,
    #[error("the generated manifests break Kubernetes rules: {}", problems.join("; "))]
    Invalid { problems: Vec<String> },
}

/// One NodeSelectorRequirement.
fn requirement(key: &str, operator: &str, value: u64) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: vec![value.to_string()],
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
pub fn driver_affinity_terms(minimum: &DriverVersion) -> Vec<NodeSelectorTerm> {
    let (major, minor, revision) = (minimum.part(0), minimum.part(1), minimum.part(2));
    let mut terms = vec![NodeSelectorTerm {
        match_expressions: vec![requirement(DRIVER_MAJOR_LABEL, "Gt", major)],
    }];
    if revision == 0 {
        let mut expressions = equals(DRIVER_MAJOR_LABEL, major);
        if minor > 0 {
            expressions.push(requirement(DRIVER_MINOR_LABEL, "Gt", minor - 1));
        }
        terms.push(NodeSelectorTerm {
            match_expressions: expressions,
        });
    } else {
        let mut newer_minor = equals(DRIVER_MAJOR_LABEL, major);
        newer_minor.push(requirement(DRIVER_MINOR_LABEL, "Gt", minor));
        let mut same_minor = equals(DRIVER_MAJOR_LABEL, major);
        same_minor.extend(equals(DRIVER_MINOR_LABEL, minor));
        same_minor.push(requirement(DRIVER_REV_LABEL, "Gt", revision - 1));
        terms.push(NodeSelectorTerm {
            match_expressions: newer_minor,
        });
        terms.push(NodeSelectorTerm {
            match_expressions: same_minor,
        });
    }
    terms
}

/// Whether a node with `labels` satisfies `terms`, as the scheduler decides it: terms are ORed,
/// expressions ANDed, `Gt`/`Lt` parse the label as a base-10 integer and fail on a missing or
/// non-numeric label. Used by the tests and by `validate`; kept here beside what it checks.
pub fn node_matches(terms: &[NodeSelectorTerm], labels: &BTreeMap<String, String>) -> bool {
    terms.iter().any(|term| {
        !term.match_expressions.is_empty()
            && term.match_expressions.iter().all(|expression| {
                let label = labels.get(&expression.key);
                match expression.operator.as_str() {
                    "In" => label.is_some_and(|value| expression.values.contains(value)),
                    "NotIn" => label.is_none_or(|value| !expression.values.contains(value)),
                    "Exists" => label.is_some(),
                    "DoesNotExist" => label.is_none(),
                    "Gt" | "Lt" => {
                        let (Some(value), Some(bound)) = (
                            label.and_then(|value| value.parse::<i64>().ok()),
                            expression
                                .values
                                .first()
                                .and_then(|bound| bound.parse::<i64>().ok()),
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

/// A DNS-1123 label from free text: lowercase letters, digits and `-`, starting with a letter,
/// at most `max` characters.
pub fn dns_label(text: &str, max: usize) -> String {
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
    label.truncate(max);
    label.trim_end_matches('-').to_string()
}

/// The default Job name: the repository's last component and the tag
/// (`pytorch-2-7-1-cuda12-6-cudnn9-runtime-ubuntu24-04`).
pub fn default_job_name(repository: &str, tag: &str) -> String {
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
pub fn manifests(images: &[&ImageSpec], settings: &JobSettings) -> Result<Manifests, K8sError> {
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
    let name = settings
        .name
        .as_deref()
        .map(|name| dns_label(name, JOB_NAME_MAX))
        .unwrap_or_else(|| default_job_name(&image.repository, &published_tag));
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
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: ObjectFieldSelector {
                    field_path: "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                        .into(),
                },
            }),
        });
        ports.push(ContainerPort {
            name: "rendezvous".into(),
            container_port: RENDEZVOUS_PORT,
        });
    }
    let container = Container {
        name: "main".into(),
        image: reference,
        command: container_command(settings, &name),
        env,
        ports,
        resources: ResourceRequirements {
            limits: [("nvidia.com/gpu".to_string(), settings.gpus.to_string())].into(),
        },
        volume_mounts: vec![VolumeMount {
            name: "dshm".into(),
            mount_path: "/dev/shm".into(),
        }],
    };
    // Every ORed term also requires one of the image's architectures.
    let architecture_requirement = NodeSelectorRequirement {
        key: ARCH_LABEL.into(),
        operator: "In".into(),
        values: architectures,
    };
    let mut terms = if settings.driver_affinity {
        driver_affinity_terms(driver_min)
    } else {
        vec![NodeSelectorTerm {
            match_expressions: Vec::new(),
        }]
    };
    for term in &mut terms {
        term.match_expressions
            .push(architecture_requirement.clone());
    }
    let affinity = Some(Affinity {
        node_affinity: NodeAffinity {
            required_during_scheduling_ignored_during_execution: NodeSelector {
                node_selector_terms: terms,
            },
        },
    });
    let job = Job {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(settings.namespace.clone()),
            labels: pod_labels.clone(),
            annotations: annotations.clone(),
        },
        spec: JobSpec {
            completion_mode: multi_node.then(|| "Indexed".to_string()),
            completions: settings.nodes,
            parallelism: settings.nodes,
            backoff_limit: 0,
            template: PodTemplateSpec {
                metadata: ObjectMeta {
                    labels: pod_labels.clone(),
                    annotations,
                    ..Default::default()
                },
                spec: PodSpec {
                    restart_policy: "Never".into(),
                    subdomain: multi_node.then(|| name.clone()),
                    affinity,
                    tolerations: vec![Toleration {
                        key: "nvidia.com/gpu".into(),
                        operator: "Exists".into(),
                        effect: "NoSchedule".into(),
                    }],
                    containers: vec![container],
                    volumes: vec![Volume {
                        name: "dshm".into(),
                        empty_dir: EmptyDirVolumeSource {
                            medium: "Memory".into(),
                            size_limit: format!("{}Gi", SHM_GIB_PER_GPU * settings.gpus),
                        },
                    }],
                },
            },
        },
    };
    let service = multi_node.then(|| Service {
        api_version: "v1".into(),
        kind: "Service".into(),
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(settings.namespace.clone()),
            labels: pod_labels.clone(),
            annotations: BTreeMap::new(),
        },
        spec: ServiceSpec {
            cluster_ip: "None".into(),
            publish_not_ready_addresses: true,
            selector: [("app.kubernetes.io/name".to_string(), name.clone())].into(),
            ports: vec![ServicePort {
                name: "rendezvous".into(),
                port: RENDEZVOUS_PORT,
            }],
        },
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
    use crate::model::knowledge::Knowledge;
    use crate::model::matrix::Matrix;
    use crate::resolve::{resolve, ResolveOptions};

    fn image() -> ImageSpec {
        let matrix = Matrix::parse(
            "registry: r.example\nrepository: team/pytorch\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
            "m.yaml",
        )
        .unwrap();
        resolve(
            &matrix,
            &Knowledge::test_fixture(),
            &ResolveOptions::default(),
        )
        .images
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
            vec![requirement(DRIVER_MAJOR_LABEL, "Gt", 560)]
        );
        assert_eq!(
            terms[2].match_expressions.last().unwrap(),
            &requirement(DRIVER_REV_LABEL, "Gt", 4)
        );
        assert_eq!(driver_affinity_terms(&version("570.26")).len(), 2);
    }

    #[test]
    fn single_gpu_runs_the_command_as_is_with_shm_and_gpu_limit() {
        let manifests = manifests(&[&image()], &JobSettings::default()).unwrap();
        assert!(manifests.service.is_none());
        let pod = &manifests.job.spec.template.spec;
        assert_eq!(pod.containers[0].command, vec!["gpu-selftest"]);
        assert_eq!(pod.containers[0].resources.limits["nvidia.com/gpu"], "1");
        assert_eq!(pod.volumes[0].empty_dir.size_limit, "8Gi");
        assert_eq!(pod.volumes[0].empty_dir.medium, "Memory");
        assert_eq!(pod.containers[0].volume_mounts[0].mount_path, "/dev/shm");
        assert!(manifests.job.spec.completion_mode.is_none());
        assert!(manifests
            .job
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("pytorch-2-7-1-cuda12-6"));
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
        let container = &manifests.job.spec.template.spec.containers[0];
        assert_eq!(
            container.command,
            vec![
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
            manifests.job.spec.template.spec.volumes[0]
                .empty_dir
                .size_limit,
            "32Gi"
        );
        let settings = JobSettings {
            gpus: 2,
            command: vec!["./bench".into()],
            ..Default::default()
        };
        let command = &manifests_for(settings).job.spec.template.spec.containers[0].command;
        assert_eq!(
            &command[3..],
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
            name: Some("Llama Finetune".into()),
            driver_affinity: true,
            digest: None,
        });
        let job = &manifests.job;
        assert_eq!(job.metadata.name.as_deref(), Some("llama-finetune"));
        assert_eq!(job.spec.completion_mode.as_deref(), Some("Indexed"));
        assert_eq!((job.spec.completions, job.spec.parallelism), (3, 3));
        let pod = &job.spec.template.spec;
        assert_eq!(pod.subdomain.as_deref(), Some("llama-finetune"));
        let command = pod.containers[0].command.join(" ");
        assert_eq!(
            command,
            "torchrun --nnodes=3 --node-rank=$(NODE_RANK) --master-addr=llama-finetune-0.llama-finetune --master-port=29500 --nproc-per-node=8 train.py"
        );
        assert_eq!(pod.containers[0].env[0].name, "NODE_RANK");
        let service = manifests.service.as_ref().unwrap();
        assert_eq!(service.spec.cluster_ip, "None");
        assert!(validate(&manifests).is_empty());
    }

    #[test]
    fn a_recorded_digest_pins_the_image() {
        let digest = Digest::parse(&format!("sha256:{}", "ab".repeat(32))).unwrap();
        let manifests = manifests_for(JobSettings {
            digest: Some(digest.clone()),
            ..Default::default()
        });
        let image = &manifests.job.spec.template.spec.containers[0].image;
        assert!(
            image.ends_with(&format!("-ubuntu24.04@{digest}")),
            "{image}"
        );
    }

    fn node_affinity_terms(manifests: &Manifests) -> &[NodeSelectorTerm] {
        &manifests
            .job
            .spec
            .template
            .spec
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .required_during_scheduling_ignored_during_execution
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

        let matrix = Matrix::parse(
            "registry: r.example\nrepository: team/pytorch\ntorch: [\"2.13\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nplatforms: [linux/amd64, linux/arm64]\n",
            "m.yaml",
        )
        .unwrap();
        let images = resolve(
            &matrix,
            &Knowledge::test_fixture(),
            &ResolveOptions::default(),
        )
        .images;
        let all: Vec<&ImageSpec> = images.iter().collect();
        assert_eq!(all.len(), 2);
        let index = manifests(&all, &JobSettings::default()).unwrap();
        let container = &index.job.spec.template.spec.containers[0];
        let index_tag = images[0].index.clone().unwrap();
        assert_eq!(
            container.image,
            format!("r.example/team/pytorch:{index_tag}")
        );
        assert!(node_matches(node_affinity_terms(&index), &arm64_node));
        let arm64_image = images.iter().find(|i| i.platform == "linux/arm64").unwrap();
        let one = manifests(&[arm64_image], &JobSettings::default()).unwrap();
        assert!(one.job.spec.template.spec.containers[0]
            .image
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
        let error = manifests(
            &image[..],
            &JobSettings {
                namespace: "Not_A_Namespace".into(),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(error.to_string().contains("namespace"), "{error}");
    }

    #[test]
    fn validate_catches_what_the_api_server_would_refuse() {
        let mut broken = manifests_for(JobSettings {
            nodes: 2,
            command: vec!["python".into(), "t.py".into()],
            ..Default::default()
        });
        broken.job.spec.template.spec.restart_policy = "Always".into();
        broken.job.spec.parallelism = 1;
        broken.job.spec.template.spec.containers[0].volume_mounts[0].name = "other".into();
        broken.job.spec.template.spec.subdomain = Some("elsewhere".into());
        let problems = validate(&broken);
        assert_eq!(problems.len(), 4, "{problems:#?}");
    }

    #[test]
    fn yaml_round_trips_through_the_typed_model() {
        let manifests = manifests_for(JobSettings {
            gpus: 2,
            nodes: 2,
            command: vec!["python".into(), "train.py".into()],
            ..Default::default()
        });
        let yaml = manifests.to_yaml();
        let documents: Vec<&str> = yaml.split("---\n").filter(|d| !d.is_empty()).collect();
        assert_eq!(documents.len(), 2);
        let service: Service = serde_yaml::from_str(documents[0]).unwrap();
        let job: Job = serde_yaml::from_str(documents[1]).unwrap();
        assert_eq!(Some(service), manifests.service);
        assert_eq!(job, manifests.job);
        // The model refuses a field Kubernetes does not have (a typo is not silently dropped).
        let typo = documents[1].replace("sizeLimit", "sizelimit");
        assert!(serde_yaml::from_str::<Job>(&typo).is_err());
    }
}
