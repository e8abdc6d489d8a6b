//! Derivation from real PyPI files saved under tests/fixtures/pypi (see its README).

use super::*;

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pypi")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn pins_of(file: &str, machine: &str, python: &str) -> PypiWheel {
    let metadata = parse_metadata(&fixture(file), file).unwrap();
    let environment = linux_cpython(machine, python).unwrap();
    cuda_pins(&metadata, &environment, file).unwrap()
}

const PAGE: &str = "https://pypi.org/simple/torch/";

/// The parsing is `imagegen_python`'s (tested there); this module maps machines to platforms
/// and glibc floors to its versions.
#[test]
fn wheel_filenames_give_platforms_and_glibc_floors() {
    let wheel = |text: &str| WheelFilename::from_str(text).unwrap();
    let name = wheel("torch-2.10.0-3-cp313-cp313t-manylinux_2_28_x86_64.whl");
    assert_eq!(linux_platform(&name), Some(PLATFORM_AMD64));
    assert_eq!(glibc_floor(&name).unwrap().to_string(), "2.28");
    let old = wheel("torch-2.1.2-cp310-cp310-manylinux1_x86_64.whl");
    assert_eq!(glibc_floor(&old).unwrap().to_string(), "2.5");
    let arm = wheel("torch-2.0.0-1-cp38-cp38-manylinux2014_aarch64.whl");
    assert_eq!(linux_platform(&arm), Some(PLATFORM_ARM64));
    assert_eq!(glibc_floor(&arm).unwrap().to_string(), "2.17");
    let mac = wheel("torch-2.13.0-cp310-none-macosx_14_0_arm64.whl");
    assert_eq!(linux_platform(&mac), None);
    let error = DeriveError::from(WheelFilename::from_str("torch-2.13.0.tar.gz").unwrap_err());
    assert!(
        error.to_string().contains("does not end in .whl"),
        "{error}"
    );
}

#[test]
fn cuda_toolkit_pins_of_torch_2_13() {
    let pins = pins_of(
        "torch-2.13.0-cp310-cp310-manylinux_2_28_x86_64.whl.metadata",
        "x86_64",
        "3.10",
    );
    assert_eq!(
        wheel_flow(&pins),
        "{platform: linux/amd64, cuda: \"13.0\", cuda_runtime: \"13.0.3\", cudnn: \"9.20.0.48\", nccl: \"2.29.7\"}"
    );
}

#[test]
fn old_style_pins_of_torch_2_1_2_are_cu121_on_x86_64() {
    let file = "torch-2.1.2-cp310-cp310-manylinux1_x86_64.whl.metadata";
    let pins = pins_of(file, "x86_64", "3.10");
    assert_eq!(
        pins.cuda.as_deref(),
        Some("12.1"),
        "PyPI's 2.1 wheel is cu121"
    );
    assert_eq!(pins.cuda_runtime.as_deref(), Some("12.1.105"));
    assert_eq!(pins.cudnn.as_deref(), Some("8.9.2.26"));
    assert_eq!(pins.nccl.as_deref(), Some("2.18.1"));
}

#[test]
fn x86_64_only_markers_make_an_aarch64_wheel_cpu_only() {
    let pins = pins_of(
        "torch-2.10.0-cp312-cp312-manylinux_2_28_aarch64.whl.metadata",
        "aarch64",
        "3.12",
    );
    assert_eq!(pins.platform, PLATFORM_ARM64);
    assert_eq!(pins.cuda, None, "{pins:?}");
    assert_eq!(pins.cudnn, None);
    // The same file read for x86_64 pins cu128: the markers decide, not the file.
    let x86 = pins_of(
        "torch-2.10.0-cp312-cp312-manylinux_2_28_aarch64.whl.metadata",
        "x86_64",
        "3.12",
    );
    assert_eq!(x86.cuda.as_deref(), Some("12.8"));
    let none = pins_of(
        "torch-2.0.0-1-cp310-cp310-manylinux2014_aarch64.whl.metadata",
        "aarch64",
        "3.10",
    );
    assert_eq!(none.cuda, None);
}

#[test]
fn aarch64_cuda_wheels_of_torch_2_12_1() {
    let pins = pins_of(
        "torch-2.12.1-cp311-cp311-manylinux_2_28_aarch64.whl.metadata",
        "aarch64",
        "3.11",
    );
    assert_eq!(
        wheel_flow(&pins),
        "{platform: linux/arm64, cuda: \"13.0\", cuda_runtime: \"13.0.2\", cudnn: \"9.20.0.48\", nccl: \"2.29.7\"}"
    );
}

