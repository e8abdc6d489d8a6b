//! Table of resolver cases, including every example of the "imagegen core" issue.

use super::*;
use crate::model::matrix::Matrix;
use crate::model::version::DriverVersion;
use crate::resolve::driver::require_cuda;

fn matrix(extra: &str) -> Matrix {
    Matrix::parse(
        &format!("registry: ghcr.io\nrepository: acme/pytorch\n{extra}"),
        "matrix.yaml",
    )
    .unwrap()
}

fn run(extra: &str) -> Resolution {
    resolve(
        &matrix(extra),
        &Knowledge::test_fixture(),
        &ResolveOptions::default(),
    )
}

fn run_with(extra: &str, options: ResolveOptions) -> Resolution {
    resolve(&matrix(extra), &Knowledge::test_fixture(), &options)
}

/// Resolves against the embedded knowledge (the audited data), not the frozen test subset.
fn run_embedded(extra: &str) -> Resolution {
    resolve(
        &matrix(extra),
        &Knowledge::embedded(),
        &ResolveOptions::default(),
    )
}

fn one_reason(resolution: &Resolution) -> String {
    assert_eq!(resolution.rejected.len(), 1, "{:#?}", resolution.rejected);
    resolution.rejected[0].reason.clone()
}

#[test]
fn torch_2_7_0_with_cuda_12_4_names_the_published_variants() {
    let resolution =
        run("torch: [\"2.7.0\"]\ncuda: [\"12.4\"]\nos: [ubuntu22.04]\nvariants: [runtime]\n");
    assert!(resolution.images.is_empty());
    let reason = one_reason(&resolution);
    assert!(
        reason
            .starts_with("torch 2.7.0 has no CUDA 12.4 wheels (it publishes cu118, cu126, cu128)"),
        "{reason}"
    );
    assert!(
        reason.contains("CUDA 12.4 wheels exist for torch 2.4, 2.6"),
        "{reason}"
    );
}

