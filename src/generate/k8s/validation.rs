//! The rules the API server would enforce on what `imagegen k8s` emits (names are DNS labels,
//! quantities parse, selectors match the template, ...), checked before anything is printed.

use crate::generate::k8s::objects::Manifests;

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
    let name = job.metadata.name.clone().unwrap_or_default();
    if job.api_version != "batch/v1" || job.kind != "Job" {
        problems.push(format!(
            "{}/{} is not batch/v1 Job",
            job.api_version, job.kind
        ));
    }
    let indexed = job.spec.completion_mode.as_deref() == Some("Indexed");
    // Indexed pods are `<job>-<index>`: that hostname must stay a DNS label.
    let longest_pod_hostname = format!("{name}-{}", job.spec.completions.saturating_sub(1));
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
    if let Some(mode) = &job.spec.completion_mode {
        if mode != "Indexed" && mode != "NonIndexed" {
            problems.push(format!(
                "completionMode {mode:?} is neither Indexed nor NonIndexed"
            ));
        }
    }
    if indexed && job.spec.completions != job.spec.parallelism {
        problems.push(
            "an Indexed training job needs completions = parallelism (all ranks at once)".into(),
        );
    }
    let pod = &job.spec.template.spec;
    if pod.restart_policy != "Never" && pod.restart_policy != "OnFailure" {
        problems.push(format!(
            "a Job's restartPolicy must be Never or OnFailure, not {:?}",
            pod.restart_policy
        ));
    }
    for (key, value) in &job.spec.template.metadata.labels {
        if value.len() > 63 {
            problems.push(format!("label {key} value {value:?} is longer than 63"));
        }
    }
    let volume_names: Vec<&str> = pod.volumes.iter().map(|v| v.name.as_str()).collect();
    for container in &pod.containers {
        for mount in &container.volume_mounts {
            if !volume_names.contains(&mount.name.as_str()) {
                problems.push(format!("volumeMount {} names no volume", mount.name));
            }
        }
        for (resource, quantity) in &container.resources.limits {
            if !is_quantity(quantity) {
                problems.push(format!("limit {resource}: {quantity:?} is not a quantity"));
            }
        }
        for port in &container.ports {
            if port.name.len() > 15 {
                problems.push(format!("port name {:?} is longer than 15", port.name));
            }
        }
        if container.command.is_empty() {
            problems.push(format!("container {} has no command", container.name));
        }
    }
    for volume in &pod.volumes {
        if volume.empty_dir.medium != "Memory" && !volume.empty_dir.medium.is_empty() {
            problems.push(format!("emptyDir medium {:?}", volume.empty_dir.medium));
        }
        if !is_quantity(&volume.empty_dir.size_limit) {
            problems.push(format!(
                "emptyDir sizeLimit {:?} is not a quantity",
                volume.empty_dir.size_limit
            ));
        }
    }
    if let Some(affinity) = &pod.affinity {
        let terms = &affinity
            .node_affinity
            .required_during_scheduling_ignored_during_execution
            .node_selector_terms;
        if terms.is_empty() {
            problems.push("node affinity without terms".into());
        }
        for expression in terms.iter().flat_map(|t| &t.match_expressions) {
            let numeric = matches!(expression.operator.as_str(), "Gt" | "Lt");
            if numeric
                && (expression.values.len() != 1 || expression.values[0].parse::<i64>().is_err())
            {
                problems.push(format!(
                    "{} {} needs exactly one integer value, has {:?}",
                    expression.key, expression.operator, expression.values
                ));
            }
            if !numeric
                && !["In", "NotIn", "Exists", "DoesNotExist"]
                    .contains(&expression.operator.as_str())
            {
                problems.push(format!("unknown operator {}", expression.operator));
            }
        }
    }
    match (&manifests.service, &pod.subdomain) {
        (Some(service), Some(subdomain)) => {
            let service_name = service.metadata.name.clone().unwrap_or_default();
            if &service_name != subdomain {
                problems.push(format!(
                    "pod subdomain {subdomain:?} is not the Service {service_name:?}"
                ));
            }
            if service.spec.cluster_ip != "None" {
                problems.push("the rendezvous Service must be headless (clusterIP: None)".into());
            }
            let pod_labels = &job.spec.template.metadata.labels;
            if service.spec.selector.is_empty()
                || !service
                    .spec
                    .selector
                    .iter()
                    .all(|(key, value)| pod_labels.get(key) == Some(value))
            {
                problems.push("the Service selector does not select the Job's pods".into());
            }
            if service.metadata.namespace != job.metadata.namespace {
                problems.push("the Service and the Job are in different namespaces".into());
            }
        }
        (None, None) => {}
        _ => problems.push("a pod subdomain needs its headless Service, and back".into()),
    }
    problems
}
