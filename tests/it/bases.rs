//! Base images pinned by digest (`images/bases.lock`), against the real daemon and a real
//! registry on 127.0.0.1: a base pushed to the registry is pinned by its manifest digest and
//! named with it in `FROM`; the same tag re-pushed with other content leaves the pin (and a build
//! from it) as it was until `imagegen lock --bases` reports the move; a deleted tag is reported
//! as vanished with the pin kept. A base only the daemon holds is pinned by its image ID, and a
//! build refuses a base whose ID is not the pinned one.

use imagegen::docker::{context_tar, BuildRequest, RegistryClient};
use imagegen::model::digest::Digest;

use crate::support::project::{assert_code, prepare, text, Project, SELFTEST_PASS};
use crate::support::{context_dir, engine, unique_name, Cleanup, Registry, BASE_IMAGE};

/// The pins file of `project`, parsed.
fn pins(project: &Project) -> serde_json::Value {
    let text = std::fs::read_to_string(project.path().join("images/bases.lock")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn dockerfile(project: &Project, tag: &str) -> String {
    std::fs::read_to_string(project.path().join("images").join(tag).join("Dockerfile")).unwrap()
}

/// Stores a small image (one config, no layers) under `repository:tag` through the registry API:
/// other content under the same tag. Returns its manifest digest.
async fn push_other_image(client: &RegistryClient, repository: &str, tag: &str) -> String {
    let config = br#"{"architecture":"amd64","os":"linux","config":{"Labels":{"imagegen-test.repushed":"yes"}},"rootfs":{"type":"layers","diff_ids":[]}}"#.to_vec();
    let config_size = config.len();
    let config_digest = client.put_blob(repository, config).await.unwrap();
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{config_digest}","size":{config_size}}},"layers":[]}}"#
    );
    client
        .put_manifest(
            repository,
            tag,
            "application/vnd.oci.image.manifest.v1+json",
            manifest.into_bytes(),
        )
        .await
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_base_is_pinned_by_digest_and_the_pin_holds_until_lock_bases_moves_it() {
    prepare().await;
    let engine = engine().await;
    let registry = Registry::start();
    // A base of this test's own (the shared busybox base plus this case's label), pushed to the
    // registry, then removed here so the build has to pull it by the pinned digest.
    let cleanup = Cleanup::new("pinned-base");
    let base_path = unique_name("imagegen-test/pinned-base");
    let base_repository = format!("{}/{base_path}", registry.host());
    let base = format!("{base_repository}:1");
    let context = context_dir(&[(
        "Dockerfile",
        &cleanup.dockerfile(&format!("FROM {BASE_IMAGE}\n")),
    )]);
    let base_id = engine
        .build(
            BuildRequest::new(&base, context_tar(context.path(), &[]).unwrap()),
            |_| {},
        )
        .await
        .unwrap();
    let pushed = engine
        .push(&base_repository, "1", None, |_| {})
        .await
        .unwrap();
    engine.remove_image(&base_id, true).await.unwrap();
    assert!(engine.image(&base).await.unwrap().is_none());
    let project = Project::new(registry.host(), SELFTEST_PASS);
    project.edit_matrix("runtime: imagegen-test/base:1", &format!("runtime: {base}"));
    let runtime = project.tag("2.7.0", "runtime");

    let locked = project.imagegen(&["lock", "--bases"]).output().unwrap();
    assert_code(&locked, 0);
    assert!(
        text(&locked).contains(&format!("pinned {base}: registry digest {pushed}")),
        "{}",
        text(&locked)
    );
    let pinned = pins(&project);
    assert_eq!(pinned["bases"][&base]["source"], "registry");
    assert_eq!(pinned["bases"][&base]["digest"], pushed.as_str());
    assert_eq!(
        pinned["bases"].as_object().unwrap().len(),
        1,
        "one base: {pinned}"
    );
    assert!(
        dockerfile(&project, &runtime).contains(&format!("\nFROM {base}@{pushed}\n")),
        "{}",
        dockerfile(&project, &runtime)
    );
    project.imagegen(&["render", "--check"]).assert().success();

    // The same tag re-pushed with other content: the pin, the Dockerfiles and a build hold.
    let client = project.client(None);
    let repushed = push_other_image(&client, &base_path, "1").await;
    assert_ne!(repushed, pushed);
    project.imagegen(&["render", "--check"]).assert().success();
    let built = project.build(&["--only", &runtime]);
    assert_code(&built, 0);
    let manifest = project.manifest();
    assert_eq!(
        manifest["images"][&runtime]["base_image"],
        format!("{base}@{pushed}").as_str(),
        "the manifest records the pinned base"
    );
    // What the daemon pulled for the build is the pinned digest, not what the tag names now.
    let pulled = engine
        .image(&format!("{base_repository}@{pushed}"))
        .await
        .unwrap()
        .expect("the pinned base was pulled by digest");
    assert_eq!(pulled.id, base_id);

    // `lock --bases` names the move and pins the new digest.
    let moved = project.imagegen(&["lock", "--bases"]).output().unwrap();
    assert_code(&moved, 0);
    assert!(
        text(&moved).contains(&format!(
            "moved {base}: registry digest {pushed} -> registry digest {repushed} (the tag was re-pushed)"
        )),
        "{}",
        text(&moved)
    );
    assert_eq!(pins(&project)["bases"][&base]["digest"], repushed.as_str());
    assert!(dockerfile(&project, &runtime).contains(&format!("\nFROM {base}@{repushed}\n")));

    // The tag deleted (its manifest): reported by name, the pin kept, exit 1.
    let deleted = std::process::Command::new("curl")
        .args(["-fsS", "-X", "DELETE"])
        .arg(format!(
            "http://{}/v2/{base_path}/manifests/{repushed}",
            registry.host()
        ))
        .output()
        .unwrap();
    assert!(deleted.status.success(), "{deleted:?}");
    let vanished = project.imagegen(&["lock", "--bases"]).output().unwrap();
    assert_code(&vanished, 1);
    let said = text(&vanished);
    assert!(
        said.contains(&format!("vanished {base}: the registry no longer has this tag; the pin (registry digest {repushed}) is kept")),
        "{said}"
    );
    assert!(said.contains("the registry no longer serves"), "{said}");
    assert_eq!(pins(&project)["bases"][&base]["digest"], repushed.as_str());

    // The project's images go first (dropped in reverse order), then `cleanup` removes the
    // pulled base by its case label.
}

#[tokio::test(flavor = "multi_thread")]
async fn a_base_only_the_daemon_holds_is_pinned_by_image_id_and_checked_before_building() {
    prepare().await;
    let engine = engine().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let runtime = project.tag("2.7.0", "runtime");
    let before = dockerfile(&project, &runtime);

    let locked = project.imagegen(&["lock", "--bases"]).output().unwrap();
    assert_code(&locked, 0);
    let id = engine.image(BASE_IMAGE).await.unwrap().unwrap().id;
    assert!(
        text(&locked).contains(&format!("pinned {BASE_IMAGE}: daemon image ID {id}")),
        "{}",
        text(&locked)
    );
    let pinned = pins(&project);
    assert_eq!(pinned["bases"][BASE_IMAGE]["source"], "daemon");
    assert_eq!(pinned["bases"][BASE_IMAGE]["image_id"], id.as_str());
    let after = dockerfile(&project, &runtime);
    assert!(
        after.contains(&format!("\nFROM {BASE_IMAGE}\n")),
        "no registry digest for a daemon-only base: {after}"
    );
    assert_ne!(before, after, "the pin is in the image's fingerprint");

    // A pin the daemon's image does not match: the build refuses it, naming the base and both IDs.
    let other = Digest::of(b"another base");
    let path = project.path().join("images/bases.lock");
    let text_before = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text_before.replace(&id, other.as_str())).unwrap();
    project.imagegen(&["render"]).assert().success();
    let refused = project.build(&["--only", &runtime]);
    assert_code(&refused, 1);
    let said = text(&refused);
    let log = std::fs::read_to_string(
        project
            .path()
            .join(".imagegen/logs")
            .join(format!("{runtime}.log")),
    )
    .unwrap_or_default();
    let expected = format!("base image {BASE_IMAGE} is image ID {id} in the Docker daemon, but images/bases.lock pins {other}");
    assert!(
        said.contains(&expected) || log.contains(&expected),
        "{said}\n{log}"
    );
}

/// Offline: once `images/bases.lock` exists, every base must be in it; a pin written by hand is
/// what `FROM` names, and `render --check` fails while the Dockerfiles still name the tag alone.
#[test]
fn render_check_refuses_an_unpinned_base_and_a_pin_the_dockerfiles_do_not_name() {
    let dir = tempfile::tempdir().unwrap();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/basic.yaml");
    std::fs::copy(fixture, dir.path().join("matrix.yaml")).unwrap();
    let imagegen = |args: &[&str]| {
        let mut command = assert_cmd::Command::cargo_bin("imagegen").unwrap();
        command.current_dir(dir.path()).args(args);
        command.output().unwrap()
    };
    assert_code(&imagegen(&["render"]), 0);
    let pins_path = dir.path().join("images/bases.lock");
    std::fs::write(
        &pins_path,
        "{\"format\": \"imagegen-bases-v1\", \"bases\": {}}\n",
    )
    .unwrap();
    let unpinned = imagegen(&["render", "--check"]);
    assert_code(&unpinned, 1);
    let said = text(&unpinned);
    assert!(
        said.contains("base: base nvidia/cuda:12.6.3-base-ubuntu24.04 is not pinned in bases.lock"),
        "{said}"
    );
    assert!(said.contains("run `imagegen lock --bases`"), "{said}");

    let digest = Digest::of(b"a base");
    std::fs::write(
        &pins_path,
        format!("{{\"format\": \"imagegen-bases-v1\", \"bases\": {{\"nvidia/cuda:12.6.3-base-ubuntu24.04\": {{\"source\": \"registry\", \"digest\": \"{digest}\"}}}}}}\n"),
    )
    .unwrap();
    let stale = imagegen(&["render", "--check"]);
    assert_code(&stale, 1);
    assert!(
        text(&stale).contains(&format!(
            "+FROM nvidia/cuda:12.6.3-base-ubuntu24.04@{digest}"
        )),
        "{}",
        text(&stale)
    );
    assert_code(&imagegen(&["render"]), 0);
    let checked = text(&imagegen(&["render", "--check"]));
    assert!(
        !checked.contains("base nvidia/cuda:12.6.3-base-ubuntu24.04 ")
            && !checked.contains("+FROM nvidia/cuda:12.6.3-base-ubuntu24.04"),
        "{checked}"
    );
    assert!(
        checked.contains("base: base nvidia/cuda:12.8.1-base-ubuntu24.04 is not pinned"),
        "the other bases are still unpinned: {checked}"
    );

    // A pins file that does not parse is one error naming it.
    std::fs::write(
        &pins_path,
        "{\"format\": \"imagegen-bases-v0\", \"bases\": {}}\n",
    )
    .unwrap();
    let broken = imagegen(&["render", "--check"]);
    assert_code(&broken, 2);
    assert!(
        text(&broken).contains("images/bases.lock: format \"imagegen-bases-v0\""),
        "{}",
        text(&broken)
    );
}
