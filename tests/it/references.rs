//! Image references: what imagegen refuses at `matrix.yaml:line` is what Docker or a registry
//! would refuse later, and what it lets through they take (issue 19, holes 3 and 10). Each
//! case is checked on both sides: `imagegen resolve` on a project, and the same reference given
//! to the real daemon (`docker tag`) and, where the daemon takes it, to a registry on
//! 127.0.0.1 (`docker push`). Cost: a few seconds (the 2 MB test base, tagged and pushed once).

use std::process::{Command, Output};

use crate::support::project::text;
use crate::support::{engine, unique_name, Registry};

/// The full tag the matrix below gives its one image (41 characters).
const TAG: &str = "2.8.0-cuda12.8-cudnn9-runtime-ubuntu24.04";

fn matrix(registry: &str, repository: &str, full: &str) -> String {
    format!(
        "registry: {registry}\nrepository: {repository}\ntorch: [\"2.8.0\"]\ncuda: [\"12.8\"]\nos: [ubuntu24.04]\nvariants: [runtime]\ntags:\n  full: \"{full}\"\n"
    )
}

const FULL: &str = "{torch}-cuda{cuda}-cudnn{cudnn_major}-{variant}-{os}";

fn resolve(matrix: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("matrix.yaml"), matrix).unwrap();
    assert_cmd::Command::cargo_bin("imagegen")
        .unwrap()
        .current_dir(dir.path())
        .args(["resolve", "--format", "json"])
        .output()
        .unwrap()
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().unwrap()
}

/// How the Docker side refuses a reference.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Refused {
    /// `docker tag` refuses it (the daemon's reference grammar).
    ByTag,
    /// `docker tag` takes it; `docker push` fails on it.
    ByPush,
}

/// What Docker does with `reference`: `None` when it tags and pushes it, else how it refused.
/// Whatever it tagged is removed again.
fn docker_verdict(base: &str, reference: &str) -> Option<Refused> {
    let tagged = docker(&["tag", base, reference]);
    if !tagged.status.success() {
        return Some(Refused::ByTag);
    }
    let pushed = docker(&["push", reference]);
    let _ = docker(&["rmi", reference]);
    (!pushed.status.success()).then_some(Refused::ByPush)
}

#[tokio::test(flavor = "multi_thread")]
async fn what_imagegen_refuses_docker_or_the_registry_refuses_and_what_it_takes_they_take() {
    let engine = engine().await;
    let base = crate::support::base_image(&engine).await;
    let registry = Registry::start();
    let host = registry.host().to_string();
    let repository = unique_name("imagegen-test/refs");
    // Docker's 255 characters are the image name's, registry included.
    let name_of = |length: usize| {
        let path = format!("{repository}/");
        format!("{path}{}", "p".repeat(length - host.len() - 1 - path.len()))
    };
    let long_repository = name_of(256);
    let x = |n: usize| "x".repeat(n);

    // (what, matrix, where imagegen says it, the reference Docker is given, how Docker refuses)
    let refused = [
        (
            "a tag of 129 characters",
            matrix(&host, &repository, &format!("{}{FULL}", x(88))),
            "matrix.yaml:8",
            format!("{host}/{repository}:{}{TAG}", x(88)),
            Refused::ByTag,
        ),
        (
            "a tag starting with a dot",
            matrix(&host, &repository, &format!(".{FULL}")),
            "matrix.yaml:8",
            format!("{host}/{repository}:.{TAG}"),
            Refused::ByTag,
        ),
        (
            "a tag starting with a dash",
            matrix(&host, &repository, &format!("-{FULL}")),
            "matrix.yaml:8",
            format!("{host}/{repository}:-{TAG}"),
            Refused::ByTag,
        ),
        (
            "a repository path with ..",
            matrix(&host, &format!("{repository}/../x"), FULL),
            "matrix.yaml:2",
            format!("{host}/{repository}/../x:{TAG}"),
            Refused::ByTag,
        ),
        (
            "an image name (registry/repository) over 255 characters",
            matrix(&host, &long_repository, FULL),
            "matrix.yaml:2",
            format!("{host}/{long_repository}:{TAG}"),
            Refused::ByTag,
        ),
        (
            "a registry port over 65535",
            matrix("127.0.0.1:70000", &repository, FULL),
            "matrix.yaml:1",
            format!("127.0.0.1:70000/{repository}:{TAG}"),
            Refused::ByPush,
        ),
    ];
    let mut seen = 0;
    for (what, matrix, place, reference, how) in &refused {
        let resolved = resolve(matrix);
        assert_eq!(
            resolved.status.code(),
            Some(2),
            "{what}: imagegen must refuse it:\n{}",
            text(&resolved)
        );
        assert!(
            text(&resolved).contains(place),
            "{what}: the refusal names {place}:\n{}",
            text(&resolved)
        );
        assert_eq!(
            docker_verdict(base, reference),
            Some(*how),
            "{what}: Docker must refuse {reference:.80} too"
        );
        seen += 1;
    }
    assert_eq!(seen, refused.len());

    // A full tag that is also the name of an alias (`{torch_series}` makes it the OS-suffixed
    // alias): Docker takes it (it is a valid tag), imagegen refuses it at tags.full, so that a
    // rollback can never move an immutable full tag.
    let aliased = resolve(&matrix(
        &host,
        &repository,
        "{torch_series}-cuda{cuda}-{variant}-{os}",
    ));
    assert_eq!(aliased.status.code(), Some(2), "{}", text(&aliased));
    assert!(
        text(&aliased).contains("is also the name of an alias"),
        "{}",
        text(&aliased)
    );

    // At the limits imagegen takes them, and so do the daemon and the registry: a tag of 128
    // characters, an image name of 255, and the highest port (nothing listens there: only the
    // reference grammar is asked, by `docker tag`).
    let longest_tag = format!("{}{TAG}", x(87));
    assert_eq!(longest_tag.len(), 128);
    let taken = resolve(&matrix(&host, &repository, &format!("{}{FULL}", x(87))));
    assert_eq!(taken.status.code(), Some(0), "{}", text(&taken));
    let images: serde_json::Value = serde_json::from_slice(&taken.stdout).unwrap();
    assert_eq!(
        images["images"][0]["tag"].as_str(),
        Some(longest_tag.as_str()),
        "{images:#}"
    );
    assert_eq!(
        docker_verdict(base, &format!("{host}/{repository}:{longest_tag}")),
        None,
        "the daemon and the registry take a 128-character tag"
    );
    let repository_255 = name_of(255);
    assert_eq!(host.len() + 1 + repository_255.len(), 255);
    let taken = resolve(&matrix(&host, &repository_255, FULL));
    assert_eq!(taken.status.code(), Some(0), "{}", text(&taken));
    assert_eq!(
        docker_verdict(base, &format!("{host}/{repository_255}:{TAG}")),
        None,
        "the daemon and the registry take a 255-character image name"
    );
    let taken = resolve(&matrix("127.0.0.1:65535", &repository, FULL));
    assert_eq!(taken.status.code(), Some(0), "{}", text(&taken));
    let highest_port = format!("127.0.0.1:65535/{repository}:{TAG}");
    assert!(docker(&["tag", base, &highest_port]).status.success());
    let _ = docker(&["rmi", &highest_port]);
}
