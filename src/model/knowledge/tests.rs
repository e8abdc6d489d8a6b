//! The embedded knowledge loads, every entry is sourced, and the schema refuses what it must.

use super::*;

/// A test's torch literal, parsed as the loader parses one.
fn torch(text: &str) -> TorchVersion {
    TorchVersion::parse(text).expect("a test's torch literal")
}

fn error_of(text: &str) -> String {
    Knowledge::parse(text, "k.yaml").unwrap_err().to_string()
}

/// The embedded text with `from` replaced by `to` (exactly once, so a test cannot go stale).
fn edited(from: &str, to: &str) -> String {
    assert_eq!(
        EMBEDDED.matches(from).count(),
        1,
        "`{from}` must occur once in knowledge.yaml"
    );
    EMBEDDED.replace(from, to)
}

#[test]
fn embedded_knowledge_is_valid_and_covers_torch_2_0_to_2_13() {
    let knowledge = Knowledge::embedded();
    for series in [
        "2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11",
        "2.12", "2.13",
    ] {
        assert!(
            knowledge.torch_series(&torch(series)).is_some(),
            "torch {series} missing"
        );
    }
    assert_eq!(knowledge.newest_series().unwrap().series.as_str(), "2.13");
    for family in [11, 12, 13] {
        assert!(knowledge.family(family).is_some());
    }
}

#[test]
fn every_entry_cites_a_source_that_locates_a_commit_or_a_url() {
    let knowledge = Knowledge::embedded();
    let entries = knowledge.entries();
    assert!(entries.len() > 150, "{} entries", entries.len());
    for (what, keys) in entries {
        assert!(!keys.is_empty(), "{what} has no source");
        for locator in knowledge.locate(keys) {
            assert!(
                locator.starts_with("http://")
                    || locator.starts_with("https://")
                    || locator.contains(" @"),
                "{what}: {locator}"
            );
        }
        assert_eq!(knowledge.locate(keys).len(), keys.len(), "{what}");
    }
}

/// Every `source` list anywhere in the file, emptied one at a time, makes the file invalid: a new
/// kind of entry cannot slip in without the check.
#[test]
fn emptying_any_source_list_is_refused() {
    fn source_paths(value: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, child) in map {
                    path.push(key.clone());
                    if key.ends_with("source") && child.is_array() {
                        out.push(path.clone());
                    }
                    source_paths(child, path, out);
                    path.pop();
                }
            }
            serde_json::Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    path.push(index.to_string());
                    source_paths(child, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let knowledge = Knowledge::embedded();
    let value = serde_json::to_value(&knowledge).unwrap();
    let mut paths = Vec::new();
    source_paths(&value, &mut Vec::new(), &mut paths);
    assert_eq!(paths.len(), knowledge.entries().len());
    assert!(paths.len() > 150, "{} source lists", paths.len());
    for path in paths {
        let mut broken = value.clone();
        let mut slot = &mut broken;
        for key in &path {
            slot = match key.parse::<usize>() {
                Ok(index) if slot.is_array() => &mut slot[index],
                _ => &mut slot[key.as_str()],
            };
        }
        *slot = serde_json::json!([]);
        let text = serde_yaml::to_string(&broken).unwrap();
        let error = error_of(&text);
        assert!(
            error.contains("has no source"),
            "{}: {error}",
            path.join(".")
        );
    }
}

#[test]
fn sources_must_locate_something() {
    let error = error_of(&edited(
        "commit: d3629fa2e61bb5fe4fcf435a3f05aed3de7755b7,",
        "commit: HEAD,",
    ));
    assert!(
        error.contains("source `ti-golive-2.0` locates nothing: commit `HEAD`"),
        "{error}"
    );
    let error = error_of(&edited(
        "url: \"https://pypi.org/simple/torchvision/\"",
        "url: \"pypi torchvision\"",
    ));
    assert!(error.contains("is not an http(s) URL"), "{error}");
    let error = error_of(&edited(
        "builder-2.0: {repo: pytorch/builder, path: manywheel/build_cuda.sh, commit: 9f0fad92f342b146272d0f99d3969c2c148e80ba,",
        "builder-2.0: {repo: pytorch/builder, path: manywheel/build_cuda.sh,",
    ));
    assert!(
        error.contains("it needs either repo, path and commit, or a url"),
        "{error}"
    );
    let error = error_of(&edited("source: [ubuntu-noble],", "source: [NOWHERE],"));
    assert!(
        error.contains("OS ubuntu24.04 cites unknown source `NOWHERE`"),
        "{error}"
    );
    // An end-of-life date cites its own sources, and must be a day.
    let error = error_of(&edited(
        "verified: false, source: [ubuntu-release-cycle]}}\n  # nvidia/cuda",
        "verified: false, source: [NOWHERE]}}\n  # nvidia/cuda",
    ));
    assert!(
        error.contains("OS ubuntu24.04 eol cites unknown source `NOWHERE`"),
        "{error}"
    );
    let error = error_of(&edited(
        "eol: {date: \"2029-04-30\"",
        "eol: {date: \"Apr 2029\"",
    ));
    let line = EMBEDDED
        .lines()
        .position(|line| line.contains("eol: {date: \"2029-04-30\""))
        .expect("the edited line is in knowledge.yaml")
        + 1;
    assert!(
        error.starts_with(&format!("k.yaml:{line}:"))
            && error.contains("date \"Apr 2029\" is not a day (YYYY-MM-DD)"),
        "{error}"
    );
}

