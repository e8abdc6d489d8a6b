//! The admission policy `imagegen k8s --policy` writes: a Sigstore policy-controller
//! `ClusterImagePolicy` (`policy.sigstore.dev/v1beta1`) that admits the images of the given
//! repositories only when they carry a signature by the team's public key and a gpu-selftest
//! attestation, signed by the same key, whose `result` is `pass`. The attestation is checked
//! with a CUE policy on the in-toto statement; no transparency log is asked (none is written:
//! without `ctlog` policy-controller skips it for key authorities).

use serde_json::{json, Value};

use crate::selftest::PREDICATE_TYPE;

/// The policy named `name` for the images of `repositories` (each `registry/path`), signed by
/// the PEM public key `public_key`.
pub fn cluster_image_policy(name: &str, repositories: &[String], public_key: &str) -> Value {
    let globs: Vec<Value> = repositories
        .iter()
        .map(|repository| json!({ "glob": format!("{repository}**") }))
        .collect();
    let cue = format!("predicateType: \"{PREDICATE_TYPE}\"\npredicate: result: \"pass\"\n");
    json!({
        "apiVersion": "policy.sigstore.dev/v1beta1",
        "kind": "ClusterImagePolicy",
        "metadata": { "name": name },
        "spec": {
            "images": globs,
            "authorities": [{
                "name": "imagegen-team-key",
                "key": { "data": public_key, "hashAlgorithm": "sha256" },
                "attestations": [{
                    "name": "gpu-selftest-passed",
                    "predicateType": PREDICATE_TYPE,
                    "policy": { "type": "cue", "data": cue },
                }],
            }],
        },
    })
}

/// Where `value` does not fit the OpenAPI v3 `schema` of a CustomResourceDefinition version:
/// a wrong type, a missing required field, or a field the schema does not name (which the API
/// server would prune or refuse), each as `path: problem`.
#[cfg(test)]
fn schema_problems(value: &Value, schema: &Value, path: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let expected = schema.get("type").and_then(Value::as_str);
    let fits = match expected {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("boolean") => value.is_boolean(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        _ => true,
    };
    if !fits {
        problems.push(format!("{path}: not of type {}", expected.unwrap_or("?")));
        return problems;
    }
    if let Some(object) = value.as_object() {
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !object.contains_key(required) {
                problems.push(format!("{path}: missing required {required}"));
            }
        }
        let open = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
        let properties = schema.get("properties").and_then(Value::as_object);
        for (key, field) in object {
            match properties.and_then(|properties| properties.get(key)) {
                Some(sub) => problems.extend(schema_problems(field, sub, &format!("{path}.{key}"))),
                None if open => {}
                None => problems.push(format!("{path}.{key}: not in the schema")),
            }
        }
    }
    if let (Some(items), Some(schema)) = (value.as_array(), schema.get("items")) {
        for (index, item) in items.iter().enumerate() {
            problems.extend(schema_problems(item, schema, &format!("{path}[{index}]")));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEZxAfzrQG1EbWyCI8LiSB7YgSFXoI\nFNGTyQGKHFc6/H8TQumT9VLS78pUwtv3w7EfKoyFZoP32KrO7nzUy2q6Cw==\n-----END PUBLIC KEY-----\n";

    /// The `v1beta1` openAPIV3Schema of policy-controller's CRD (tests/fixtures/policy-controller).
    fn v1beta1_schema() -> Value {
        let text =
            include_str!("../../../tests/fixtures/policy-controller/300-clusterimagepolicy.yaml");
        let crd: Value = serde_yaml::from_str(text).unwrap();
        assert_eq!(crd["spec"]["names"]["kind"], "ClusterImagePolicy");
        assert_eq!(crd["spec"]["group"], "policy.sigstore.dev");
        let versions = crd["spec"]["versions"].as_array().unwrap();
        let beta: Vec<&Value> = versions.iter().filter(|v| v["name"] == "v1beta1").collect();
        assert_eq!(beta.len(), 1);
        beta[0]["schema"]["openAPIV3Schema"].clone()
    }

    #[test]
    fn the_policy_fits_policy_controllers_published_schema() {
        let policy = cluster_image_policy(
            "imagegen-torch",
            &["registry.example/ml/torch".to_string()],
            KEY,
        );
        let schema = v1beta1_schema();
        // apiVersion, kind and metadata are Kubernetes' own; the CRD's schema covers the rest.
        let mut body = policy.clone();
        for field in ["apiVersion", "kind", "metadata"] {
            body.as_object_mut().unwrap().remove(field);
        }
        assert_eq!(schema_problems(&body, &schema, ""), Vec::<String>::new());
        insta::assert_yaml_snapshot!("cluster_image_policy", policy);
    }

    #[test]
    fn the_schema_check_finds_misnamed_and_mistyped_fields() {
        let schema = v1beta1_schema();
        let mut body = cluster_image_policy("p", &["r/x".to_string()], KEY);
        body.as_object_mut().unwrap().remove("apiVersion");
        body.as_object_mut().unwrap().remove("kind");
        body.as_object_mut().unwrap().remove("metadata");
        body["spec"]["authorities"][0]["attestations"][0]["predicate_type"] = json!("x");
        body["spec"]["images"][0]["glob"] = json!(3);
        assert_eq!(
            schema_problems(&body, &schema, ""),
            [
                ".spec.authorities[0].attestations[0].predicate_type: not in the schema",
                ".spec.images[0].glob: not of type string",
            ]
        );
    }
}