#[test]
fn index_pages_in_json_and_html_list_the_same_files() {
    let json = parse_simple_json(&fixture("simple-torch-2.10.0-2.12.1.json"), PAGE).unwrap();
    let html = parse_simple_html(&fixture("simple-torch-2.12.1.html"), PAGE);
    let of = |files: &[IndexFile]| -> BTreeSet<(String, String)> {
        files
            .iter()
            .filter(|f| f.filename.starts_with("torch-2.12.1-"))
            .map(|f| (f.filename.clone(), f.url.clone()))
            .collect()
    };
    assert_eq!(of(&json).len(), 24);
    assert_eq!(of(&json), of(&html));
    assert!(html[0]
        .url
        .starts_with("https://files.pythonhosted.org/packages/"));
    assert!(!html[0].url.contains('#'), "the hash fragment is dropped");
    let error = parse_simple_json("<html>", PAGE).unwrap_err();
    assert!(
        error.to_string().contains("not a PEP 691 project page"),
        "{error}"
    );
}

#[test]
fn relative_urls_resolve_against_the_page() {
    let page = "https://pypi.org/pypi/torch/json";
    assert_eq!(
        resolve_url(page, "../../packages/packages/01/79/torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"),
        "https://pypi.org/packages/packages/01/79/torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    );
    assert_eq!(
        resolve_url(
            "https://mirror.example/simple/torch/",
            "torch-2.13.0.whl#sha256=ab"
        ),
        "https://mirror.example/simple/torch/torch-2.13.0.whl"
    );
    assert_eq!(
        resolve_url("https://mirror.example/simple/torch/", "/files/t.whl"),
        "https://mirror.example/files/t.whl"
    );
    assert_eq!(
        resolve_url("http://mirror.example/simple/torch/", "//cdn.example/t.whl"),
        "http://cdn.example/t.whl"
    );
}

/// The whole derivation over the saved index page: build tags win, yanked and foreign files drop
/// out, metadata not served is reported, and the result matches the embedded knowledge.
#[test]
fn torch_2_12_1_derived_from_saved_files_matches_the_knowledge() {
    let files = parse_simple_json(&fixture("simple-torch-2.10.0-2.12.1.json"), PAGE).unwrap();
    let wheels = linux_wheels(&files, "torch", "2.12.1").unwrap();
    assert_eq!(wheels[PLATFORM_AMD64].len(), 6);
    assert_eq!(wheels[PLATFORM_ARM64].len(), 6);
    let mut metadata = BTreeMap::new();
    for name in [
        "torch-2.12.1-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.12.1-cp311-cp311-manylinux_2_28_aarch64.whl",
    ] {
        metadata.insert(name.to_string(), fixture(&format!("{name}.metadata")));
    }
    let derived = derive_release(
        "torch",
        "2.12.1",
        PAGE,
        &wheels,
        &metadata,
        &BTreeSet::new(),
    )
    .unwrap();
    let amd64 = &derived.platforms[0];
    assert_eq!(amd64.platform, PLATFORM_AMD64);
    assert_eq!(amd64.python, ["3.10", "3.11", "3.12", "3.13", "3.14"]);
    assert_eq!(amd64.python_free_threaded, ["3.14"]);
    assert_eq!(amd64.manylinux, ["manylinux_2_28_x86_64"]);
    assert_eq!(amd64.glibc_min.as_deref(), Some("2.28"));
    assert_eq!(amd64.metadata_read.len(), 1);
    assert_eq!(amd64.metadata_missing.len(), 5);

    let comparison = compare(
        &derived,
        &TorchVersion::parse(&derived.version).unwrap(),
        &Knowledge::embedded(),
    );
    assert!(comparison.differences.is_empty(), "{comparison:?}");

    let yaml = to_yaml(&derived, "2026-11-30");
    assert!(
        yaml.contains("  pypi-torch: {url: \"https://pypi.org/simple/torch/\""),
        "{yaml}"
    );
    assert!(
        yaml.contains("python: [\"3.10\", \"3.11\", \"3.12\", \"3.13\", \"3.14\"]"),
        "{yaml}"
    );
    assert!(yaml.contains("glibc_min: \"2.28\""), "{yaml}");
    assert!(yaml.contains("        - {platform: linux/arm64, cuda: \"13.0\", cuda_runtime: \"13.0.2\", cudnn: \"9.20.0.48\", nccl: \"2.29.7\"}"), "{yaml}");
    assert!(yaml.contains("      source: [pypi-torch]"), "{yaml}");
}

#[test]
fn build_tags_replace_the_first_upload() {
    let files = parse_simple_json(&fixture("simple-torch-2.10.0-2.12.1.json"), PAGE).unwrap();
    let wheels = linux_wheels(&files, "torch", "2.10.0").unwrap();
    let amd64: Vec<&str> = wheels[PLATFORM_AMD64]
        .iter()
        .map(|(_, f)| f.filename.as_str())
        .collect();
    assert_eq!(amd64.len(), 7);
    assert!(
        amd64.iter().all(|f| f.starts_with("torch-2.10.0-3-")),
        "{amd64:?}"
    );
    assert!(!wheels[PLATFORM_ARM64].is_empty());
    assert!(wheels[PLATFORM_ARM64]
        .iter()
        .all(|(n, _)| n.build().is_none()));
}

#[test]
fn a_wrong_knowledge_entry_is_reported() {
    let files = parse_simple_json(&fixture("simple-torch-2.10.0-2.12.1.json"), PAGE).unwrap();
    let wheels = linux_wheels(&files, "torch", "2.10.0").unwrap();
    let mut metadata = BTreeMap::new();
    let name = "torch-2.10.0-cp312-cp312-manylinux_2_28_aarch64.whl";
    metadata.insert(name.to_string(), fixture(&format!("{name}.metadata")));
    let derived = derive_release(
        "torch",
        "2.10.0",
        PAGE,
        &wheels,
        &metadata,
        &BTreeSet::new(),
    )
    .unwrap();
    let knowledge = Knowledge::embedded();
    let comparison = compare(
        &derived,
        &TorchVersion::parse(&derived.version).unwrap(),
        &knowledge,
    );
    assert!(comparison.differences.is_empty(), "{comparison:?}");
    assert_eq!(
        comparison.unchecked,
        ["linux/amd64: neither the index nor the wheels served METADATA, so the recorded pins were not compared"]
    );
    // Each platform: its pins (arm64 only), Python builds and glibc floor.
    assert_eq!(comparison.checked.len(), 5, "{:#?}", comparison.checked);

    // Pretend the knowledge still said PyPI's aarch64 wheel of 2.10.0 were CUDA 12.8.
    let text = super::super::EMBEDDED.replace(
        "torch: \"2.10.0\"\n        torchvision: \"0.25.0\"\n        torchaudio: \"2.10.0\"\n        source: [pypi-torchvision, pypi-torchaudio]\n        pypi:\n          wheels:\n            - {platform: linux/amd64, cuda: \"12.8\", cuda_runtime: \"12.8.90\", cudnn: \"9.10.2.21\", nccl: \"2.27.5\"}\n            - {platform: linux/arm64}",
        "torch: \"2.10.0\"\n        torchvision: \"0.25.0\"\n        torchaudio: \"2.10.0\"\n        source: [pypi-torchvision, pypi-torchaudio]\n        pypi:\n          wheels:\n            - {platform: linux/amd64, cuda: \"12.8\", cuda_runtime: \"12.8.90\", cudnn: \"9.10.2.21\", nccl: \"2.27.5\"}\n            - {platform: linux/arm64, cuda: \"12.8\", cuda_runtime: \"12.8.90\", cudnn: \"9.10.2.21\", nccl: \"2.27.5\"}",
    );
    assert_ne!(text, super::super::EMBEDDED);
    let wrong = Knowledge::parse(&text, "k.yaml").unwrap();
    let comparison = compare(
        &derived,
        &TorchVersion::parse(&derived.version).unwrap(),
        &wrong,
    );
    assert_eq!(
        comparison.differences,
        ["linux/arm64 PyPI wheel: the metadata says {platform: linux/arm64}, the knowledge says {platform: linux/arm64, cuda: \"12.8\", cuda_runtime: \"12.8.90\", cudnn: \"9.10.2.21\", nccl: \"2.27.5\"}"]
    );
}

#[test]
fn disagreeing_wheels_of_one_platform_are_an_error() {
    let files = parse_simple_json(&fixture("simple-torch-2.10.0-2.12.1.json"), PAGE).unwrap();
    let wheels = linux_wheels(&files, "torch", "2.12.1").unwrap();
    let mut metadata = BTreeMap::new();
    metadata.insert(
        "torch-2.12.1-cp312-cp312-manylinux_2_28_x86_64.whl".to_string(),
        fixture("torch-2.12.1-cp312-cp312-manylinux_2_28_x86_64.whl.metadata"),
    );
    metadata.insert(
        "torch-2.12.1-cp310-cp310-manylinux_2_28_x86_64.whl".to_string(),
        fixture("torch-2.13.0-cp310-cp310-manylinux_2_28_x86_64.whl.metadata")
            .replace("Version: 2.13.0", "Version: 2.12.1"),
    );
    let error = derive_release(
        "torch",
        "2.12.1",
        PAGE,
        &wheels,
        &metadata,
        &BTreeSet::new(),
    )
    .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("the linux/amd64 wheels of torch 2.12.1 disagree on their CUDA pins"),
        "{error}"
    );
    let none = derive_release(
        "torch",
        "9.9.9",
        PAGE,
        &BTreeMap::new(),
        &metadata,
        &BTreeSet::new(),
    )
    .unwrap_err();
    assert_eq!(
        none.to_string(),
        "https://pypi.org/simple/torch/ lists no Linux x86_64 or aarch64 wheels of torch 9.9.9"
    );
}