#[test]
fn an_older_schema_is_named_not_misread() {
    let error = error_of(&edited("schema_version: 2", "schema_version: 1"));
    assert!(
        error.contains("schema_version 1 is not read by this imagegen (it reads 2"),
        "{error}"
    );
}

#[test]
fn pypi_serves_one_cuda_variant_per_release_and_platform() {
    let knowledge = Knowledge::embedded();
    let pypi = |release: &str, platform: &str| {
        knowledge
            .torch_release(&torch(release))
            .unwrap()
            .1
            .pypi_cuda(platform)
            .map(str::to_string)
    };
    assert_eq!(pypi("2.0.1", PLATFORM_AMD64).as_deref(), Some("11.7"));
    for torch in ["2.1.0", "2.2.2", "2.3.1", "2.4.1"] {
        assert_eq!(
            pypi(torch, PLATFORM_AMD64).as_deref(),
            Some("12.1"),
            "{torch}"
        );
    }
    assert_eq!(pypi("2.6.0", PLATFORM_AMD64).as_deref(), Some("12.4"));
    assert_eq!(pypi("2.7.1", PLATFORM_AMD64).as_deref(), Some("12.6"));
    assert_eq!(pypi("2.10.0", PLATFORM_AMD64).as_deref(), Some("12.8"));
    assert_eq!(pypi("2.13.0", PLATFORM_AMD64).as_deref(), Some("13.0"));
    assert_eq!(pypi("2.10.0", PLATFORM_ARM64), None, "CPU-only on aarch64");
    assert_eq!(pypi("2.11.0", PLATFORM_ARM64).as_deref(), Some("13.0"));
}

#[test]
fn pypi_pins_must_agree_with_the_variant() {
    let error = error_of(&edited(
        "{platform: linux/amd64, cuda: \"13.0\", cuda_runtime: \"13.0.2\", cudnn: \"9.19.0.56\", nccl: \"2.28.9\"}",
        "{platform: linux/amd64, cuda: \"13.0\", cuda_runtime: \"13.0.2\", cudnn: \"9.17.1.4\", nccl: \"2.28.9\"}",
    ));
    assert!(
        error.contains("torch 2.11.0: the linux/amd64 PyPI wheel pins cuDNN 9.17.1.4, the CUDA 13.0 variant says 9.19.0.56"),
        "{error}"
    );
    let error = error_of(&edited(
        "{platform: linux/amd64, cuda: \"12.8\", cuda_runtime: \"12.8.90\", cudnn: \"9.10.2.21\", nccl: \"2.27.3\"}",
        "{platform: linux/amd64, cuda: \"12.8\", cuda_runtime: \"12.6.77\", cudnn: \"9.10.2.21\", nccl: \"2.27.3\"}",
    ));
    assert!(
        error.contains("pins CUDA runtime 12.6.77, not CUDA 12.8"),
        "{error}"
    );
}

#[test]
fn companions_are_exact_releases() {
    let error = error_of(&edited("torchvision: \"0.28.0\"", "torchvision: \"0.28\""));
    assert!(
        error.contains("torchvision 0.28 is not an exact release"),
        "{error}"
    );
}

#[test]
fn unconfirmed_fields_need_a_note() {
    let error = error_of(&edited(
        "        unconfirmed: [archs]\n        note: \"arch list from the main-branch build script of the 2.8 cycle, not the release branch\"\n",
        "        unconfirmed: [archs]\n",
    ));
    assert!(
        error.contains("torch 2.8 CUDA 12.9 marks fields unconfirmed without a note"),
        "{error}"
    );
}

