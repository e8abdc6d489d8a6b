//! Signed attestations against the real registry: `build --push --signing-key` attaches the
//! provenance, SBOM and gpu-selftest statements and the signature of every image in cosign's
//! layout; `verify --attestations` and an independent verifier (.ci/verify-attestations.py:
//! securesystemslib, cryptography, cyclonedx-python-lib, jsonschema) accept them, and both
//! refuse a tampered statement, another key, a statement about another digest and a missing
//! attestation, each named.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use imagegen::attest::cosign::{attestation_tag, OCI_MANIFEST};
use imagegen::model::digest::Digest;
use serde_json::Value;

use crate::support::project::{assert_code, prepare, text, Project, SELFTEST_PASS};
use crate::support::Registry;

fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Copies the fixture key `name` into the project with `mode`.
fn key(project: &Project, name: &str, mode: u32) -> PathBuf {
    let path = project.path().join(name);
    std::fs::copy(
        repository_root().join("tests/fixtures/attest").join(name),
        &path,
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// The independent verifier over the project's manifest with public key `public`.
fn independent(project: &Project, public: &Path) -> Output {
    let python = repository_root().join(".ci/venv/bin/python");
    assert!(
        python.exists(),
        "the independent verifier needs .ci/venv: run .ci/install-deps.sh"
    );
    std::process::Command::new(python)
        .arg(repository_root().join(".ci/verify-attestations.py"))
        .arg("--manifest")
        .arg(project.path().join("imagegen-manifest.json"))
        .arg("--key")
        .arg(public)
        .arg("--schema")
        .arg(
            repository_root().join("crates/imagegen-attest/src/gpu-selftest-result.v1.schema.json"),
        )
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn signed_attestations_verify_and_every_kind_of_bad_one_is_refused() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let team_key = key(&project, "team.pem", 0o600);
    let team_pub = key(&project, "team.pub", 0o644);
    let other_pub = key(&project, "other.pub", 0o644);

    // A key others may read is refused before anything is built; the key is never printed.
    std::fs::set_permissions(&team_key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let refused = project.build(&["--push", "--signing-key", "team.pem"]);
    assert_code(&refused, 2);
    assert!(
        text(&refused).contains("readable or writable by others (mode 640)"),
        "{}",
        text(&refused)
    );
    assert!(!project.path().join("imagegen-manifest.json").exists());
    std::fs::set_permissions(&team_key, std::fs::Permissions::from_mode(0o600)).unwrap();

    let output = project.build(&["--push", "--signing-key", "team.pem"]);
    assert_code(&output, 0);
    // Each image is signed in its own run of the executor, after its full tag and before its
    // aliases (the order is unit-tested in pipeline::executor).
    assert_eq!(
        text(&output).matches("== signed, attestations").count(),
        4,
        "{}",
        text(&output)
    );
    let secret_line = std::fs::read_to_string(&team_key).unwrap();
    let secret_line = secret_line.lines().nth(1).unwrap();
    assert!(!text(&output).contains(secret_line), "the key was printed");
    let manifest = project.manifest();
    assert!(!manifest.to_string().contains(secret_line));
    let images = manifest["images"].as_object().unwrap();
    assert_eq!(images.len(), 4, "the fixture makes four images");
    let attestations = manifest["attestations"].as_object().unwrap();
    for (tag, record) in images {
        let digest = record["digest"].as_str().unwrap();
        let attested = &attestations[digest];
        assert_eq!(attested["tag"], tag.as_str());
        assert_eq!(
            attested["statements"].as_object().unwrap().len(),
            3,
            "{tag}: {attested}"
        );
        assert_eq!(attested["gpu_selftest"], "pass");
        let served = project
            .client(None)
            .manifest_digest(
                &project.repository,
                attested["attestations"]["tag"].as_str().unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(
            served.as_ref().map(|digest| digest.as_str()),
            attested["attestations"]["digest"].as_str(),
            "the manifest records the .att digest the registry serves"
        );
        // The same, as OCI 1.1 referrers: registry 2.8 has no referrers API, so the fallback
        // index tagged sha256-<hex> lists both, each a manifest about this digest.
        let client = project.client(None);
        let fallback = format!("sha256-{}", digest.trim_start_matches("sha256:"));
        assert_eq!(attested["referrers_tag"], fallback.as_str(), "{attested}");
        let index = client
            .get_manifest(&project.repository, &fallback)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{tag}: no referrers fallback tag {fallback}"));
        let index: Value = serde_json::from_slice(&index.bytes).unwrap();
        let entries = index["manifests"].as_array().unwrap();
        let types: Vec<&str> = entries
            .iter()
            .map(|entry| entry["artifactType"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "application/vnd.in-toto+json",
                "application/vnd.dev.cosign.simplesigning.v1+json"
            ],
            "{index}"
        );
        let recorded: Vec<&str> = attested["referrers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        for entry in entries {
            assert!(recorded.contains(&entry["digest"].as_str().unwrap()));
            let referrer = client
                .get_manifest(&project.repository, entry["digest"].as_str().unwrap())
                .await
                .unwrap()
                .unwrap();
            let referrer: Value = serde_json::from_slice(&referrer.bytes).unwrap();
            assert_eq!(referrer["subject"]["digest"], digest, "{referrer}");
        }
    }

    // Good: imagegen and the independent verifier accept every image.
    let verified = project
        .imagegen(&["verify", "--attestations", "--key", "team.pub"])
        .output()
        .unwrap();
    assert_code(&verified, 0);
    assert!(
        text(&verified).contains("4 image(s) checked"),
        "{}",
        text(&verified)
    );
    let checked = independent(&project, &team_pub);
    assert_code(&checked, 0);
    assert_eq!(
        text(&checked).matches("\nok ").count() + usize::from(text(&checked).starts_with("ok ")),
        4,
        "{}",
        text(&checked)
    );

    let good = project.tag("2.8.0", "devel");
    let shown = project
        .imagegen(&["attest", "show", &good, "--key", "team.pub"])
        .output()
        .unwrap();
    assert_code(&shown, 0);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["verified"]["gpu-selftest"]["result"], "pass");
    assert_eq!(shown["verified"]["sbom"]["specVersion"], "1.6");
    assert_eq!(
        shown["verified"]["provenance"]["runDetails"]["builder"]["id"],
        "urn:imagegen:builder"
    );
    // The gpu-selftest binary the build put into the image, by its sha256.
    let binary = std::fs::read(project.path().join("selftest/gpu-selftest-cu12")).unwrap();
    let dependencies = shown["verified"]["provenance"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .unwrap();
    let selftest = dependencies
        .iter()
        .find(|dependency| dependency["name"] == "gpu-selftest")
        .unwrap();
    assert_eq!(selftest["digest"]["sha256"], Digest::of(&binary).hex());
    // The SBOM lists the same bytes as an application, from the record's packages.binaries.
    let applications: Vec<&Value> = shown["verified"]["sbom"]["components"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|component| component["type"] == "application")
        .collect();
    assert_eq!(applications.len(), 1, "{applications:?}");
    assert_eq!(
        applications[0]["evidence"]["occurrences"][0]["location"],
        "/usr/local/bin/gpu-selftest"
    );
    assert_eq!(
        applications[0]["hashes"][0]["content"],
        Digest::of(&binary).hex()
    );

    // `attest sbom` prints, with no registry and no key, the very SBOM that was signed.
    let printed = project
        .imagegen(&["attest", "sbom", &good])
        .output()
        .unwrap();
    assert_code(&printed, 0);
    let printed: Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(printed, shown["verified"]["sbom"]);

    // The admission policy for the manifest's repository, with the team's public key.
    let policy = project
        .imagegen(&["k8s", "--policy", "--key", "team.pub"])
        .output()
        .unwrap();
    assert_code(&policy, 0);
    let policy: Value = serde_yaml::from_slice(&policy.stdout).unwrap();
    assert_eq!(policy["kind"], "ClusterImagePolicy");
    assert_eq!(
        policy["spec"]["images"][0]["glob"],
        format!(
            "{}**",
            images.values().next().unwrap()["repository"]
                .as_str()
                .unwrap()
        )
    );
    let public = std::fs::read_to_string(&team_pub).unwrap();
    assert_eq!(
        policy["spec"]["authorities"][0]["key"]["data"]
            .as_str()
            .unwrap()
            .trim(),
        public.trim()
    );
    let no_key = project.imagegen(&["k8s", "--policy"]).output().unwrap();
    assert_code(&no_key, 2);

    let other = project
        .imagegen(&["verify", "--attestations", "--key", "other.pub"])
        .output()
        .unwrap();
    assert_code(&other, 1);
    assert_eq!(
        text(&other)
            .matches("no signature verifies with key")
            .count(),
        12,
        "{}",
        text(&other)
    );
    let checked = independent(&project, &other_pub);
    assert_code(&checked, 1);
    assert_eq!(
        text(&checked).matches("signature does not verify").count(),
        12,
        "{}",
        text(&checked)
    );

    // Make three images bad, each in its own way.
    let client = project.client(None);
    let repository = project.repository.as_str();
    let digest_of = |tag: &str| Digest::parse(images[tag]["digest"].as_str().unwrap()).unwrap();
    let tampered = project.tag("2.7.0", "runtime");
    let other_subject = project.tag("2.7.0", "devel");
    let missing = project.tag("2.8.0", "runtime");
    let att_of = |tag: &str| {
        attestation_tag(&imagegen_attest::Digest::from_sha256(
            digest_of(tag).sha256_bytes(),
        ))
    };
    let original = client
        .get_manifest(repository, &att_of(&tampered))
        .await
        .unwrap()
        .unwrap();
    // Another digest's statements under this image's tag: their subject is the other digest.
    client
        .put_manifest(
            repository,
            &att_of(&other_subject),
            OCI_MANIFEST,
            original.bytes.clone(),
        )
        .await
        .unwrap();
    // A statement changed after signing: its provenance says another commit.
    let mut att: Value = serde_json::from_slice(&original.bytes).unwrap();
    let layer = att["layers"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|layer| layer["annotations"]["predicateType"] == "https://slsa.dev/provenance/v1")
        .unwrap();
    let blob = client
        .get_blob(
            repository,
            &Digest::parse(layer["digest"].as_str().unwrap()).unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    let mut envelope: Value = serde_json::from_slice(&blob).unwrap();
    use base64::Engine as _;
    let engine = base64::engine::general_purpose::STANDARD;
    let payload = String::from_utf8(
        engine
            .decode(envelope["payload"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    let changed = payload.replace("\"buildType\":\"urn:imagegen", "\"buildType\":\"urn:evil");
    assert_ne!(changed, payload);
    envelope["payload"] = Value::String(engine.encode(changed));
    let bytes = serde_json::to_vec(&envelope).unwrap();
    let new_digest = client.put_blob(repository, bytes.clone()).await.unwrap();
    layer["digest"] = Value::String(new_digest.to_string());
    layer["size"] = Value::from(bytes.len());
    client
        .put_manifest(
            repository,
            &att_of(&tampered),
            OCI_MANIFEST,
            serde_json::to_vec(&att).unwrap(),
        )
        .await
        .unwrap();
    // A missing attestation: the `.att` manifest deleted (this registry allows deletes).
    let missing_att = client
        .manifest_digest(repository, &att_of(&missing))
        .await
        .unwrap()
        .unwrap();
    let url = format!(
        "http://{}/v2/{repository}/manifests/{missing_att}",
        registry.host()
    );
    let deleted = ureq::delete(&url).call().unwrap();
    assert_eq!(deleted.status().as_u16(), 202);

    let verified = project
        .imagegen(&["verify", "--attestations", "--key", "team.pub"])
        .output()
        .unwrap();
    assert_code(&verified, 1);
    let report = text(&verified);
    let full = |tag: &str| format!("{}/{}:{tag}", project.registry, project.repository);
    assert!(
        report.contains(&format!(
            "{}: provenance: no signature verifies",
            full(&tampered)
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "{}: provenance: the statement's subject is {}, but the registry serves {}",
            full(&other_subject),
            digest_of(&tampered),
            digest_of(&other_subject)
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "{}: no attestations: the registry has no tag {}",
            full(&missing),
            att_of(&missing)
        )),
        "{report}"
    );
    assert!(!report.contains(&format!("{}:", full(&good))), "{report}");
    let repository_pattern = regex_escape(&project.repository);
    insta::with_settings!({filters => vec![
        (r"127\.0\.0\.1:[0-9]+", "[registry]"),
        (repository_pattern.as_str(), "[repository]"),
        (r"sha256:[0-9a-f]{64}", "sha256:[digest]"),
        (r"sha256-[0-9a-f]{64}", "sha256-[hex]"),
        (r"sha256:[0-9a-f]{12}", "sha256:[short]"),
        (r"key [0-9a-f]{12,64}", "key [key id]"),
        // Column widths follow the registry's port and the repository's name.
        (r" {2,}", "  "),
    ]}, {
        insta::assert_snapshot!("verify_attestations_refuses_what_is_bad", report);
    });
    let checked = independent(&project, &team_pub);
    assert_code(&checked, 1);
    let report = text(&checked);
    assert!(
        report.contains(&format!(
            "BAD {}: https://slsa.dev/provenance/v1: signature does not verify",
            full(&tampered)
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "BAD {}: https://slsa.dev/provenance/v1: subject",
            full(&other_subject)
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!("BAD {}: no attestations", full(&missing))),
        "{report}"
    );
    assert!(report.contains(&format!("ok {}", full(&good))), "{report}");
    assert!(report.contains("4 image(s) checked, 3 bad"), "{report}");

    // Signing again (the key's PEM text in IMAGEGEN_SIGNING_KEY, as CI passes a secret) puts
    // whole statements back for the tampered image; the other two stay refused.
    let pem = std::fs::read_to_string(&team_key).unwrap();
    let resigned = project
        .imagegen(&["attest", "sign", &tampered])
        .env("IMAGEGEN_SIGNING_KEY", &pem)
        .output()
        .unwrap();
    assert_code(&resigned, 0);
    assert!(
        text(&resigned).contains("signed 1 image(s)"),
        "{}",
        text(&resigned)
    );
    assert!(!text(&resigned).contains(secret_line));
    let verified = project
        .imagegen(&["verify", "--attestations", "--key", "team.pub"])
        .output()
        .unwrap();
    assert_code(&verified, 1);
    assert!(
        text(&verified).contains("4 image(s) checked with key"),
        "{}",
        text(&verified)
    );
    assert!(
        !text(&verified).contains(&format!("{}:", full(&tampered))),
        "{}",
        text(&verified)
    );
    let json = project
        .imagegen(&[
            "verify",
            "--attestations",
            "--key",
            "team.pub",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_code(&json, 1);
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        (json["checked"].as_u64(), json["bad"].as_u64()),
        (Some(4), Some(2)),
        "{json}"
    );
    let unknown = project
        .imagegen(&["attest", "sign", "9.9.9-nothing"])
        .env("IMAGEGEN_SIGNING_KEY", &pem)
        .output()
        .unwrap();
    assert_code(&unknown, 2);
    assert!(text(&unknown).contains("9.9.9-nothing is not an image the manifest records"));
    let unknown = project
        .imagegen(&["attest", "sbom", "9.9.9-nothing"])
        .output()
        .unwrap();
    assert_code(&unknown, 2);
    assert!(text(&unknown).contains("9.9.9-nothing is not an image the manifest records"));
}

/// `text` as a regular expression that matches it literally.
fn regex_escape(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}
