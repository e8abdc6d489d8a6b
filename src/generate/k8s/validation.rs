//! The rules the API server would enforce on what `imagegen k8s` emits (names are DNS labels,
//! quantities parse, selectors match the template, ...), checked on the `k8s-openapi` objects
//! before anything is printed. The types already fix the field names and shapes, and their
//! `apiVersion`/`kind`; what is left are the rules on values that the types leave as strings.

use crate::generate::k8s::objects::{Job, Manifests, NodeSelectorRequirement, PodSpec, Service};

pub(super) fn is_dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// A Kubernetes quantity as this module writes them: digits with an optional binary suffix.
fn is_quantity(text: &str) -> bool {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &text[digits.len()..];
    !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit())
        && ["", "Ki", "Mi", "Gi", "Ti"].contains(&suffix)
}

/// The rules the API server enforces on what this module emits, as messages (empty: valid).
pub fn validate(manifests: &Manifests) -> Vec<String> {
    let mut problems = Vec::new();
    let job = &manifests.job;
    let pod = validate_job(job, &mut problems);
    if let Some(pod) = pod {
        validate_pod(pod, &mut problems);
    }
    let subdomain = pod.and_then(|pod| pod.subdomain.as_ref());
    match (&manifests.service, subdomain) {
        (Some(service), Some(subdomain)) => {
            validate_service(service, subdomain, job, &mut problems)
        }
        (None, None) => {}
        _ => problems.push("a pod subdomain needs its headless Service, and back".into()),
    }
    problems
}

/// The Job's own rules; returns its pod spec, if it has one.
fn validate_job<'a>(job: &'a Job, problems: &mut Vec<String>) -> Option<&'a PodSpec> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let Some(spec) = &job.spec else {
        problems.push("the Job has no spec".into());
        return None;
    };
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    // Indexed pods are `<job>-<index>`: that hostname must stay a DNS label.
    let last_index = spec.completions.unwrap_or(1).saturating_sub(1);
    let longest_pod_hostname = format!("{name}-{last_index}");
    if !is_dns_label(&name) || (indexed && !is_dns_label(&longest_pod_hostname)) {
        problems.push(format!(
            "job name {name:?} is not a DNS label (lowercase letters, digits, '-', at most 63 with the pod index)"
        ));
    }
    if let Some(namespace) = &job.metadata.namespace {
        if !is_dns_label(namespace) {
            problems.push(format!("namespace {namespace:?} is not a DNS label"));
        }
    }
    if let Some(mode) = &spec.completion_mode {
        if mode != "Indexed" && mode != "NonIndexed" {
            problems.push(format!(
                "completionMode {mode:?} is neither Indexed nor NonIndexed"
            ));
        }
    }
    for (field, value) in [
        ("completions", spec.completions),
        ("parallelism", spec.parallelism),
        ("backoffLimit", spec.backoff_limit),
    ] {
        if value.is_some_and(|value| value < 0) {
            problems.push(format!("{field} {value:?} is negative"));
        }
    }
    if indexed && spec.completions.is_none() {
        problems.push("an Indexed Job needs completions".into());
    }
    if indexed && spec.completions != spec.parallelism {
        problems.push(
            "an Indexed training job needs completions = parallelism (all ranks at once)".into(),
        );
    }
    let template_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|metadata| metadata.labels.as_ref());
    for (key, value) in template_labels.into_iter().flatten() {
        if value.len() > 63 {
            problems.push(format!("label {key} value {value:?} is longer than 63"));
        }
    }
    let Some(pod) = &spec.template.spec else {
        problems.push("the Job's pod template has no spec".into());
        return None;
    };
    match pod.restart_policy.as_deref() {
        Some("Never" | "OnFailure") => {}
        other => problems.push(format!(
            "a Job's restartPolicy must be Never or OnFailure, not {other:?}"
        )),
    }
    Some(pod)
}