#[test]
fn images_are_per_platform_with_their_own_forward_compat() {
    let knowledge = Knowledge::embedded();
    let release = |v: &str| knowledge.cuda_release_for(&v.into()).unwrap();
    assert_eq!(
        release("11.8.0").forward_compat_branches(PLATFORM_AMD64),
        [470]
    );
    assert_eq!(
        release("11.8.0").forward_compat_branches(PLATFORM_ARM64),
        [] as [u64; 0],
        "the arm64 stage of 11.8.0 requires plain cuda>=11.8"
    );
    assert_eq!(
        release("12.8.0").platforms(),
        [PLATFORM_AMD64, PLATFORM_ARM64]
    );
    assert_eq!(
        release("12.8.0").forward_compat_branches(PLATFORM_ARM64),
        [470, 535, 550, 560, 565]
    );
    assert_eq!(
        release("12.1.1").forward_compat_branches(PLATFORM_AMD64),
        [470, 525]
    );
    assert_eq!(release("12.5.1").cudnn_ubuntu(), ["20.04", "22.04"]);
    assert_eq!(
        release("12.6.3").cudnn_ubuntu(),
        ["20.04", "22.04", "24.04"]
    );
    let missing = release("12.3");
    assert_eq!(missing.version, "12.3.2");
    assert!(
        missing.driver_min.is_none(),
        "Table 3 has no 12.3 Update 2 row"
    );
}

#[test]
fn cuda_lines_resolve_to_the_newest_patch() {
    let knowledge = Knowledge::embedded();
    assert_eq!(
        knowledge.cuda_release_for(&"12.6".into()).unwrap().version,
        "12.6.3"
    );
    assert_eq!(
        knowledge
            .cuda_release_for(&"12.6.3".into())
            .unwrap()
            .version,
        "12.6.3"
    );
    assert!(
        knowledge
            .cuda_release_for(&"11.4.0".into())
            .unwrap()
            .ubuntu
            .is_empty(),
        "11.4.0 has a driver minimum but no nvidia/cuda images"
    );
    assert_eq!(
        knowledge.cuda_release_for(&"13.0".into()).unwrap().version,
        "13.0.3",
        "the newest 13.0 with images NVIDIA still supports: not 13.0.0 (unsupported), not 13.0.2 (no images recorded)"
    );
    assert_eq!(
        knowledge.cuda_release_for(&"13.2".into()).unwrap().version,
        "13.2.1"
    );
    assert_eq!(
        knowledge.cuda_release_for(&"11.0".into()).unwrap().version,
        "11.0.3"
    );
    assert!(
        knowledge.cuda_release_for(&"12.7".into()).is_none(),
        "there was no CUDA 12.7"
    );
    assert_eq!(
        knowledge
            .cuda_release_for(&"13.0".into())
            .unwrap()
            .driver_min
            .as_ref()
            .map(|d| d.as_str()),
        Some("580.126.20")
    );
}

#[test]
fn driver_to_newest_cuda() {
    let knowledge = Knowledge::embedded();
    let newest = |d: &str| knowledge.newest_cuda_for_driver(&DriverVersion::parse(d).unwrap());
    assert_eq!(newest("535.104.05").as_deref(), Some("12.2"));
    assert_eq!(newest("590.44.01").as_deref(), Some("13.1"));
    assert_eq!(newest("450.80.02").as_deref(), Some("11.0"));
    assert_eq!(newest("440.33.01"), None);
    assert_eq!(newest("550.54.15").as_deref(), Some("12.4"));
    assert_eq!(newest("570.124.06").as_deref(), Some("12.8"));
    assert_eq!(newest("580.95.05").as_deref(), Some("13.0"));
}

#[test]
fn wheel_suffixes() {
    assert_eq!(wheel_suffix("11.8"), "cu118");
    assert_eq!(wheel_suffix("12.6.3"), "cu126");
    assert_eq!(wheel_suffix("13.0"), "cu130");
    assert_eq!(
        Knowledge::embedded().wheel_index_url("12.8"),
        "https://download.pytorch.org/whl/cu128"
    );
}

