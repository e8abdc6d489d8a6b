//! Same inputs, same digest: two builds of the build fixture, each from a clean daemon (the
//! first build's images and layers removed, so nothing is cached) and into an empty registry, at
//! different times, push the same manifest digests; the daemon holds each image under the pushed
//! config digest, so the self-test ran on the pushed bytes.

use std::collections::BTreeMap;

use crate::support::project::{assert_code, prepare, text, Project, SELFTEST_PASS};
use crate::support::Registry;

/// The digest the manifest records for each image, after a pushed build that built every one.
fn built_digests(project: &Project, log: &str) -> BTreeMap<String, String> {
    let manifest = project.manifest();
    let images = manifest["images"].as_object().expect("images recorded");
    assert_eq!(images.len(), 4, "four images recorded:\n{log}");
    assert_eq!(
        log.matches("== built sha256:").count(),
        4,
        "every image was built, none reused:\n{log}"
    );
    images
        .iter()
        .map(|(tag, record)| {
            (
                tag.clone(),
                record["digest"].as_str().expect("a digest").to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_clean_builds_of_the_same_inputs_push_one_digest() {
    prepare().await;
    let mut registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);

    let output = project.build(&["--push"]);
    assert_code(&output, 0);
    let first_log = text(&output);
    let first = built_digests(&project, &first_log);
    // The summary gives each image's size (its figures are checked against the registry below).
    assert!(first_log.contains("SIZE"), "{first_log}");
    assert_eq!(
        first_log.matches(" compressed, ").count(),
        4,
        "a size per image in the summary:\n{first_log}"
    );

    // Every local image of the first build is checked against what the registry serves.
    let engine = crate::support::engine().await;
    let client = project.client(None);
    let recorded = project.manifest();
    for (tag, digest) in &first {
        let served = client
            .get_manifest(&project.repository, tag)
            .await
            .unwrap()
            .expect("pushed");
        assert_eq!(&served.digest, digest);
        let manifest: serde_json::Value = serde_json::from_slice(&served.bytes).unwrap();
        let local = engine
            .image(&format!(
                "{}/{}:{tag}",
                project.registry, project.repository
            ))
            .await
            .unwrap()
            .unwrap_or_else(|| {
                panic!("{tag}: the normalized image is not in the daemon:\n{first_log}")
            });
        assert_eq!(
            manifest["config"]["digest"].as_str(),
            Some(local.id.as_str()),
            "{tag}: the daemon's image is the pushed config"
        );
        assert!(
            local.labels.contains_key("imagegen.normalized-epoch"),
            "{tag}: {:?}",
            local.labels
        );
        check_recorded_size(
            &client,
            &project,
            tag,
            &manifest,
            &recorded["images"][tag]["size"],
        )
        .await;
    }

    // A clean daemon, an empty registry, no manifest, a later time.
    project.remove_images().await;
    registry.restart_empty();
    std::fs::remove_file(project.path().join("imagegen-manifest.json")).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;

    let output = project.build(&["--push"]);
    assert_code(&output, 0);
    let second_log = text(&output);
    let second = built_digests(&project, &second_log);
    for (tag, digest) in &first {
        println!("{tag}: first {digest}, second {}", second[tag]);
    }
    assert_eq!(
        first, second,
        "two clean builds of the same inputs pushed other digests\nfirst build:\n{first_log}\nsecond build:\n{second_log}"
    );
}

/// The size the manifest records for `tag` is what the registry and the daemon hold:
/// `parts` the pushed manifest's layers (digest and size, in order); `compressed_bytes` the sum
/// of their sizes; `unpacked_bytes` the sum of
/// the layers' uncompressed tars (each blob fetched and inflated here); and the daemon's own
/// `.Size` (what `docker images` shows) lies between the file data those tars carry and the tars
/// themselves: it counts file content only (the storage driver may add symlink targets), never the
/// tar framing (a 512-byte header per entry, padding to 512 bytes, the end-of-archive blocks).
async fn check_recorded_size(
    client: &imagegen::docker::RegistryClient,
    project: &Project,
    tag: &str,
    pushed: &serde_json::Value,
    size: &serde_json::Value,
) {
    let layers = pushed["layers"]
        .as_array()
        .expect("the pushed manifest's layers");
    let compressed: u64 = layers
        .iter()
        .map(|layer| layer["size"].as_u64().unwrap())
        .sum();
    let (mut unpacked, mut file_data) = (0u64, 0u64);
    for layer in layers {
        let blob = client
            .get_blob(
                &project.repository,
                &imagegen::model::digest::Digest::parse(layer["digest"].as_str().unwrap()).unwrap(),
            )
            .await
            .unwrap()
            .expect("the layer blob is in the registry");
        // imagegen's gzip: a 10-byte header without optional fields, an 8-byte trailer.
        assert_eq!(blob[..4], [0x1f, 0x8b, 8, 0], "{tag}: a plain gzip header");
        let tar = miniz_oxide::inflate::decompress_to_vec(&blob[10..blob.len() - 8]).unwrap();
        unpacked += tar.len() as u64;
        for entry in tar::Archive::new(tar.as_slice()).entries().unwrap() {
            let entry = entry.unwrap();
            if entry.header().entry_type().is_file() {
                file_data += entry.size();
            }
        }
    }
    let docker_size: u64 = {
        let output = std::process::Command::new("docker")
            .args(["image", "inspect", "--format", "{{.Size}}"])
            .arg(format!("{}/{}:{tag}", project.registry, project.repository))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "docker image inspect: {}",
            text(&output)
        );
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .unwrap()
    };
    println!(
        "{tag}: recorded {size}; pushed layers {compressed} B, tars {unpacked} B, file data {file_data} B, docker .Size {docker_size} B"
    );
    let mut totals = size.clone();
    let parts = totals
        .as_object_mut()
        .and_then(|object| object.remove("parts"))
        .expect("each layer recorded");
    assert_eq!(
        totals,
        serde_json::json!({
            "compressed_bytes": compressed,
            "unpacked_bytes": unpacked,
            "layers": layers.len(),
        }),
        "{tag}: the recorded size"
    );
    // Each layer as pushed, in order: what `plan` and `diff` compute a pull from.
    let recorded: Vec<(&str, u64)> = parts
        .as_array()
        .unwrap()
        .iter()
        .map(|part| {
            (
                part["digest"].as_str().unwrap(),
                part["compressed_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let pushed_layers: Vec<(&str, u64)> = layers
        .iter()
        .map(|layer| {
            (
                layer["digest"].as_str().unwrap(),
                layer["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(recorded, pushed_layers, "{tag}: the recorded layers");
    assert!(
        file_data <= docker_size && docker_size <= unpacked,
        "{tag}: docker's .Size {docker_size} is not between the file data {file_data} and the tars {unpacked}"
    );
}

/// Builds `dockerfile` (with the case's label after `FROM`) as `tag` and returns its image ID.
async fn build_image(
    engine: &imagegen::docker::Engine,
    cleanup: &crate::support::Cleanup,
    tag: &str,
    dockerfile: &str,
) -> String {
    let dockerfile = cleanup.dockerfile(dockerfile);
    let directory = crate::support::context_dir(&[("Dockerfile", &dockerfile)]);
    let context = imagegen::docker::context_tar(directory.path(), &[]).unwrap();
    let request = imagegen::docker::BuildRequest::new(tag, context);
    engine.build(request, |_| {}).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn diff_build_names_the_files_that_differ_per_layer() {
    prepare().await;
    let engine = crate::support::engine().await;
    let cleanup = crate::support::Cleanup::new("diff-build");
    let base = crate::support::BASE_IMAGE;
    let first = format!("imagegen-test/diff-build:{}-a", cleanup.case());
    let second = format!("imagegen-test/diff-build:{}-b", cleanup.case());
    // The same steps; the second "archive" serves another release of one package.
    let steps = |release: &str| {
        format!(
            "FROM {base}\nRUN mkdir -p /opt/app && echo same > /opt/app/same.txt\nRUN echo 'htop {release}' > /opt/app/htop && chmod 0755 /opt/app/htop && echo {release} > /opt/app/release-{release}\n"
        )
    };
    build_image(&engine, &cleanup, &first, &steps("3.2.1")).await;
    build_image(&engine, &cleanup, &second, &steps("3.2.2-1")).await;
    let directory = tempfile::tempdir().unwrap();
    let run = |a: &str, b: &str| {
        assert_cmd::Command::cargo_bin("imagegen")
            .unwrap()
            .current_dir(directory.path())
            .args(["diff-build", a, b])
            .output()
            .unwrap()
    };

    let output = run(&first, &second);
    assert_code(&output, 1);
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"sha256:[0-9a-f]{12}", "sha256:[short]");
    settings.add_filter(r#""[0-9a-f]{64}""#, "[container]");
    settings.add_filter(r"\d{4}-\d\d-\d\dT[0-9:.]+Z", "[time]");
    settings.add_filter(&regex_escape(cleanup.case()), "[case]");
    settings.add_filter(r"imagegen-test\.run=\S+", "imagegen-test.run=[run]");
    settings.bind(|| insta::assert_snapshot!("diff_build", text(&output)));

    let output = run(&first, &first);
    assert_code(&output, 0);
    assert!(
        text(&output).contains("are the same image"),
        "{}",
        text(&output)
    );
}

/// `text` with the characters a regex treats specially escaped.
fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if "\\.+*?()|[]{}^$-".contains(c) {
                vec!['\\', c]
            } else {
                vec![c]
            }
        })
        .collect()
}

/// The image ID the daemon holds under each of the project's four tags.
async fn local_ids(project: &Project, log: &str) -> BTreeMap<String, String> {
    let engine = crate::support::engine().await;
    let mut ids = BTreeMap::new();
    for torch in ["2.7.0", "2.8.0"] {
        for variant in ["runtime", "devel"] {
            let tag = project.tag(torch, variant);
            let reference = format!("{}/{}:{tag}", project.registry, project.repository);
            let image = engine
                .image(&reference)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("no {reference} in the daemon:\n{log}"));
            ids.insert(tag, image.id);
        }
    }
    ids
}

/// What the log of an image whose package listing came from the layer store says.
const LISTING_KEPT: &str = "packages listed as for an earlier image with these layers";

/// How many of the project's image logs (`.imagegen/logs`, fresh each build) say `what`.
fn logs_saying(project: &Project, what: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(project.path().join(".imagegen/logs")) else {
        return 0;
    };
    entries
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default())
        .filter(|log| log.contains(what))
        .count()
}

/// The package record of each of the fixture's four images in the manifest, by tag; each holds
/// the torch the image was built with.
fn packages(project: &Project) -> BTreeMap<String, serde_json::Value> {
    let manifest = project.manifest();
    let mut packages = BTreeMap::new();
    for torch in ["2.7.0", "2.8.0"] {
        for variant in ["runtime", "devel"] {
            let tag = project.tag(torch, variant);
            let record = manifest["images"][&tag]["packages"].clone();
            let pip = record["pip"].to_string();
            assert!(
                pip.contains(&format!("torch=={torch}")),
                "{tag}: the record lists the image's torch: {record}"
            );
            packages.insert(tag, record);
        }
    }
    packages
}

fn build_one_at_a_time(project: &Project) -> std::process::Output {
    project
        .imagegen(&["build", "--selftest-dir", "selftest", "--jobs", "1"])
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_change_takes_the_earlier_layers_a_label_change_skips_the_docker_build_and_both_give_a_clean_builds_images(
) {
    prepare().await;
    // One build at a time: two runtime images built at once each make their own copy of the
    // steps they share, and a later build finds only one of them in the daemon's cache, so its
    // other steps run again (new layers, nothing to take from the store).
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    const TAKEN: &str = "without exporting them";
    const RELABELLED: &str = "relabelled without a Docker build";

    let output = build_one_at_a_time(&project);
    assert_code(&output, 0);
    let first_log = text(&output);
    assert!(
        !first_log.contains(TAKEN) && !first_log.contains(RELABELLED),
        "nothing was kept before the first build:\n{first_log}"
    );
    assert!(
        first_log.contains("Step 1/"),
        "the log shows Docker's steps:\n{first_log}"
    );
    let first = local_ids(&project, &first_log).await;

    // A config change only (an `ENV` in the runtime template): every layer of the runtime
    // images is the first build's. The devel images are built FROM the new runtime images, so
    // their own steps run again and make new layers.
    let template = project.path().join("templates/runtime.Dockerfile.j2");
    let text_before = std::fs::read_to_string(&template).unwrap();
    let with_env = text_before.replace(
        "ENV NVIDIA_REQUIRE_CUDA=",
        "ENV IMAGEGEN_TEST_ROUND=2\nENV NVIDIA_REQUIRE_CUDA=",
    );
    assert_ne!(
        with_env, text_before,
        "the fixture's runtime template has its ENV line"
    );
    std::fs::write(&template, with_env).unwrap();
    project.imagegen(&["render"]).assert().success();
    let output = build_one_at_a_time(&project);
    assert_code(&output, 0);
    let config_log = text(&output);
    assert_eq!(
        (config_log.matches(TAKEN).count(), config_log.matches(RELABELLED).count()),
        (2, 0),
        "the two runtime images take the earlier layers\nfirst build:\n{first_log}\nconfig change:\n{config_log}"
    );
    let config_changed = local_ids(&project, &config_log).await;
    for (tag, id) in &config_changed {
        assert_ne!(&first[tag], id, "{tag}: the ENV changed the image");
    }

    // A label only: no Docker build at all, for the runtime images nor for the devel images
    // built FROM them (relabelled too: their parents' labels and history are all that moved).
    project.edit_matrix(
        "templates: templates\n",
        "templates: templates\nlabels:\n  org.opencontainers.image.vendor: second\n",
    );
    let started = std::time::Instant::now();
    let output = build_one_at_a_time(&project);
    let warm_seconds = started.elapsed().as_secs_f64();
    assert_code(&output, 0);
    let warm_log = text(&output);
    assert_eq!(
        warm_log.matches(RELABELLED).count(),
        4,
        "every image is relabelled\nconfig change:\n{config_log}\nlabel change:\n{warm_log}"
    );
    assert!(
        !warm_log.contains("Step 1/"),
        "no Docker build ran:\n{warm_log}"
    );
    let warm = local_ids(&project, &warm_log).await;
    for (tag, id) in &warm {
        assert_ne!(
            &config_changed[tag], id,
            "{tag}: the label changed the image"
        );
    }
    // Their layers and config but labels are the config change's images: no listing container.
    assert_eq!(
        logs_saying(&project, LISTING_KEPT),
        4,
        "every relabelled image takes its package listing from the store\nlabel change:\n{warm_log}"
    );
    let warm_packages = packages(&project);
    let engine = crate::support::engine().await;
    for torch in ["2.7.0", "2.8.0"] {
        for variant in ["runtime", "devel"] {
            let tag = project.tag(torch, variant);
            let image = engine
                .image(&format!(
                    "{}/{}:{tag}",
                    project.registry, project.repository
                ))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                image
                    .labels
                    .get("org.opencontainers.image.vendor")
                    .map(String::as_str),
                Some("second"),
                "{tag}: {:?}",
                image.labels
            );
        }
    }

    // The same inputs built on a clean daemon with nothing kept: the same images.
    project.remove_images().await;
    std::fs::remove_dir_all(project.path().join(".imagegen")).unwrap();
    std::fs::remove_file(project.path().join("imagegen-manifest.json")).unwrap();
    let started = std::time::Instant::now();
    let output = build_one_at_a_time(&project);
    let cold_seconds = started.elapsed().as_secs_f64();
    assert_code(&output, 0);
    let cold_log = text(&output);
    assert!(!cold_log.contains("without exporting them"), "{cold_log}");
    let cold = local_ids(&project, &cold_log).await;
    assert_eq!(
        logs_saying(&project, LISTING_KEPT),
        0,
        "nothing kept: each listing ran in a container"
    );
    assert_eq!(
        warm_packages,
        packages(&project),
        "the kept listings are the ones the clean build's containers printed"
    );
    println!("label change: {warm_seconds:.1} s; the same inputs from a clean daemon: {cold_seconds:.1} s");
    for (tag, id) in &warm {
        println!("{tag}: label change {id}, clean build {}", cold[tag]);
    }
    assert_eq!(
        warm, cold,
        "the label change's images are not a clean build's\nlabel change:\n{warm_log}\nclean build:\n{cold_log}"
    );
}