#[test]
fn a_good_cell_resolves_every_field() {
    let resolution =
        run("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
    assert!(resolution.rejected.is_empty(), "{:?}", resolution.rejected);
    let image = &resolution.images[0];
    assert_eq!(image.tag, "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04");
    assert_eq!(
        image.torch, "2.7.1",
        "a series resolves to its newest patch"
    );
    assert_eq!(image.torchvision, "0.22.1");
    assert_eq!(image.torchaudio.as_deref(), Some("2.7.1"));
    assert_eq!(image.cudnn, "9.5.1.17");
    assert_eq!(image.cuda_full, "12.6.3");
    assert_eq!(image.python, "3.12");
    assert_eq!(image.base_image, "nvidia/cuda:12.6.3-base-ubuntu24.04");
    assert_eq!(image.driver_min, "560.35.05");
    assert_eq!(image.driver_min_compat, "525");
    assert_eq!(image.wheel_index, "https://download.pytorch.org/whl/cu126");
    assert_eq!(image.selftest, "gpu-selftest-cu12");
    assert_eq!(
        image.aliases,
        vec![
            "2.7-cuda12.6-runtime",
            "2.7-cuda12.6-runtime-ubuntu24.04",
            "latest"
        ]
    );
    assert!(image.fingerprint.as_str().starts_with("sha256:"));
}

#[test]
fn require_cuda_matches_nvidia_strings_exactly() {
    let knowledge = Knowledge::test_fixture();
    let check = |cuda: &str, expected: &str| {
        let release = knowledge.cuda_release_for(&cuda.into()).unwrap();
        let mm = crate::model::version::DottedVersion::parse_kind(cuda, "", 3)
            .unwrap()
            .major_minor();
        assert_eq!(
            require_cuda(
                &mm,
                release,
                crate::model::knowledge::PLATFORM_AMD64,
                true,
                &knowledge
            ),
            expected,
            "CUDA {cuda}"
        );
    };
    check("11.8.0", "cuda>=11.8 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=geforce,driver>=470,driver<471 brand=geforcertx,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 brand=titan,driver>=470,driver<471 brand=titanrtx,driver>=470,driver<471");
    check("12.6.3", "cuda>=12.6 brand=unknown,driver>=470,driver<471 brand=grid,driver>=470,driver<471 brand=tesla,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=vapps,driver>=470,driver<471 brand=vpc,driver>=470,driver<471 brand=vcs,driver>=470,driver<471 brand=vws,driver>=470,driver<471 brand=cloudgaming,driver>=470,driver<471 brand=unknown,driver>=535,driver<536 brand=grid,driver>=535,driver<536 brand=tesla,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536 brand=quadro,driver>=535,driver<536 brand=quadrortx,driver>=535,driver<536 brand=nvidiartx,driver>=535,driver<536 brand=vapps,driver>=535,driver<536 brand=vpc,driver>=535,driver<536 brand=vcs,driver>=535,driver<536 brand=vws,driver>=535,driver<536 brand=cloudgaming,driver>=535,driver<536 brand=unknown,driver>=550,driver<551 brand=grid,driver>=550,driver<551 brand=tesla,driver>=550,driver<551 brand=nvidia,driver>=550,driver<551 brand=quadro,driver>=550,driver<551 brand=quadrortx,driver>=550,driver<551 brand=nvidiartx,driver>=550,driver<551 brand=vapps,driver>=550,driver<551 brand=vpc,driver>=550,driver<551 brand=vcs,driver>=550,driver<551 brand=vws,driver>=550,driver<551 brand=cloudgaming,driver>=550,driver<551");
    check("13.0.0", "cuda>=13.0 brand=unknown,driver>=535,driver<536 brand=grid,driver>=535,driver<536 brand=tesla,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536 brand=quadro,driver>=535,driver<536 brand=quadrortx,driver>=535,driver<536 brand=nvidiartx,driver>=535,driver<536 brand=vapps,driver>=535,driver<536 brand=vpc,driver>=535,driver<536 brand=vcs,driver>=535,driver<536 brand=vws,driver>=535,driver<536 brand=cloudgaming,driver>=535,driver<536 brand=unknown,driver>=550,driver<551 brand=grid,driver>=550,driver<551 brand=tesla,driver>=550,driver<551 brand=nvidia,driver>=550,driver<551 brand=quadro,driver>=550,driver<551 brand=quadrortx,driver>=550,driver<551 brand=nvidiartx,driver>=550,driver<551 brand=vapps,driver>=550,driver<551 brand=vpc,driver>=550,driver<551 brand=vcs,driver>=550,driver<551 brand=vws,driver>=550,driver<551 brand=cloudgaming,driver>=550,driver<551 brand=unknown,driver>=565,driver<566 brand=grid,driver>=565,driver<566 brand=tesla,driver>=565,driver<566 brand=nvidia,driver>=565,driver<566 brand=quadro,driver>=565,driver<566 brand=quadrortx,driver>=565,driver<566 brand=nvidiartx,driver>=565,driver<566 brand=vapps,driver>=565,driver<566 brand=vpc,driver>=565,driver<566 brand=vcs,driver>=565,driver<566 brand=vws,driver>=565,driver<566 brand=cloudgaming,driver>=565,driver<566 brand=unknown,driver>=570,driver<571 brand=grid,driver>=570,driver<571 brand=tesla,driver>=570,driver<571 brand=nvidia,driver>=570,driver<571 brand=quadro,driver>=570,driver<571 brand=quadrortx,driver>=570,driver<571 brand=nvidiartx,driver>=570,driver<571 brand=vapps,driver>=570,driver<571 brand=vpc,driver>=570,driver<571 brand=vcs,driver>=570,driver<571 brand=vws,driver>=570,driver<571 brand=cloudgaming,driver>=570,driver<571 brand=unknown,driver>=575,driver<576 brand=grid,driver>=575,driver<576 brand=tesla,driver>=575,driver<576 brand=nvidia,driver>=575,driver<576 brand=quadro,driver>=575,driver<576 brand=quadrortx,driver>=575,driver<576 brand=nvidiartx,driver>=575,driver<576 brand=vapps,driver>=575,driver<576 brand=vpc,driver>=575,driver<576 brand=vcs,driver>=575,driver<576 brand=vws,driver>=575,driver<576 brand=cloudgaming,driver>=575,driver<576");
    check("12.1.1", "cuda>=12.1 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=geforce,driver>=470,driver<471 brand=geforcertx,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 brand=titan,driver>=470,driver<471 brand=titanrtx,driver>=470,driver<471 brand=tesla,driver>=525,driver<526 brand=unknown,driver>=525,driver<526 brand=nvidia,driver>=525,driver<526 brand=nvidiartx,driver>=525,driver<526 brand=geforce,driver>=525,driver<526 brand=geforcertx,driver>=525,driver<526 brand=quadro,driver>=525,driver<526 brand=quadrortx,driver>=525,driver<526 brand=titan,driver>=525,driver<526 brand=titanrtx,driver>=525,driver<526");
    check(
        "11.1.1",
        "cuda>=11.1 brand=tesla,driver>=418,driver<419 brand=tesla,driver>=450,driver<451",
    );
    // The arm64 stage of 11.8.0 whitelists no older branch.
    assert_eq!(
        require_cuda(
            "11.8",
            knowledge.cuda_release_for(&"11.8.0".into()).unwrap(),
            crate::model::knowledge::PLATFORM_ARM64,
            true,
            &knowledge
        ),
        "cuda>=11.8"
    );
    // Without NVIDIA's cuda-compat libraries in the image, no branch is whitelisted.
    assert_eq!(
        require_cuda(
            "13.0",
            knowledge.cuda_release_for(&"13.0.0".into()).unwrap(),
            crate::model::knowledge::PLATFORM_AMD64,
            false,
            &knowledge
        ),
        "cuda>=13.0"
    );
}

#[test]
fn no_ubuntu_24_04_base_for_cuda_12_4() {
    let reason = one_reason(&run(
        "torch: [\"2.6\"]\ncuda: [\"12.4\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
    ));
    assert!(
        reason.starts_with(
            "nvidia/cuda 12.4.1 has no ubuntu24.04 images (it has ubuntu20.04, ubuntu22.04)"
        ),
        "{reason}"
    );
    assert!(reason.contains("CUDA 12.6 with torch 2.6"), "{reason}");
}

#[test]
fn python_ranges_are_enforced_through_the_os_python() {
    let reason = one_reason(&run(
        "torch: [\"2.1\"]\ncuda: [\"12.1\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
    ));
    assert!(
        reason.starts_with("nvidia/cuda 12.1.1 has no ubuntu24.04 images"),
        "{reason}"
    );
    let reason = one_reason(&run("torch: [\"2.1\"]\ncuda: [\"12.1\"]\nos: [ubuntu22.04]\npython: [\"3.12\"]\nvariants: [runtime]\n"));
    assert!(reason.contains("ubuntu22.04 ships Python 3.10"), "{reason}");
    let reason = one_reason(&run(
        "torch: [\"2.9\"]\ncuda: [\"12.8\"]\nos: [ubuntu20.04]\nvariants: [runtime]\n",
    ));
    assert!(reason.contains("no Python 3.8 wheels"), "{reason}");
    let reason = one_reason(&run("torch: [\"2.7\"]\ncuda: [\"12.6\"]\npython: [\"3.11\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n"));
    assert!(reason.contains("ubuntu24.04 ships Python 3.12"), "{reason}");
    let reason = one_reason(&run("torch: [\"2.7\"]\ncuda: [\"12.6\"]\npython: [\"3.10\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n"));
    assert!(
        reason.contains("for Python 3.10 use ubuntu22.04"),
        "{reason}"
    );
}

#[test]
fn a_cuda_release_without_images_is_named() {
    let reason = one_reason(&run(
        "torch: [\"2.9\"]\ncuda: [\"13.0.1\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
    ));
    assert_eq!(reason, "nvidia/cuda publishes no images of CUDA 13.0.1 in the knowledge (CUDA 13.0 images: 13.0.0)");
}

#[test]
fn cuda_13_has_no_ubuntu_20_04() {
    let reason = one_reason(&run(
        "torch: [\"2.9\"]\ncuda: [\"13.0\"]\nos: [ubuntu20.04]\nvariants: [runtime]\n",
    ));
    assert!(
        reason.contains("nvidia/cuda 13.0.0 has no ubuntu20.04 images"),
        "{reason}"
    );
}

#[test]
fn cudnn_must_be_the_one_torch_bundles() {
    let ok = run("torch: [\"2.7\"]\ncuda: [\"12.6\"]\ncudnn: [\"9\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
    assert_eq!(ok.images.len(), 1);
    let reason = one_reason(&run("torch: [\"2.7\"]\ncuda: [\"12.6\"]\ncudnn: [\"8\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n"));
    assert!(
        reason.starts_with("torch 2.7.1+cu126 bundles cuDNN 9.5.1.17, not 8"),
        "{reason}"
    );
    assert!(
        reason.contains("cuDNN 8 comes with torch 2.0+cu117"),
        "{reason}"
    );
}

#[test]
fn unknown_torch_and_unknown_patch() {
    let reason = one_reason(&run(
        "torch: [\"3.1\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
    ));
    assert!(
        reason.contains("torch 3.1 is not in the compatibility knowledge"),
        "{reason}"
    );
    let reason = one_reason(&run(
        "torch: [\"2.7.5\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
    ));
    assert!(reason.contains("torch 2.7 has 2.7.0, 2.7.1"), "{reason}");
}

#[test]
fn unverified_entries_need_an_explicit_opt_in() {
    let reason = one_reason(&run(
        "torch: [\"2.13\"]\ncuda: [\"13.2\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
    ));
    assert!(reason.contains("CUDA 13.2.1 is UNVERIFIED"), "{reason}");
    let allowed = run("torch: [\"2.13\"]\ncuda: [\"13.2\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nallow_unverified: true\n");
    assert_eq!(allowed.images.len(), 1);
    assert_eq!(allowed.images[0].unverified.len(), 1);
    let reason = one_reason(&run(
        "torch: [\"2.11\"]\ncuda: [\"12.9\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
    ));
    assert!(reason.contains("UNVERIFIED"), "{reason}");
}

#[test]
fn driver_filter_moves_images_to_rejected_naming_the_minimum() {
    let matrix = "torch: [\"2.7\"]\ncuda: [\"11.8\", \"12.6\", \"12.8\"]\nos: [ubuntu22.04]\nvariants: [runtime]\n";
    let options = ResolveOptions {
        driver: Some(DriverVersion::parse("535.104.05").unwrap()),
        ..Default::default()
    };
    let resolution = run_with(matrix, options);
    assert_eq!(
        resolution
            .images
            .iter()
            .map(|i| i.cuda.as_str())
            .collect::<Vec<_>>(),
        vec!["11.8"]
    );
    assert_eq!(resolution.rejected.len(), 2);
    let reason = &resolution.rejected[0].reason;
    assert!(reason.starts_with("needs NVIDIA driver ≥ 560.35.05 (CUDA 12.6.3 toolkit driver); driver 535.104.05 is older and runs CUDA ≤ 12.2 images"), "{reason}");
    assert!(reason.contains("pass --forward-compat"), "{reason}");

    let forward = ResolveOptions {
        driver: Some(DriverVersion::parse("535.104.05").unwrap()),
        forward_compat: true,
        ..Default::default()
    };
    let resolution = run_with(matrix, forward);
    assert_eq!(
        resolution.images.len(),
        3,
        "R535 is whitelisted for 12.6.3 and 12.8.1: {:?}",
        resolution.rejected
    );
}

#[test]
fn driver_versions_compare_numerically_in_the_filter() {
    let matrix = "torch: [\"2.7\"]\ncuda: [\"12.8\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n";
    let old = ResolveOptions {
        driver: Some(DriverVersion::parse("570.26").unwrap()),
        ..Default::default()
    };
    assert!(
        run_with(matrix, old).images.is_empty(),
        "570.26 < 570.124.06"
    );
    let new = ResolveOptions {
        driver: Some(DriverVersion::parse("570.124.06").unwrap()),
        ..Default::default()
    };
    assert_eq!(run_with(matrix, new).images.len(), 1);
}

#[test]
fn include_and_exclude() {
    let resolution = run(
        "torch: [\"2.7\", \"2.8\"]\ncuda: [\"12.6\", \"12.8\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n\
         exclude:\n  - {torch: \"2.7\", cuda: \"12.8\"}\n\
         include:\n  - {torch: \"2.7.0\", cuda: \"12.6\", os: ubuntu22.04}\n  - {torch: \"2.7.0\", cuda: \"12.4\", os: ubuntu22.04, variants: [runtime]}\n",
    );
    let tags: Vec<&str> = resolution.images.iter().map(|i| i.tag.as_str()).collect();
    assert_eq!(
        tags,
        vec![
            "2.7.0-cuda12.6-cudnn9-runtime-ubuntu22.04",
            "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04",
            "2.8.0-cuda12.6-cudnn9-runtime-ubuntu24.04",
            "2.8.0-cuda12.8-cudnn9-runtime-ubuntu24.04",
        ]
    );
    assert_eq!(resolution.rejected.len(), 1);
    assert_eq!(resolution.rejected[0].origin, "include[1]");
}

#[test]
fn devel_builds_on_its_runtime_and_its_fingerprint_covers_it() {
    let resolution =
        run("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [devel]\n");
    assert_eq!(resolution.images.len(), 2, "the runtime is implied");
    assert!(resolution.warnings[0].contains("runtime image is added"));
    let (runtime, devel) = (&resolution.images[0], &resolution.images[1]);
    assert_eq!(runtime.variant, Variant::Runtime);
    assert_eq!(devel.parent.as_deref(), Some(runtime.name.as_str()));
    assert_eq!(
        devel.base_image,
        format!("ghcr.io/acme/pytorch:{}", runtime.tag)
    );
    assert_ne!(devel.fingerprint, runtime.fingerprint);
}

#[test]
fn fingerprints_are_stable_and_sensitive() {
    let text = "torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n";
    let first = run(text);
    let second = run(text);
    assert_eq!(first.images, second.images);
    let mirrored = run(&format!(
        "{text}mirrors:\n  pip_index: https://pypi.internal.example/simple\n"
    ));
    assert_ne!(first.images[0].fingerprint, mirrored.images[0].fingerprint);
    let templated = run_with(
        text,
        ResolveOptions {
            template_digest: "other".into(),
            ..Default::default()
        },
    );
    assert_ne!(first.images[0].fingerprint, templated.images[0].fingerprint);
    // A parent change reaches the devel image.
    assert_ne!(first.images[1].fingerprint, mirrored.images[1].fingerprint);
}

#[test]
fn colliding_full_tags_are_rejected() {
    let resolution = run("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu22.04, ubuntu24.04]\nvariants: [runtime]\ntags:\n  full: \"{torch}-cuda{cuda}-{variant}\"\n");
    assert!(resolution.images.is_empty());
    assert_eq!(resolution.rejected.len(), 2);
    assert!(resolution.rejected[0]
        .reason
        .contains("share the full tag 2.7.1-cuda12.6-runtime"));
}

#[test]
fn a_full_tag_that_is_an_alias_name_is_rejected_at_tags_full() {
    // `{torch_series}` in the full tag makes it the OS-suffixed alias of the same image.
    let resolution = run("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu22.04, ubuntu24.04]\nvariants: [runtime]\ntags:\n  full: \"{torch_series}-cuda{cuda}-{variant}-{os}\"\n");
    assert!(resolution.images.is_empty(), "{:?}", resolution.images);
    assert_eq!(resolution.rejected.len(), 2);
    for rejection in &resolution.rejected {
        assert!(
            rejection.reason.contains("is also the name of an alias")
                && rejection.location.as_deref() == Some("matrix.yaml:8"),
            "{rejection:?}"
        );
    }
    assert!(resolution.rejected[0]
        .reason
        .contains("its full tag 2.7-cuda12.6-runtime-ubuntu22.04 is also the name of an alias (of 2.7-cuda12.6-runtime-ubuntu22.04)"));
    // With the full release in the full tag, full tags and aliases differ: nothing is rejected.
    let resolution = run("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu22.04, ubuntu24.04]\nvariants: [runtime]\ntags:\n  full: \"{torch}-cuda{cuda}-{variant}-{os}\"\n");
    assert_eq!(resolution.images.len(), 2);
    assert!(resolution.rejected.is_empty());
}

#[test]
fn tags_docker_would_refuse_are_rejected_at_tags_full() {
    let long = "x".repeat(120);
    let resolution = run(&format!("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\ntags:\n  full: \"{long}{{torch}}-{{variant}}\"\n"));
    assert!(resolution.images.is_empty());
    assert_eq!(resolution.rejected.len(), 1);
    let rejection = &resolution.rejected[0];
    assert!(
        rejection
            .reason
            .contains("is 133 characters long; Docker allows at most 128")
            && rejection.location.as_deref() == Some("matrix.yaml:8"),
        "{rejection:?}"
    );
    let resolution = run("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\ntags:\n  full: \"{torch}-{variant}\"\n");
    assert_eq!(resolution.images.len(), 1, "{:?}", resolution.rejected);
}

#[test]
fn mirrors_and_base_overrides_reach_the_spec() {
    let resolution = run(
        "torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n\
         mirrors:\n  torch_index: https://mirror.example/pytorch/whl/\n  base_registry: registry.example:5000/dockerhub\n",
    );
    let image = &resolution.images[0];
    assert_eq!(
        image.wheel_index,
        "https://mirror.example/pytorch/whl/cu126"
    );
    assert_eq!(
        image.base_image,
        "registry.example:5000/dockerhub/nvidia/cuda:12.6.3-base-ubuntu24.04"
    );
}

#[test]
fn platforms_build_per_platform_images_under_one_index() {
    let resolution = run("torch: [\"2.13\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime, devel]\nplatforms: [linux/amd64, linux/arm64]\n");
    assert!(resolution.rejected.is_empty(), "{:?}", resolution.rejected);
    let tags: Vec<(&str, &str)> = resolution
        .images
        .iter()
        .map(|i| (i.tag.as_str(), i.platform.as_str()))
        .collect();
    assert_eq!(
        tags,
        vec![
            (
                "2.13.0-cuda12.6-cudnn9-runtime-ubuntu24.04-amd64",
                "linux/amd64"
            ),
            (
                "2.13.0-cuda12.6-cudnn9-runtime-ubuntu24.04-arm64",
                "linux/arm64"
            ),
            (
                "2.13.0-cuda12.6-cudnn9-devel-ubuntu24.04-amd64",
                "linux/amd64"
            ),
            (
                "2.13.0-cuda12.6-cudnn9-devel-ubuntu24.04-arm64",
                "linux/arm64"
            ),
        ]
    );
    let arm_runtime = &resolution.images[1];
    assert_eq!(
        arm_runtime.index.as_deref(),
        Some("2.13.0-cuda12.6-cudnn9-runtime-ubuntu24.04")
    );
    assert_eq!(
        arm_runtime.archs,
        vec!["8.0", "9.0"],
        "aarch64 wheels compile fewer architectures"
    );
    assert_eq!(arm_runtime.selftest, "gpu-selftest-cu12-arm64");
    assert_eq!(
        arm_runtime.aliases, resolution.images[0].aliases,
        "aliases belong to the index"
    );
    assert!(arm_runtime
        .aliases
        .contains(&"2.13-cuda12.6-runtime".to_string()));
    let arm_devel = &resolution.images[3];
    assert_eq!(
        arm_devel.parent.as_deref(),
        Some("2.13.0-cuda12.6-cudnn9-runtime-ubuntu24.04-arm64"),
        "devel builds on the runtime of its own platform"
    );
    assert_ne!(resolution.images[0].fingerprint, arm_runtime.fingerprint);
}

#[test]
fn impossible_platform_cells_say_why() {
    let reason = one_reason(&run("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nplatforms: [linux/arm64]\n"));
    assert_eq!(reason, "torch 2.7.1 publishes no linux/arm64 CUDA 12.6 wheels in the knowledge (linux/arm64 CUDA wheels are recorded for torch 2.7, 2.8, 2.9, 2.10, 2.11, 2.12, 2.13)");
    let knowledge_text = crate::model::knowledge::TEST_FIXTURE.replace(
        "{version: \"12.6.3\", driver_min: \"560.35.05\", ubuntu: [\"20.04\", \"22.04\", \"24.04\"], cudnn_tag: \"cudnn\", brands: current, platforms: {linux/amd64: [470, 535, 550], linux/arm64: [470, 535, 550]},",
        "{version: \"12.6.3\", driver_min: \"560.35.05\", ubuntu: [\"20.04\", \"22.04\", \"24.04\"], cudnn_tag: \"cudnn\", brands: current, platforms: {linux/amd64: [470, 535, 550]},",
    );
    let knowledge = Knowledge::parse(&knowledge_text, "k.yaml").unwrap();
    let resolution = resolve(&matrix("torch: [\"2.13\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nplatforms: [linux/arm64]\n"), &knowledge, &ResolveOptions::default());
    assert_eq!(
        one_reason(&resolution),
        "nvidia/cuda 12.6.3 has no linux/arm64 images (it has linux/amd64)"
    );
    let single =
        run("torch: [\"2.13\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
    assert_eq!(
        single.images[0].tag, "2.13.0-cuda12.6-cudnn9-runtime-ubuntu24.04",
        "amd64 alone keeps plain tags"
    );
    assert!(single.images[0].index.is_none());
}

#[test]
fn base_images_per_os_or_pattern_with_the_cells_fields() {
    let resolution = run("torch: [\"2.13\"]\ncuda: [\"12.6\", \"13.0\"]\nos: [ubuntu22.04, ubuntu24.04]\nvariants: [runtime]\nplatforms: [linux/amd64, linux/arm64]\nbase_images:\n  runtime: {ubuntu22.04: \"registry.example/cuda:{cuda_full}-{arch}-jammy\"}\n");
    assert!(resolution.rejected.is_empty(), "{:?}", resolution.rejected);
    let bases: BTreeSet<(&str, &str)> = resolution
        .images
        .iter()
        .map(|i| (i.name.as_str(), i.base_image.as_str()))
        .collect();
    assert!(bases.contains(&(
        "2.13.0-cuda13.0-cudnn9-runtime-ubuntu22.04-arm64",
        "registry.example/cuda:13.0.0-arm64-jammy"
    )));
    assert!(bases.contains(&(
        "2.13.0-cuda12.6-cudnn9-runtime-ubuntu22.04-amd64",
        "registry.example/cuda:12.6.3-amd64-jammy"
    )));
    assert!(
        bases.contains(&(
            "2.13.0-cuda12.6-cudnn9-runtime-ubuntu24.04-amd64",
            "nvidia/cuda:12.6.3-base-ubuntu24.04"
        )),
        "an OS the map leaves out builds on nvidia/cuda: {bases:?}"
    );
    // One pattern for every cell; a plain reference stays one base for all (as before).
    let pattern = run("torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu22.04, ubuntu24.04]\nvariants: [runtime]\nbase_images:\n  runtime: \"mirror.example/cuda:{cuda}-{os}\"\n");
    let bases: Vec<&str> = pattern
        .images
        .iter()
        .map(|i| i.base_image.as_str())
        .collect();
    assert_eq!(
        bases,
        [
            "mirror.example/cuda:13.0-ubuntu22.04",
            "mirror.example/cuda:13.0-ubuntu24.04"
        ]
    );
    // The Python each image is checked against follows its OS, not one base for all.
    let pythons: Vec<&str> = pattern.images.iter().map(|i| i.python.as_str()).collect();
    assert_eq!(pythons, ["3.10", "3.12"]);
}

#[test]
fn debian_cells_need_a_base_and_get_their_python_and_glibc() {
    let reason = one_reason(&run(
        "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [debian12]\nvariants: [runtime]\n",
    ));
    assert!(
        reason.starts_with("nvidia/cuda publishes no debian12 images (only Ubuntu)"),
        "{reason}"
    );
    assert!(
        reason.contains("base_images: {runtime: {debian12:"),
        "{reason}"
    );
    let resolution = run("torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [debian12]\nvariants: [runtime]\nbase_images:\n  runtime: {debian12: \"local/bookworm:1\"}\n");
    let image = &resolution.images[0];
    assert_eq!(image.python, "3.11");
    assert_eq!(
        image.lock.as_ref().unwrap().python_platform,
        "x86_64-manylinux_2_36"
    );
    assert!(image.apt_rewrites.is_empty());
}

#[test]
fn torch_from_pypi_is_only_the_variant_pypi_carries() {
    let resolution = run("torch: [\"2.13\"]\ncuda: [\"12.6\", \"13.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\ntorch_wheels: pypi\n");
    assert_eq!(resolution.images.len(), 1);
    let image = &resolution.images[0];
    assert_eq!(image.cuda, "13.0");
    assert_eq!(
        image.requirements,
        ["torch==2.13.0", "torchvision==0.28.0", "torchaudio==2.11.0"]
    );
    assert_eq!(image.pip.all(), ["https://pypi.org/simple"]);
    let reason = one_reason(&resolution);
    assert!(
        reason.starts_with("torch 2.13.0 on a plain PyPI index is the CUDA 13.0 build (cu130); its cu126 wheels are only on PyTorch's index"),
        "{reason}"
    );
    assert!(reason.contains("mirrors.torch_index"), "{reason}");
    assert!(
        reason.contains("https://download.pytorch.org/whl"),
        "{reason}"
    );
    // From PyTorch's index the same cell installs the +cu126 builds.
    let pytorch =
        run("torch: [\"2.13\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
    assert_eq!(
        pytorch.images[0].requirements,
        [
            "torch==2.13.0+cu126",
            "torchvision==0.28.0+cu126",
            "torchaudio==2.11.0+cu126"
        ]
    );
}

#[test]
fn devel_toolkits_need_a_base_or_a_cuda_that_serves_them() {
    let reason = one_reason(&run("torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [debian12]\nvariants: [devel]\nbase_images:\n  runtime: \"local/bookworm:1\"\n"));
    assert!(
        reason.contains("cannot install nvcc from NVIDIA's apt repository"),
        "{reason}"
    );
    assert!(reason.contains("devel_toolkit: pypi"), "{reason}");
    let resolution = run("torch: [\"2.13\"]\ncuda: [\"12.6\", \"13.0\"]\nos: [ubuntu24.04]\nvariants: [devel]\ndevel_toolkit: pypi\n");
    let reason = one_reason(&resolution);
    assert!(
        reason.contains("which the knowledge records for CUDA 13 only (CUDA 12's put each component in its own folder)"),
        "{reason}"
    );
    let devel = resolution
        .images
        .iter()
        .find(|i| i.variant == Variant::Devel)
        .unwrap();
    assert_eq!(
        devel.toolkit,
        Some(crate::resolve::image::ToolkitSource::Pypi {
            folder: "cu13".into()
        })
    );
    assert_eq!(
        devel.requirements,
        [
            "cuda-toolkit[cccl,crt,cudart,culibos,nvcc,nvvm,profiler]==13.0.*",
            "ninja"
        ]
    );
}

#[test]
fn locks_are_inputs_of_the_fingerprint_and_devel_locks_follow_their_runtime() {
    let text = "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\ntorch_wheels: pypi\n";
    let missing = run(text);
    let (runtime, devel) = (&missing.images[0], &missing.images[1]);
    let runtime_lock = runtime.lock.as_ref().unwrap();
    assert_eq!(runtime_lock.parent, None);
    assert_eq!(
        runtime_lock.constraints,
        ["cuda-bindings==13.0.*", "nvidia-nvjitlink==13.0.*"]
    );
    let devel_lock = devel.lock.as_ref().unwrap();
    assert_eq!(
        devel_lock.requirements,
        [
            "torch==2.13.0",
            "torchvision==0.28.0",
            "torchaudio==2.11.0",
            "ninja"
        ]
    );
    assert_eq!(devel_lock.parent.as_ref().unwrap().image, runtime.name);
    assert_eq!(devel_lock.parent.as_ref().unwrap().digest, None);

    let mut locks = BTreeMap::new();
    locks.insert(runtime.name.clone(), Digest::of(b"runtime lock"));
    let locked = run_with(
        text,
        ResolveOptions {
            locks: locks.clone(),
            ..Default::default()
        },
    );
    assert_ne!(
        locked.images[0].fingerprint, runtime.fingerprint,
        "the lock is an input"
    );
    assert_eq!(
        locked.images[0].lock, missing.images[0].lock,
        "a runtime lock's inputs do not depend on the lock itself"
    );
    assert_ne!(
        locked.images[1].lock.as_ref().unwrap().inputs_digest,
        devel_lock.inputs_digest,
        "a new runtime lock makes the devel lock stale"
    );
    locks.insert(runtime.name.clone(), Digest::of(b"refreshed runtime lock"));
    let refreshed = run_with(
        text,
        ResolveOptions {
            locks,
            ..Default::default()
        },
    );
    assert_ne!(
        refreshed.images[0].fingerprint,
        locked.images[0].fingerprint
    );
    assert_ne!(
        refreshed.images[1].fingerprint,
        locked.images[1].fingerprint
    );
    // Images of templates without locks have none.
    let unlocked = run_with(
        text,
        ResolveOptions {
            no_lock: true,
            ..Default::default()
        },
    );
    assert!(!unlocked.images.is_empty());
    assert!(unlocked.images.iter().all(|i| i.lock.is_none()));
}

#[test]
fn uncovered_apt_hosts_are_warned_about_once_a_mirror_is_set() {
    let resolution = run("torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nplatforms: [linux/amd64, linux/arm64]\nmirrors:\n  apt: http://m.example/ubuntu\n");
    let warnings = resolution.warnings.join("\n");
    assert!(
        warnings.contains("ports.ubuntu.com/ubuntu-ports has no mirror (set mirrors.apt_ports): the builds of 2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04-arm64 reach it"),
        "{warnings}"
    );
    assert!(warnings.contains("set mirrors.nvidia_apt"), "{warnings}");
    assert!(!warnings.contains("archive.ubuntu.com"), "{warnings}");
    assert!(
        run("torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\n")
            .warnings
            .is_empty()
    );
}

#[test]
fn cells_no_self_test_serves_are_rejected_by_the_shared_rule() {
    let reason = one_reason(&run(
        "torch: [\"2.0\"]\ncuda: [\"11.7\"]\nos: [ubuntu22.04]\nvariants: [runtime]\n",
    ));
    assert!(
        reason.starts_with(
            "torch 2.0.1 CUDA 11.7.1 cannot be self-tested: CUDA 11.7.1 is older than 11.8"
        ),
        "{reason}"
    );
    assert!(
        reason.contains("tested on 11.8 only; cudarc binds 11.4 and later"),
        "{reason}"
    );
    assert!(
        reason.ends_with("use torch 2.0.1 with CUDA 11.8 (cu118) instead"),
        "{reason}"
    );
    let ok = run("torch: [\"2.0\"]\ncuda: [\"11.8\"]\nos: [ubuntu22.04]\nvariants: [runtime]\n");
    assert_eq!(ok.images[0].selftest, "gpu-selftest-cu11");
}

#[test]
fn arm64_cells_of_torch_2_7_to_2_11_resolve() {
    let resolution = run("torch: [\"2.7\", \"2.8\", \"2.9\", \"2.10\", \"2.11\"]\ncuda: [\"12.6\", \"12.8\", \"12.9\", \"13.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nplatforms: [linux/arm64]\n");
    let made: Vec<String> = resolution
        .images
        .iter()
        .map(|i| {
            format!(
                "{}+{}",
                i.torch,
                crate::model::knowledge::wheel_suffix(&i.cuda)
            )
        })
        .collect();
    assert_eq!(
        made,
        [
            "2.7.1+cu128",
            "2.8.0+cu129",
            "2.9.1+cu126",
            "2.9.1+cu128",
            "2.9.1+cu130",
            "2.10.0+cu126",
            "2.10.0+cu128",
            "2.10.0+cu130",
            "2.11.0+cu126",
            "2.11.0+cu128",
            "2.11.0+cu130"
        ]
    );
    let confirmed = resolution.images.last().unwrap();
    assert_eq!(confirmed.archs, ["8.0", "9.0", "10.0", "11.0", "12.0"]);
    assert!(
        confirmed.unverified.is_empty(),
        "{:?}",
        confirmed.unverified
    );
    let unconfirmed = &resolution.images[0];
    assert!(unconfirmed.archs.is_empty());
    assert!(
        unconfirmed.unverified[0].starts_with(
            "torch 2.7.1 cu128 linux/arm64 GPU arch list: published (release channel 12.8-aarch64)"
        ),
        "{:?}",
        unconfirmed.unverified
    );
    assert!(resolution
        .rejected
        .iter()
        .any(|r| r.torch == "2.7" && r.cuda == "12.6"));
}

#[test]
fn latest_follows_the_cuda_variant_pypi_serves() {
    // PyPI's torch 2.1-2.4 wheels are cu121, not the 11.8 RELEASE.md calls stable.
    let resolution = run(
        "torch: [\"2.3\"]\ncuda: [\"11.8\", \"12.1\"]\nos: [ubuntu22.04]\nvariants: [runtime]\n",
    );
    let latest: Vec<&str> = resolution
        .images
        .iter()
        .filter(|i| i.aliases.contains(&"latest".to_string()))
        .map(|i| i.cuda.as_str())
        .collect();
    assert_eq!(latest, ["12.1"]);
}

#[test]
fn forward_compat_is_per_platform() {
    let forward = ResolveOptions {
        driver: Some(DriverVersion::parse("535.104.05").unwrap()),
        forward_compat: true,
        ..Default::default()
    };
    let resolution = run_with(
        "torch: [\"2.8\"]\ncuda: [\"12.9\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nplatforms: [linux/arm64]\n",
        forward,
    );
    assert_eq!(resolution.images.len(), 1, "{:?}", resolution.rejected);
    assert_eq!(
        resolution.images[0].forward_compat_branches,
        [535, 550, 560, 565, 570],
        "12.9.1's arm64 stage whitelists the same branches as amd64"
    );
}

#[test]
fn a_cuda_release_without_a_driver_minimum_is_refused() {
    let text = crate::model::knowledge::TEST_FIXTURE.replace(
        "{cuda: \"12.4\", cudnn: \"9.1.0.70\", archs: [\"5.0\", \"6.0\", \"7.0\", \"7.5\", \"8.0\", \"8.6\", \"9.0\"], source: [ti-golive-2.4, rel-md, builder-2.4]}",
        "{cuda: \"12.3\", cudnn: \"9.1.0.70\", archs: [\"5.0\", \"6.0\", \"7.0\", \"7.5\", \"8.0\", \"8.6\", \"9.0\"], source: [ti-golive-2.4, rel-md, builder-2.4]}",
    );
    assert_ne!(text, crate::model::knowledge::TEST_FIXTURE);
    let knowledge = Knowledge::parse(&text, "k.yaml").unwrap();
    let resolution = resolve(
        &matrix("torch: [\"2.4\"]\ncuda: [\"12.3\"]\nos: [ubuntu22.04]\nvariants: [runtime]\n"),
        &knowledge,
        &ResolveOptions::default(),
    );
    assert_eq!(
        one_reason(&resolution),
        "CUDA 12.3.2 has no toolkit driver minimum in NVIDIA's release notes (Table 3 has no row for it), so imagegen cannot say which drivers run it; use another 12.3 release"
    );
}

#[test]
fn unconfirmed_fields_resolve_with_a_note() {
    let resolution =
        run("torch: [\"2.8\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
    assert!(resolution.rejected.is_empty(), "{:?}", resolution.rejected);
    assert_eq!(
        resolution.images[0].unverified,
        ["torch 2.8.0 cu126 linux/amd64 GPU arch list: arch list from the main-branch build script of the 2.8 cycle, not the release branch"]
    );
}

/// Every torch wheel a driver rejection names as runnable runs on that driver: resolving it with
/// the same driver keeps an image. 560.28.03 meets CUDA 12.6.0's toolkit driver but not 12.6.3's,
/// the base the cu126 images build on, so cu126 may not be named for it (nor cu128 for 570.26).
#[test]
fn driver_hints_name_only_images_the_driver_runs() {
    let knowledge = Knowledge::test_fixture();
    let every_torch: Vec<String> = knowledge
        .torch
        .iter()
        .step_by(3)
        .map(|t| format!("\"{}\"", t.series))
        .collect();
    let every_cuda: Vec<String> = ["11.8", "12.1", "12.4", "12.6", "12.8", "12.9", "13.0"]
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect();
    let wide = format!(
        "torch: [{}]\ncuda: [{}]\nos: [ubuntu22.04, ubuntu24.04]\nvariants: [runtime]\n",
        every_torch.join(", "),
        every_cuda.join(", ")
    );
    // Up to three wheels named per driver; none where the driver runs no wheel of the knowledge
    // (450 runs CUDA 11.1 at most) or where forward compatibility runs every cell (535 with it).
    let expected_hints =
        |driver_text: &str, forward_compat: bool| match (driver_text, forward_compat) {
            ("450.80.02", _) | ("535.104.05", true) => 0,
            _ => 3,
        };
    let mut wheels_checked = 0;
    for driver_text in [
        "450.80.02",
        "535.104.05",
        "560.28.03",
        "570.26",
        "575.51.03",
    ] {
        for forward_compat in [false, true] {
            let options = || ResolveOptions {
                driver: Some(DriverVersion::parse(driver_text).unwrap()),
                forward_compat,
                ..Default::default()
            };
            let resolution = run_with(&wide, options());
            let mut named_wheels = BTreeMap::new();
            for rejection in resolution.rejected.iter().filter(|r| r.origin == "driver") {
                let Some(examples) = rejection.reason.split("(e.g. torch ").nth(1) else {
                    continue;
                };
                let examples = examples.split(')').next().unwrap();
                for wheel in examples.split(", ") {
                    named_wheels.insert(wheel.to_string(), rejection.torch.clone());
                }
            }
            assert_eq!(
                named_wheels.len(),
                expected_hints(driver_text, forward_compat),
                "driver {driver_text} (forward compat {forward_compat}) names {named_wheels:?}"
            );
            for (wheel, refused) in named_wheels {
                wheels_checked += 1;
                {
                    let (series, suffix) = wheel.split_once("+cu").unwrap();
                    let (major, minor) = suffix.split_at(2);
                    let cuda = format!("{major}.{minor}");
                    let named = run_with(
                        &format!("torch: [\"{series}\"]\ncuda: [\"{cuda}\"]\nos: [ubuntu20.04, ubuntu22.04, ubuntu24.04]\nvariants: [runtime]\n"),
                        options(),
                    );
                    assert!(
                        !named.images.is_empty()
                            && named.rejected.iter().all(|r| r.origin != "driver"),
                        "driver {driver_text} (forward compat {forward_compat}) was refused for torch {refused} and told it runs torch {wheel}, which it does not: {:#?}",
                        named.rejected
                    );
                }
            }
        }
    }
    assert_eq!(wheels_checked, 21, "every named wheel was tried");
    let resolution = run_with(
        "torch: [\"2.9\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
        ResolveOptions {
            driver: Some(DriverVersion::parse("560.28.03").unwrap()),
            ..Default::default()
        },
    );
    let reason = one_reason(&resolution);
    assert!(
        reason.starts_with("needs NVIDIA driver ≥ 560.35.05 (CUDA 12.6.3 toolkit driver); driver 560.28.03 is older and runs CUDA ≤ 12.5 images"),
        "{reason}"
    );
    assert!(!reason.contains("cu126"), "{reason}");
}

#[test]
fn torch_2_11_has_no_cu129_even_when_unverified_entries_are_allowed() {
    let reason = one_reason(&run_embedded(
        "torch: [\"2.11\"]\ncuda: [\"12.9\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nallow_unverified: true\n",
    ));
    assert!(
        reason
            .starts_with("torch 2.11.0 has no CUDA 12.9 wheels (it publishes cu126, cu128, cu130)"),
        "{reason}"
    );
}

#[test]
fn python_outside_torchs_range_names_the_range_before_the_os() {
    let resolution = run_embedded(
        "torch: [\"2.9.1\"]\ncuda: [\"12.8\"]\nos: [ubuntu24.04]\npython: [\"3.9\", \"3.14\"]\nvariants: [runtime]\n",
    );
    assert!(resolution.images.is_empty());
    let reasons: Vec<&str> = resolution
        .rejected
        .iter()
        .map(|r| r.reason.as_str())
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:#?}");
    let python_3_9 = reasons.iter().find(|r| r.contains("3.9")).unwrap();
    assert!(
        python_3_9.starts_with(
            "torch 2.9.1 has no Python 3.9 wheels (it supports 3.10–3.14); ubuntu24.04 ships Python 3.12 and imagegen uses the OS Python; torch 2.9.1 builds on ubuntu22.04 (Python 3.10)"
        ),
        "{python_3_9}"
    );
    let python_3_14 = reasons.iter().find(|r| r.contains("3.14 (")).unwrap();
    assert_eq!(
        *python_3_14,
        "ubuntu24.04 ships Python 3.12 and imagegen uses the OS Python; torch 2.9.1 supports Python 3.14 (its range is 3.10–3.14), but no known OS ships Python 3.14"
    );
}

#[test]
fn arm64_cuda_wheels_before_2_7_follow_the_release_channel() {
    // Go-live matrices: no CUDA aarch64 for 2.0-2.3, cuda-aarch64 = cu124 for 2.4/2.5, cu126 for 2.6.
    let resolution = run_embedded("torch: [\"2.0\", \"2.1\", \"2.2\", \"2.3\", \"2.4\", \"2.5\", \"2.6\"]\ncuda: [\"11.7\", \"11.8\", \"12.1\", \"12.4\", \"12.6\"]\nos: [ubuntu22.04]\nvariants: [runtime]\nplatforms: [linux/arm64]\n");
    let made: Vec<String> = resolution
        .images
        .iter()
        .map(|i| {
            format!(
                "{}+{}",
                i.torch,
                crate::model::knowledge::wheel_suffix(&i.cuda)
            )
        })
        .collect();
    assert_eq!(made, ["2.4.1+cu124", "2.5.1+cu124", "2.6.0+cu126"]);
    assert_eq!(resolution.images[0].archs, ["9.0"]);
    assert!(
        resolution.images[0].unverified[0].starts_with(
            "torch 2.4.1 cu124 linux/arm64 GPU arch list: release channel cuda-aarch64 → cu124"
        ),
        "{:?}",
        resolution.images[0].unverified
    );
    let refused = resolution
        .rejected
        .iter()
        .find(|r| r.torch == "2.3" && r.cuda == "12.1")
        .unwrap();
    assert!(
        refused.reason.starts_with(
            "torch 2.3.1 publishes no linux/arm64 CUDA 12.1 wheels in the knowledge (linux/arm64 CUDA wheels are recorded for torch 2.4, 2.5, 2.6, 2.7"
        ),
        "{}",
        refused.reason
    );
}

#[test]
fn aarch64_glibc_floors_apply_to_arm64_cells_only() {
    // The cu124 aarch64 wheels were built on manylinux_2_28; pretend Ubuntu 20.04 had glibc 2.27.
    let text = crate::model::knowledge::EMBEDDED.replace(
        "codename: focal, glibc: \"2.31\"",
        "codename: focal, glibc: \"2.27\"",
    );
    assert_ne!(text, crate::model::knowledge::EMBEDDED);
    let knowledge = Knowledge::parse(&text, "k.yaml").unwrap();
    let resolution = resolve(
        &matrix("torch: [\"2.4\"]\ncuda: [\"12.4\"]\nos: [ubuntu20.04]\nvariants: [runtime]\nplatforms: [linux/amd64, linux/arm64]\n"),
        &knowledge,
        &ResolveOptions::default(),
    );
    assert_eq!(resolution.images.len(), 1, "{:#?}", resolution.rejected);
    assert_eq!(resolution.images[0].platform.as_str(), "linux/amd64");
    assert_eq!(
        one_reason(&resolution),
        "torch 2.4.1 linux/arm64 wheels need glibc ≥ 2.28; ubuntu20.04 has 2.27"
    );
}

#[test]
fn the_wheels_own_cuda_runtime_sets_the_driver_minimum_when_newer_than_the_base() {
    let resolution = run_embedded("torch: [\"2.10\", \"2.12\", \"2.13\"]\ncuda: [\"12.8\", \"13.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
    let by_torch = |torch: &str, cuda: &str| {
        resolution
            .images
            .iter()
            .find(|i| i.torch == torch && i.cuda == cuda)
            .unwrap_or_else(|| panic!("no {torch} {cuda} image: {:#?}", resolution.rejected))
    };
    // 13.0 builds on 13.0.3, the supported 13.0 set, whose driver minimum (580.126.20, read from
    // NVIDIA's installer name) is above the 13.0.2 runtime PyPI's 2.12.1 pins: the base's stands,
    // listed as unconfirmed.
    let unconfirmed =
        "CUDA 13.0.3 toolkit driver minimum 580.126.20 (imagegen.driver.min) is unconfirmed: ";
    let image = by_torch("2.12.1", "13.0");
    assert_eq!(image.cuda_full, "13.0.3");
    assert_eq!(image.driver_min.to_string(), "580.126.20");
    assert_eq!(image.driver_min_from, "CUDA 13.0.3 toolkit");
    assert_eq!(image.driver_min_compat.to_string(), "580");
    assert_eq!(image.unverified.len(), 1, "{:?}", image.unverified);
    assert!(
        image.unverified[0].starts_with(unconfirmed),
        "{:?}",
        image.unverified
    );
    // 2.13.0 pins 13.0.3 itself: its own release, no lower bound any more.
    let image = by_torch("2.13.0", "13.0");
    assert_eq!(image.driver_min.to_string(), "580.126.20");
    assert_eq!(image.unverified.len(), 1, "{:?}", image.unverified);
    assert!(
        image.unverified[0].starts_with(unconfirmed),
        "{:?}",
        image.unverified
    );
    // On the 13.0.0 base (named exactly), the wheel's 13.0.2 runtime is newer: its Table 3 driver.
    let pinned_base = run_embedded(
        "torch: [\"2.12\"]\ncuda: [\"13.0.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
    );
    let image = &pinned_base.images[0];
    assert_eq!(image.cuda_full, "13.0.0");
    assert_eq!(image.driver_min.to_string(), "580.95.05");
    assert_eq!(image.driver_min_from, "torch wheel's CUDA 13.0.2 runtime");
    assert!(image.unverified.is_empty(), "{:?}", image.unverified);
    // 2.10.0's PyPI cu128 pins runtime 12.8.90, which 12.8.1 (the base) ships: the base's driver.
    let image = by_torch("2.10.0", "12.8");
    assert_eq!(image.driver_min.to_string(), "570.124.06");
    assert_eq!(image.driver_min_from, "CUDA 12.8.1 toolkit");
    // 2.12's cu126 is not PyPI's variant: no runtime pin is known, the base's driver stands.
    let cu126 = run_embedded(
        "torch: [\"2.12\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
    );
    assert_eq!(cu126.images[0].driver_min_from, "CUDA 12.6.3 toolkit");

    // resolve --driver agrees: 580.82.07 (13.0.1's) runs the 13.0.0 base but not the wheel, and
    // 580.95.05 (the wheel's) not the 13.0.3 base.
    let judged = |driver: &str, cuda: &str| {
        let options = ResolveOptions {
            driver: Some(DriverVersion::parse(driver).unwrap()),
            ..Default::default()
        };
        let refused = resolve(
            &matrix(&format!(
                "torch: [\"2.12\"]\ncuda: [\"{cuda}\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n"
            )),
            &Knowledge::embedded(),
            &options,
        );
        one_reason(&refused)
    };
    let reason = judged("580.82.07", "13.0.0");
    assert!(
        reason.starts_with("needs NVIDIA driver ≥ 580.95.05 (torch wheel's CUDA 13.0.2 runtime driver); driver 580.82.07 is older"),
        "{reason}"
    );
    let reason = judged("580.95.05", "13.0");
    assert!(
        reason.starts_with("needs NVIDIA driver ≥ 580.126.20 (CUDA 13.0.3 toolkit driver); driver 580.95.05 is older"),
        "{reason}"
    );
}

#[test]
fn pinned_runtimes_map_to_their_toolkit_release() {
    let knowledge = Knowledge::embedded();
    let floor = |runtime: &str| crate::resolve::driver::runtime_floor(&runtime.into(), &knowledge);
    let exact = floor("12.6.77").unwrap();
    assert_eq!((exact.release.as_str(), exact.exact), ("12.6.2", true));
    assert_eq!(exact.driver_min.to_string(), "560.35.03");
    assert_eq!(floor("13.0.2").unwrap().release, "13.0.2");
    let own = floor("13.0.3").unwrap();
    assert_eq!((own.release.as_str(), own.exact), ("13.0.3", true));
    assert_eq!(own.driver_min.to_string(), "580.126.20");
    // A toolkit without a row: the newest older release of its line with a verified one bounds
    // it (13.1.1's row is unverified, so 13.1.0's).
    let bound = floor("13.1.2").unwrap();
    assert_eq!((bound.release.as_str(), bound.exact), ("13.1.0", false));
    assert_eq!(
        floor("12.4.999"),
        None,
        "a library version no release ships"
    );
    assert_eq!(floor("14.0.1"), None, "a line the knowledge does not know");
}

/// CUDA 13.2 (cu132) builds on 13.2.1 on both platforms: NVIDIA's base Dockerfiles whitelist
/// R535, R570, R580 and R590 for forward compatibility with the current brand list, and the
/// driver minimum is 13.2.1's (595.58.03, unconfirmed).
#[test]
fn cu132_cells_build_on_13_2_1_on_both_platforms() {
    let resolution = run_embedded(
        "torch: [\"2.12\", \"2.13\"]\ncuda: [\"13.2\"]\nos: [ubuntu22.04, ubuntu24.04]\nplatforms: [linux/amd64, linux/arm64]\nvariants: [runtime]\n",
    );
    assert!(resolution.rejected.is_empty(), "{:#?}", resolution.rejected);
    assert_eq!(resolution.images.len(), 8);
    let knowledge = Knowledge::embedded();
    let brands = knowledge.brand_names("current").unwrap();
    let mut expected = String::from("cuda>=13.2");
    for branch in [535, 570, 580, 590] {
        for brand in brands {
            expected.push_str(&format!(
                " brand={brand},driver>={branch},driver<{}",
                branch + 1
            ));
        }
    }
    for image in &resolution.images {
        assert_eq!(image.cuda_full, "13.2.1", "{}", image.name);
        assert_eq!(image.driver_min.to_string(), "595.58.03", "{}", image.name);
        assert_eq!(image.forward_compat_branches, [535, 570, 580, 590]);
        assert_eq!(image.require_cuda, expected, "{}", image.name);
        assert!(
            image.unverified.iter().any(|u| u.starts_with(
                "CUDA 13.2.1 toolkit driver minimum 595.58.03 (imagegen.driver.min) is unconfirmed"
            )),
            "{:?}",
            image.unverified
        );
    }
    let platforms: Vec<&str> = resolution
        .images
        .iter()
        .map(|i| i.platform.as_str())
        .collect();
    assert_eq!(platforms.iter().filter(|p| **p == "linux/arm64").count(), 4);
    // An R590 data-center host runs them through forward compatibility.
    let options = ResolveOptions {
        driver: Some(DriverVersion::parse("590.48.01").unwrap()),
        forward_compat: true,
        ..Default::default()
    };
    let judged = resolve(
        &matrix("torch: [\"2.13\"]\ncuda: [\"13.2\"]\nos: [ubuntu24.04]\nplatforms: [linux/amd64, linux/arm64]\nvariants: [runtime]\n"),
        &knowledge,
        &options,
    );
    assert_eq!(judged.images.len(), 2, "{:#?}", judged.rejected);
}

/// A line builds on the newest nvidia/cuda set NVIDIA still supports, and a set its tag lists
/// call unsupported is warned about with the tag list named.
#[test]
fn images_on_a_set_nvidia_no_longer_supports_are_warned_about_naming_the_tag_list() {
    let day = crate::model::date::days_since_epoch("2026-12-06").unwrap();
    let on = |text: &str| {
        let options = ResolveOptions {
            today: Some(day),
            ..ResolveOptions::default()
        };
        resolve(&matrix(text), &Knowledge::embedded(), &options)
    };
    let images_eol = |resolution: &Resolution| -> Vec<String> {
        resolution
            .warnings
            .iter()
            .filter(|w| w.starts_with("nvidia/cuda "))
            .cloned()
            .collect()
    };
    // 13.0 → 13.0.3 (supported): no warning.
    let supported =
        on("torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
    assert_eq!(supported.images[0].cuda_full, "13.0.3");
    assert!(
        images_eol(&supported).is_empty(),
        "{:?}",
        supported.warnings
    );
    // 13.0.0 named exactly: unsupported, the tag list of 181367a6 named.
    let old = on("torch: [\"2.13\"]\ncuda: [\"13.0.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
    let warned = images_eol(&old);
    assert_eq!(warned.len(), 1, "{:?}", old.warnings);
    assert!(
        warned[0].starts_with("nvidia/cuda 13.0.0 images reached end of life on 2026-11-30 (6 days ago); source: nvidia-cuda-unsupported-tags-181367a6 (pranavmishra90/nvidia-container-images-cuda doc/unsupported-tags.md @181367a60650bee1a0d32f52b0e96d83d982de0d)"),
        "{}",
        warned[0]
    );
    // 12.8 has no supported set in the knowledge (12.8.2's facts were not read): it builds on
    // 12.8.1 and says so.
    let cu128 = on("torch: [\"2.10\"]\ncuda: [\"12.8\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
    assert_eq!(cu128.images[0].cuda_full, "12.8.1");
    let warned = images_eol(&cu128);
    assert!(
        warned.len() == 1 && warned[0].contains("doc/unsupported-tags.md @181367a6"),
        "{warned:?}"
    );
    // 11.2.2: NVIDIA's two lists disagree; the warning says the date is unverified.
    let cu112 = on("torch: [\"2.0\"]\ncuda: [\"11.8\"]\nos: [ubuntu22.04]\nvariants: [runtime]\n");
    assert!(
        images_eol(&cu112).is_empty(),
        "11.8.0 is still supported: {:?}",
        cu112.warnings
    );
    let knowledge = Knowledge::embedded();
    for version in ["11.0.3", "11.1.1", "11.2.2"] {
        let release = knowledge.cuda_release_for(&version.into()).unwrap();
        let eol = release.images_eol.as_ref().unwrap();
        assert!(!eol.verified, "{version}");
        assert!(
            eol.note.as_deref().unwrap().contains("disagree"),
            "{version}"
        );
    }
    // end_of_life: refuse turns it into a rejection.
    let refused = on("torch: [\"2.13\"]\ncuda: [\"13.0.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nend_of_life: refuse\n");
    assert_eq!(refused.images.len(), 0);
    assert!(refused.rejected[0]
        .reason
        .ends_with("(end_of_life: refuse)"));
}

#[test]
fn forward_compat_clauses_only_on_bases_with_the_compat_libraries() {
    let cell = "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04, debian12]\nvariants: [runtime, devel]\ndevel_toolkit: pypi\n";
    let own_base = format!(
        "{cell}base_images:\n  runtime: {{ubuntu24.04: \"registry.example.com/team/ubuntu-cuda:24.04\", debian12: \"registry.example.com/team/debian:12\"}}\n"
    );
    let mirrored = format!(
        "{cell}base_images:\n  runtime: {{ubuntu24.04: \"registry.example.com/hub/nvidia/cuda:13.0.0-base-ubuntu24.04\", debian12: \"registry.example.com/team/debian:12\"}}\n"
    );
    for (matrix_text, ubuntu_has_compat) in [(own_base, false), (mirrored, true)] {
        let resolution = run_embedded(&matrix_text);
        assert_eq!(resolution.images.len(), 4, "{:#?}", resolution.rejected);
        for image in &resolution.images {
            let has_compat = image.os == "ubuntu24.04" && ubuntu_has_compat;
            assert_eq!(
                image.require_cuda.contains("brand="),
                has_compat,
                "{} on {}: {}",
                image.name,
                image.base_image,
                image.require_cuda
            );
            assert_eq!(
                image.forward_compat_branches.is_empty(),
                !has_compat,
                "{}",
                image.name
            );
        }
        // resolve --driver --forward-compat agrees with the label: an R535 host runs only the
        // images whose base carries the compat libraries.
        let options = ResolveOptions {
            driver: Some(DriverVersion::parse("535.104.05").unwrap()),
            forward_compat: true,
            ..Default::default()
        };
        let judged = resolve(&matrix(&matrix_text), &Knowledge::embedded(), &options);
        let runs: Vec<&str> = judged.images.iter().map(|i| i.os.as_str()).collect();
        let expected: Vec<&str> = if ubuntu_has_compat {
            vec!["ubuntu24.04", "ubuntu24.04"]
        } else {
            Vec::new()
        };
        assert_eq!(runs, expected);
        let refused = judged.rejected.iter().find(|r| r.os == "debian12").unwrap();
        assert!(
            refused
                .reason
                .starts_with("needs NVIDIA driver ≥ 580.126.20"),
            "{}",
            refused.reason
        );
    }
    // The default nvidia/cuda base keeps NVIDIA's clauses.
    let default_base = run_embedded(
        "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
    );
    assert!(default_base.images[0]
        .require_cuda
        .contains("brand=tesla,driver>=535,driver<536"));
}

/// Ends of life are judged as of the day handed in: past, within 90 days, or not yet near.
#[test]
fn a_cell_past_or_near_an_end_of_life_is_warned_about_and_refused_on_request() {
    let day = |date: &str| crate::model::date::days_since_epoch(date).unwrap();
    let on = |date: &str, extra: &str| {
        let options = ResolveOptions {
            today: Some(day(date)),
            ..ResolveOptions::default()
        };
        resolve(&matrix(extra), &Knowledge::embedded(), &options)
    };
    let cell =
        "torch: [\"2.4\"]\ncuda: [\"12.1\"]\nos: [ubuntu20.04, ubuntu22.04]\nvariants: [runtime]\n";
    let far = on("2024-12-01", cell);
    assert!(
        far.warnings.iter().all(|w| !w.contains("end of life")),
        "{:?}",
        far.warnings
    );
    let past = on("2026-12-02", cell);
    let eol: Vec<&String> = past
        .warnings
        .iter()
        .filter(|w| w.contains("end of life"))
        .collect();
    assert_eq!(eol.len(), 1, "{eol:?}");
    assert!(
        eol[0].starts_with("ubuntu20.04 reached end of life on 2025-05-31 (550 days ago); source: ubuntu-release-cycle (https://ubuntu.com/about/release-cycle)"),
        "{}",
        eol[0]
    );
    let near = on("2027-04-01", cell);
    assert!(
        near.warnings.iter().any(|w| w
            .starts_with("ubuntu22.04 reaches end of life on 2027-05-31 (in 60 days)")
            && w.contains("unverified")),
        "{:?}",
        near.warnings
    );
    assert_eq!(near.images.len(), 2, "a warning keeps the cells");
    let refused = on("2026-12-02", &format!("{cell}end_of_life: refuse\n"));
    assert_eq!(refused.images.len(), 1);
    assert_eq!(refused.rejected.len(), 1);
    assert!(refused.rejected[0]
        .reason
        .ends_with("(end_of_life: refuse)"));
    // An nvidia/cuda image set NVIDIA lists as no longer updated (12.6.2), by its own date.
    let images = on(
        "2026-12-02",
        "torch: [\"2.6\"]\ncuda: [\"12.6.2\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
    );
    assert!(
        images.warnings.iter().any(|w| w.starts_with(
            "nvidia/cuda 12.6.2 images reached end of life on 2026-11-30 (2 days ago); source: nvidia-cuda-unsupported-tags"
        )),
        "{:?}",
        images.warnings
    );
}

const FLAVOURED: &str = "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\ntorch_wheels: pypi\npip: [einops]\nuser: {name: dev, uid: 1000, gid: 1000}\nflavours:\n  jupyter: {}\n  tools:\n    pip: [rich]\n    apt: [git]\n";

#[test]
fn flavours_build_on_each_runtime_image_with_tags_aliases_and_locks_of_their_own() {
    let resolution = run(FLAVOURED);
    let names: Vec<&str> = resolution.images.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04",
            "2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04-jupyter",
            "2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04-tools",
            "2.13.0-cuda13.0-cudnn9-devel-ubuntu24.04",
        ]
    );
    let runtime = &resolution.images[0];
    let jupyter = &resolution.images[1];
    assert_eq!(jupyter.parent.as_deref(), Some(runtime.name.as_str()));
    assert_eq!(
        jupyter.base_image,
        format!("ghcr.io/acme/pytorch:{}", runtime.tag)
    );
    assert_eq!(
        jupyter.aliases,
        runtime
            .aliases
            .iter()
            .map(|alias| format!("{alias}-jupyter"))
            .collect::<Vec<_>>()
    );
    assert!(jupyter.aliases.contains(&"latest-jupyter".to_string()));
    // The lock: the runtime's requirements within the runtime lock, the runtime's extras and the
    // flavour's packages within those pins.
    let lock = jupyter.lock.as_ref().unwrap();
    assert_eq!(
        lock.requirements,
        runtime.lock.as_ref().unwrap().requirements
    );
    assert_eq!(
        lock.extras,
        ["einops", "jupyterlab>=4.2,<5", "ipykernel>=6.29"]
    );
    assert_eq!(lock.parent.as_ref().unwrap().image, runtime.name);
    // The user and its labels carry over; the runtime's own additions are not installed again.
    assert_eq!(jupyter.extensions.user, runtime.extensions.user);
    assert!(jupyter.extensions.pip.is_empty());
    assert_eq!(jupyter.inputs["flavour"], "jupyter");
    assert_eq!(
        jupyter.inputs["parent_fingerprint"],
        runtime.fingerprint.to_string()
    );
    let tools = &resolution.images[2];
    assert_eq!(tools.flavour.as_ref().unwrap().apt, ["git"]);
    assert_eq!(tools.inputs["flavour.apt"], "git");
    assert_ne!(tools.fingerprint, jupyter.fingerprint);
    // The devel image is not a flavour's parent, and no flavour is built on it.
    assert!(resolution
        .images
        .iter()
        .all(|image| image.flavour.is_none() || image.parent.as_ref() == Some(&runtime.name)));
}

#[test]
fn changing_a_flavour_changes_exactly_its_images_fingerprints() {
    let before = run(FLAVOURED).images;
    let after = run(&FLAVOURED.replace("apt: [git]", "apt: [git, make]")).images;
    let changed: Vec<&str> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b.fingerprint != a.fingerprint)
        .map(|(b, _)| b.name.as_str())
        .collect();
    assert_eq!(
        changed,
        ["2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04-tools"]
    );
    // A new runtime lock: the runtime image and, through it, its flavours and devel image.
    let mut locks = BTreeMap::new();
    locks.insert(before[0].name.clone(), Digest::of(b"runtime lock"));
    let relocked = run_with(
        FLAVOURED,
        ResolveOptions {
            locks,
            ..Default::default()
        },
    )
    .images;
    assert!(before
        .iter()
        .zip(&relocked)
        .all(|(b, a)| b.fingerprint != a.fingerprint));
    assert_ne!(
        relocked[1].lock.as_ref().unwrap().inputs_digest,
        before[1].lock.as_ref().unwrap().inputs_digest,
        "a new runtime lock makes the flavour's lock stale"
    );
    // Without flavours, the other images keep their fingerprints.
    let plain = run(&FLAVOURED[..FLAVOURED.find("flavours:").unwrap()]).images;
    assert_eq!(plain.len(), 2);
    assert_eq!(plain[0].fingerprint, before[0].fingerprint);
    assert_eq!(plain[1].fingerprint, before[3].fingerprint);
}

#[test]
fn flavours_of_per_platform_images_publish_an_index_of_their_own() {
    let resolution = run("torch: [\"2.7\"]\ncuda: [\"12.8\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nplatforms: [linux/amd64, linux/arm64]\nuser: {name: dev, uid: 1000, gid: 1000}\nflavours: {ssh: {}}\n");
    let flavours: Vec<(&str, Option<&str>)> = resolution
        .images
        .iter()
        .filter(|image| image.flavour.is_some())
        .map(|image| (image.tag.as_str(), image.index.as_deref()))
        .collect();
    assert_eq!(
        flavours,
        [
            (
                "2.7.1-cuda12.8-cudnn9-runtime-ubuntu24.04-ssh-amd64",
                Some("2.7.1-cuda12.8-cudnn9-runtime-ubuntu24.04-ssh")
            ),
            (
                "2.7.1-cuda12.8-cudnn9-runtime-ubuntu24.04-ssh-arm64",
                Some("2.7.1-cuda12.8-cudnn9-runtime-ubuntu24.04-ssh")
            ),
        ]
    );
}

#[test]
fn a_flavour_from_devel_builds_on_each_devel_image_and_leaves_runtime_flavours_as_they_were() {
    let with_devel = format!("{FLAVOURED}  build:\n    from: devel\n    apt: [make]\n");
    let before = run(FLAVOURED).images;
    let resolution = run(&with_devel);
    let names: Vec<&str> = resolution.images.iter().map(|i| i.name.as_str()).collect();
    let runtime = "2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04";
    let devel = "2.13.0-cuda13.0-cudnn9-devel-ubuntu24.04";
    assert_eq!(
        names,
        [
            runtime.to_string(),
            format!("{runtime}-jupyter"),
            format!("{runtime}-tools"),
            devel.to_string(),
            format!("{devel}-build"),
        ]
    );
    // The runtime images and their flavours are exactly what they were without it.
    for image in &before {
        let same = resolution
            .images
            .iter()
            .find(|i| i.name == image.name)
            .unwrap();
        assert_eq!(same.fingerprint, image.fingerprint, "{}", image.name);
        assert_eq!(same.inputs, image.inputs, "{}", image.name);
    }
    let devel_image = &resolution.images[3];
    let build = &resolution.images[4];
    let flavour = build.flavour.as_ref().unwrap();
    assert_eq!(flavour.from, crate::model::flavours::FlavourFrom::Devel);
    assert_eq!(build.parent.as_deref(), Some(devel));
    assert_eq!(build.variant, Variant::Devel);
    assert_eq!(
        build.base_image,
        format!("{}:{devel}", devel_image.repository)
    );
    assert_eq!(build.inputs["flavour.from"], "devel");
    assert_eq!(build.inputs["variant"], "devel flavour");
    assert_eq!(
        build.inputs["parent_fingerprint"],
        devel_image.fingerprint.to_string()
    );
    // Its lock is resolved within the devel image's lock.
    let lock = build.lock.as_ref().unwrap();
    assert_eq!(lock.parent.as_ref().unwrap().image, devel);
    assert_eq!(
        lock.requirements,
        devel_image.lock.as_ref().unwrap().requirements
    );
    // Its aliases follow the devel image's.
    assert!(!devel_image.aliases.is_empty());
    assert_eq!(
        build.aliases,
        devel_image
            .aliases
            .iter()
            .map(|alias| format!("{alias}-build"))
            .collect::<Vec<_>>()
    );
    // A change to the devel image (a new devel lock) rebuilds the devel flavour, not the others.
    let mut locks = BTreeMap::new();
    locks.insert(devel.to_string(), Digest::of(b"devel lock"));
    let relocked = run_with(
        &with_devel,
        ResolveOptions {
            locks,
            ..Default::default()
        },
    )
    .images;
    let changed: Vec<&str> = resolution
        .images
        .iter()
        .zip(&relocked)
        .filter(|(b, a)| b.fingerprint != a.fingerprint)
        .map(|(b, _)| b.name.as_str())
        .collect();
    assert_eq!(changed, [devel.to_string(), format!("{devel}-build")]);
}

#[test]
fn a_flavour_from_a_variant_the_matrix_does_not_make_is_an_error_at_its_line() {
    let text = "registry: r\nrepository: t/p\ntorch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nflavours:\n  build:\n    from: devel\n";
    let error = Matrix::parse(text, "m.yaml").unwrap_err().to_string();
    assert!(
        error.starts_with("m.yaml:9:11:")
            && error.contains(
                "the build flavour is built FROM the devel images, and `variants` makes none"
            )
            && error.contains("add devel to variants"),
        "{error}"
    );
    let text = text
        .replace("variants: [runtime]", "variants: [devel]")
        .replace("    from: devel\n", "    apt: [git]\n");
    let error = Matrix::parse(&text, "m.yaml").unwrap_err().to_string();
    assert!(
        error.starts_with("m.yaml:8:3:")
            && error.contains("the build flavour is built FROM the runtime images"),
        "{error}"
    );
}

#[test]
fn a_devel_flavour_is_selected_and_sharded_with_its_whole_family_parents_first() {
    use crate::resolve::select::{select, Shard};
    let images = run(&format!(
        "{FLAVOURED}  build:\n    from: devel\n    apt: [make]\n"
    ))
    .images;
    assert_eq!(images.len(), 5);
    let devel = "2.13.0-cuda13.0-cudnn9-devel-ubuntu24.04";
    let names = |selected: &[ImageSpec]| -> Vec<String> {
        selected.iter().map(|image| image.name.clone()).collect()
    };
    // --only the devel flavour: its devel image and that one's runtime image come first.
    let only = select(&images, Some(&format!("{devel}-build")), None);
    assert_eq!(
        names(&only),
        [
            "2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04".to_string(),
            devel.to_string(),
            format!("{devel}-build")
        ]
    );
    // --only a full tag names that image alone (with its parents), never the images built on
    // it, whose tags start with it; part of a tag selects every image whose tag has it.
    let runtime = "2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04";
    assert_eq!(names(&select(&images, Some(runtime), None)), [runtime]);
    assert_eq!(names(&select(&images, Some(devel), None)), [runtime, devel]);
    assert_eq!(
        names(&select(&images, Some("cudnn9-devel"), None)),
        [
            runtime.to_string(),
            devel.to_string(),
            format!("{devel}-build")
        ]
    );
    // One family (one runtime image and all built on it, the devel flavour too): two shards put
    // it whole in one, parents first, and nothing in the other.
    let shards: Vec<Vec<String>> = (1..=2)
        .map(|index| names(&select(&images, None, Some(Shard { index, count: 2 }))))
        .collect();
    assert_eq!(shards[0], names(&images), "{shards:?}");
    assert!(shards[1].is_empty(), "{shards:?}");
}