#[test]
fn overrides_replace_and_extend() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("extra.yaml");
    std::fs::write(
        &path,
        r#"schema_version: 2
sources:
  mine: {url: "https://wheels.example/simple/torch/", what: "our wheel mirror's metadata"}
torch:
  - series: "2.14"
    python: ["3.10", "3.11", "3.12", "3.13", "3.14"]
    glibc_min: "2.28"
    cuda:
      - {cuda: "13.0", cudnn: "9.24.0.43", archs: ["7.5", "8.0"], source: [mine]}
    releases:
      - torch: "2.14.0"
        torchvision: "0.29.0"
        source: [mine]
        pypi:
          wheels: [{platform: linux/amd64, cuda: "13.0", cuda_runtime: "13.0.3", cudnn: "9.24.0.43"}]
          source: [mine]
    source: [mine]
"#,
    )
    .unwrap();
    let knowledge = Knowledge::with_override(&path, &std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(knowledge.newest_series().unwrap().series.as_str(), "2.14");
    assert!(knowledge.torch_series(&torch("2.7")).is_some());

    std::fs::write(
        &path,
        "schema_version: 2\ntorch:\n  - series: \"2.14\"\n    pythn: []\n",
    )
    .unwrap();
    let error = Knowledge::with_override(&path, &std::fs::read(&path).unwrap())
        .unwrap_err()
        .to_string();
    assert!(error.contains("extra.yaml:4:5"), "{error}");
    assert!(error.contains("pythn"), "{error}");
}

#[test]
fn torch_versions_are_parsed_at_their_line_and_compared_as_numbers() {
    // A torch value the parser refuses is reported at its line, before any lookup could skip it.
    for (text, line) in [
        ("schema_version: 2\ntorch:\n  - series: \"2.x\"\n", "knowledge.yaml:3:"),
        (
            "schema_version: 2\ntorch:\n  - series: \"2.7\"\n    releases:\n      - torch: \"2.7.1rc1\"\n",
            "knowledge.yaml:5:",
        ),
    ] {
        let error = Knowledge::parse(text, "knowledge.yaml")
            .unwrap_err()
            .to_string();
        assert!(error.contains(line), "{error}");
        assert!(error.contains("is not a valid torch version"), "{error}");
    }
    // Lookups compare numbers: 2.10 is newer than 2.9 and is not 2.1.
    let knowledge = Knowledge::embedded();
    assert_eq!(
        knowledge
            .torch_series(&torch("2.10"))
            .unwrap()
            .series
            .as_str(),
        "2.10"
    );
    assert_eq!(
        knowledge
            .torch_series(&torch("2.1"))
            .unwrap()
            .series
            .as_str(),
        "2.1"
    );
    let (series, release) = knowledge.torch_release(&torch("2.10.0")).unwrap();
    assert_eq!(
        (series.series.as_str(), release.torch.as_str()),
        ("2.10", "2.10.0")
    );
    // A series names no release; a release the knowledge lacks names none either.
    assert!(knowledge.torch_release(&torch("2.10")).is_none());
    assert!(knowledge.torch_release(&torch("2.10.99")).is_none());
}