/// Containers, volumes, tolerations and node affinity.
fn validate_pod(pod: &PodSpec, problems: &mut Vec<String>) {
    let volumes = pod.volumes.as_deref().unwrap_or_default();
    let volume_names: Vec<&str> = volumes.iter().map(|volume| volume.name.as_str()).collect();
    if pod.containers.is_empty() {
        problems.push("the pod has no container".into());
    }
    for container in &pod.containers {
        for mount in container.volume_mounts.iter().flatten() {
            if !volume_names.contains(&mount.name.as_str()) {
                problems.push(format!("volumeMount {} names no volume", mount.name));
            }
        }
        let limits = container
            .resources
            .as_ref()
            .and_then(|resources| resources.limits.as_ref());
        for (resource, quantity) in limits.into_iter().flatten() {
            if !is_quantity(&quantity.0) {
                problems.push(format!(
                    "limit {resource}: {:?} is not a quantity",
                    quantity.0
                ));
            }
        }
        for port in container.ports.iter().flatten() {
            if port.name.as_ref().is_some_and(|name| name.len() > 15) {
                problems.push(format!("port name {:?} is longer than 15", port.name));
            }
            if !(1..=65535).contains(&port.container_port) {
                problems.push(format!(
                    "containerPort {} is not in 1..=65535",
                    port.container_port
                ));
            }
        }
        if container.command.as_deref().unwrap_or_default().is_empty() {
            problems.push(format!("container {} has no command", container.name));
        }
        if container.image.as_deref().unwrap_or_default().is_empty() {
            problems.push(format!("container {} has no image", container.name));
        }
    }
    for volume in volumes {
        let Some(empty_dir) = &volume.empty_dir else {
            continue;
        };
        let medium = empty_dir.medium.as_deref().unwrap_or_default();
        if medium != "Memory" && !medium.is_empty() {
            problems.push(format!("emptyDir medium {medium:?}"));
        }
        if let Some(size_limit) = &empty_dir.size_limit {
            if !is_quantity(&size_limit.0) {
                problems.push(format!(
                    "emptyDir sizeLimit {:?} is not a quantity",
                    size_limit.0
                ));
            }
        }
    }
    for toleration in pod.tolerations.iter().flatten() {
        if toleration.operator.as_deref() == Some("Exists") && toleration.value.is_some() {
            problems.push("a toleration with operator Exists takes no value".into());
        }
        if let Some(effect) = &toleration.effect {
            if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect.as_str()) {
                problems.push(format!("toleration effect {effect:?}"));
            }
        }
    }
    let required = pod
        .affinity
        .as_ref()
        .and_then(|affinity| affinity.node_affinity.as_ref())
        .and_then(|node| {
            node.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    if let Some(selector) = required {
        if selector.node_selector_terms.is_empty() {
            problems.push("node affinity without terms".into());
        }
        for expression in selector
            .node_selector_terms
            .iter()
            .flat_map(|term| term.match_expressions.iter().flatten())
        {
            validate_requirement(expression, problems);
        }
    }
}

/// A NodeSelectorRequirement: `Gt`/`Lt` take one integer, `In`/`NotIn` at least one value,
/// `Exists`/`DoesNotExist` none.
fn validate_requirement(expression: &NodeSelectorRequirement, problems: &mut Vec<String>) {
    let values = expression.values.as_deref().unwrap_or_default();
    let (key, operator) = (&expression.key, expression.operator.as_str());
    match operator {
        "Gt" | "Lt" => {
            if values.len() != 1 || values[0].parse::<i64>().is_err() {
                problems.push(format!(
                    "{key} {operator} needs exactly one integer value, has {values:?}"
                ));
            }
        }
        "In" | "NotIn" => {
            if values.is_empty() {
                problems.push(format!("{key} {operator} needs at least one value"));
            }
        }
        "Exists" | "DoesNotExist" => {
            if !values.is_empty() {
                problems.push(format!("{key} {operator} takes no values, has {values:?}"));
            }
        }
        other => problems.push(format!("unknown operator {other}")),
    }
}

/// The headless rendezvous Service against the Job whose pods name it as `subdomain`.
fn validate_service(service: &Service, subdomain: &str, job: &Job, problems: &mut Vec<String>) {
    let service_name = service.metadata.name.clone().unwrap_or_default();
    if service_name != subdomain {
        problems.push(format!(
            "pod subdomain {subdomain:?} is not the Service {service_name:?}"
        ));
    }
    let Some(spec) = &service.spec else {
        problems.push("the Service has no spec".into());
        return;
    };
    if spec.cluster_ip.as_deref() != Some("None") {
        problems.push("the rendezvous Service must be headless (clusterIP: None)".into());
    }
    let pod_labels = job
        .spec
        .as_ref()
        .and_then(|spec| spec.template.metadata.as_ref())
        .and_then(|metadata| metadata.labels.as_ref());
    let selector = spec
        .selector
        .as_ref()
        .filter(|selector| !selector.is_empty());
    let selects_the_pods = selector.is_some_and(|selector| {
        selector
            .iter()
            .all(|(key, value)| pod_labels.and_then(|labels| labels.get(key)) == Some(value))
    });
    if !selects_the_pods {
        problems.push("the Service selector does not select the Job's pods".into());
    }
    for port in spec.ports.iter().flatten() {
        if !(1..=65535).contains(&port.port) {
            problems.push(format!("Service port {} is not in 1..=65535", port.port));
        }
    }
    if service.metadata.namespace != job.metadata.namespace {
        problems.push("the Service and the Job are in different namespaces".into());
    }
}