#[test]
fn os_names_are_parsed_at_their_knowledge_line() {
    let error = Knowledge::parse(
        "schema_version: 2\nos:\n  - name: fedora40\n",
        "knowledge.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("knowledge.yaml:3:"), "{error}");
    assert!(error.contains("malformed OS \"fedora40\""), "{error}");
    // The lookup takes the parsed name; Ubuntu and Debian releases are told apart by family.
    let knowledge = Knowledge::embedded();
    let noble = knowledge.os(&"ubuntu24.04".into()).unwrap();
    assert!(!noble.name.is_debian());
    assert!(knowledge.os(&"debian12".into()).unwrap().name.is_debian());
    assert!(knowledge.os(&"ubuntu10.04".into()).is_none());
}

#[test]
fn debian_12_and_the_pypi_toolkit_tree_are_known() {
    let knowledge = Knowledge::embedded();
    let debian = knowledge.os(&"debian12".into()).unwrap();
    assert_eq!(
        (debian.glibc.as_str(), debian.python.as_str()),
        ("2.36", "3.11")
    );
    assert_eq!(
        knowledge.family(13).unwrap().pypi_toolkit.as_deref(),
        Some("cu13")
    );
    assert_eq!(knowledge.family(12).unwrap().pypi_toolkit, None);
    let error = error_of(&edited(
        r#"pypi_toolkit: "cu13""#,
        r#"pypi_toolkit: "../x""#,
    ));
    assert!(
        error.contains("pypi_toolkit \"../x\" must be a folder name"),
        "{error}"
    );
}

#[test]
fn third_audit_data_corrections_issue_25() {
    let knowledge = Knowledge::embedded();
    let exact = |v: &str| knowledge.cuda.iter().find(|c| c.version == v).unwrap();
    // dist/end-of-life/11.6.1/ubuntu2004/base/Dockerfile has a base-arm64 stage.
    assert_eq!(
        exact("11.6.1").platforms(),
        [PLATFORM_AMD64, PLATFORM_ARM64]
    );
    assert_eq!(
        exact("11.6.1").forward_compat_branches(PLATFORM_ARM64),
        [] as [u64; 0]
    );
    // torch 2.6's aarch64 wheels are manylinux_2_28; its x86_64 CPU and cu124 ones manylinux2014.
    let series = knowledge.torch_series(&torch("2.6")).unwrap();
    assert_eq!(series.glibc_min_for(None, PLATFORM_ARM64), "2.28");
    assert_eq!(series.glibc_min_for(None, PLATFORM_AMD64), "2.17");
    let cu126 = series.cuda.iter().find(|v| v.cuda == "12.6").unwrap();
    assert_eq!(series.glibc_min_for(Some(cu126), PLATFORM_AMD64), "2.28");
    // 2.11's release channel and release branch build 12.6, 12.8 and 13.0 only.
    let variants: Vec<&str> = knowledge
        .torch_series(&torch("2.11"))
        .unwrap()
        .cuda
        .iter()
        .map(|v| v.cuda.as_str())
        .collect();
    assert_eq!(variants, ["12.6", "12.8", "13.0"]);
}

#[test]
fn platform_glibc_floors_name_known_platforms() {
    let error = error_of(&edited(
        "platform_glibc_min: {linux/arm64: \"2.28\"}",
        "platform_glibc_min: {linux/riscv64: \"2.28\"}",
    ));
    assert!(
        error.contains("torch 2.6: platform_glibc_min names unknown platform linux/riscv64"),
        "{error}"
    );
}

/// Versions are parsed when the file is read, into types: a malformed one is refused at its line
/// and column, whichever list or field holds it (no value is kept as text to fail later).
#[test]
fn malformed_versions_are_refused_at_their_line() {
    let line_of = |needle: &str| {
        EMBEDDED
            .lines()
            .position(|line| line.contains(needle))
            .expect("the edited line is in knowledge.yaml")
            + 1
    };
    for (from, to) in [
        (
            "platform_glibc_min: {linux/arm64: \"2.28\"}",
            "platform_glibc_min: {linux/arm64: \"2.28b\"}",
        ),
        (
            "{platform: linux/amd64, cuda: \"13.0\", cuda_runtime: \"13.0.2\", cudnn: \"9.19.0.56\", nccl: \"2.28.9\"}",
            "{platform: linux/amd64, cuda: \"13.0\", cuda_runtime: \"13.0.2\", cudnn: \"9.19.0.56\", nccl: \"2.28.9-1\"}",
        ),
        (
            "cudart: \"11.0.221\", ubuntu: [\"16.04\"",
            "cudart: \"11.0.221\", ubuntu: [\"16.04 LTS\"",
        ),
        (
            "{name: \"debian12\", base: \"debian:12\", codename: bookworm, glibc: \"2.36\", python: \"3.11\"",
            "{name: \"debian12\", base: \"debian:12\", codename: bookworm, glibc: \"2.36\", python: \"3.11.x\"",
        ),
        (
            "{cuda: \"12.9\", adds: [\"10.3\", \"12.1\"]",
            "{cuda: \"12.9.\", adds: [\"10.3\", \"12.1\"]",
        ),
        (
            "archs: [\"7.0\", \"7.5\", \"8.0\", \"8.6\", \"9.0\", \"10.0\", \"12.0+PTX\"]",
            "archs: [\"7.0\", \"7.5\", \"8.0\", \"sm_86\", \"9.0\", \"10.0\", \"12.0+PTX\"]",
        ),
    ] {
        let line = line_of(from);
        let error = error_of(&edited(from, to));
        assert!(
            error.starts_with(&format!("k.yaml:{line}:")),
            "{to}: {error}"
        );
    }
    // A Python list and a series, in block style.
    let series =
        "  - series: \"2.12\"\n    python: [\"3.10\", \"3.11\", \"3.12\", \"3.13\", \"3.14\"]";
    let line = line_of("series: \"2.12\"");
    let error = error_of(&edited(series, &series.replace("\"3.14\"", "\"3.14t\"")));
    assert!(
        error.starts_with(&format!("k.yaml:{}:", line + 1)),
        "{error}"
    );
    assert!(error.contains("malformed version \"3.14t\""), "{error}");
    let error = error_of(&edited(series, &series.replace("\"2.12\"", "\"2.12-rc\"")));
    assert!(error.starts_with(&format!("k.yaml:{line}:")), "{error}");
}

/// The fourth audit's facts (issue 46): CUDA 13.2.1 and 13.0.3 from NVIDIA's own Dockerfiles, their
/// driver minimums marked unconfirmed with the note saying why.
#[test]
fn fourth_audit_facts_are_recorded_with_what_stays_unconfirmed() {
    let knowledge = Knowledge::embedded();
    let release = |version: &str| {
        knowledge
            .cuda
            .iter()
            .find(|c| c.version == version)
            .unwrap_or_else(|| panic!("CUDA {version} missing"))
    };
    for (version, branches, cudart, driver) in [
        ("13.2.1", vec![535, 570, 580, 590], "13.2.75", "595.58.03"),
        (
            "13.0.3",
            vec![535, 550, 565, 570, 575],
            "13.0.96",
            "580.126.20",
        ),
    ] {
        let cuda = release(version);
        assert!(cuda.verified, "{version}");
        assert_eq!(cuda.brands.as_deref(), Some("current"), "{version}");
        assert_eq!(cuda.cudart.as_deref(), Some(cudart), "{version}");
        assert_eq!(cuda.ubuntu, ["22.04", "24.04"], "{version}");
        assert_eq!(
            cuda.platforms(),
            [PLATFORM_AMD64, PLATFORM_ARM64],
            "{version}"
        );
        for platform in [PLATFORM_AMD64, PLATFORM_ARM64] {
            assert_eq!(
                cuda.forward_compat_branches(platform),
                branches,
                "{version}"
            );
        }
        assert_eq!(cuda.driver_min.as_ref().unwrap().as_str(), driver);
        assert!(cuda.unconfirmed_driver_min().unwrap().contains("installer"));
        assert!(cuda.images_eol.is_none(), "{version} is a supported set");
    }
    assert!(release("13.0.0").images_eol.is_some());
    assert!(
        release("13.0.2").ubuntu.is_empty(),
        "no 13.0.2 Dockerfile was read"
    );
}

/// Debian 13 from its archive's release pocket, and Ubuntu 24.04's end of standard support marked
/// as disputed (the release-cycle table's month against the dates others give).
#[test]
fn debian_13_is_known_and_disputed_dates_are_marked() {
    let knowledge = Knowledge::embedded();
    let trixie = knowledge.os(&OsName::parse("debian13").unwrap()).unwrap();
    assert_eq!(
        (
            trixie.codename.as_str(),
            trixie.glibc.as_str(),
            trixie.python.as_str()
        ),
        ("trixie", "2.41", "3.13")
    );
    // torch 2.13's wheels run there: Python 3.13 is in its range, glibc 2.41 above its 2.28.
    let series = knowledge.torch_series(&torch("2.13")).unwrap();
    assert!(series.python.iter().any(|p| p == "3.13"));
    let noble = knowledge
        .os(&OsName::parse("ubuntu24.04").unwrap())
        .unwrap();
    let eol = noble.eol.as_ref().unwrap();
    assert!(!eol.verified && eol.note.as_deref().unwrap().contains("disagree"));
}

#[test]
fn an_unconfirmed_cuda_field_needs_a_note_and_a_value() {
    let line = EMBEDDED
        .lines()
        .find(|line| line.contains("{version: \"13.0.3\""))
        .unwrap();
    let note_start = line.find(", note: ").unwrap();
    let source_start = line
        .find(", source: [nvidia-cuda-installer-13.0.3")
        .unwrap();
    let without_note = format!("{}{}", &line[..note_start], &line[source_start..]);
    let error = error_of(&edited(line, &without_note));
    assert!(
        error.contains("CUDA 13.0.3 marks fields unconfirmed without a note"),
        "{error}"
    );
    let error = error_of(&edited(
        line,
        &line.replace("driver_min: \"580.126.20\", ", ""),
    ));
    assert!(
        error.contains("CUDA 13.0.3 marks its driver minimum unconfirmed but records none"),
        "{error}"
    );
}
