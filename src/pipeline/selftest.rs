//! Reading what ran inside an image: gpu-selftest's exit code and JSON report turned into a test
//! outcome (no GPU is a skip, not a failure), the pip and OS package lists, and the crates
//! cargo-auditable recorded in the gpu-selftest binary. Pure: text and bytes in, values out.

use crate::history::manifest::{checks_summary, BinaryRecord, Packages, PythonDistribution};
use crate::model::digest::Digest;
use crate::pipeline::results::TestOutcome;

/// Lists pip and OS packages; the marker separates the two lists.
pub(crate) const LIST_PACKAGES: &str = "if command -v pip >/dev/null 2>&1; then pip freeze --all 2>/dev/null; fi; echo '--- imagegen: os packages ---'; if command -v dpkg-query >/dev/null 2>&1; then dpkg-query -W -f='${Package}=${Version}\\n'; fi; echo '--- imagegen: python metadata ---'; find \"${VIRTUAL_ENV:-/opt/venv}\" \\( -path '*.dist-info/METADATA' -o -path '*.egg-info/PKG-INFO' \\) 2>/dev/null | while read -r file; do printf '%s\\t%s\\t%s\\n' \"$(sed -n 's/^Name: *//p' \"$file\" | head -n 1)\" \"$(sed -n 's/^Version: *//p' \"$file\" | head -n 1)\" \"${file%/*}\"; done";

/// Splits the output of [`LIST_PACKAGES`] into sorted pip and OS package lists.
pub(crate) fn parse_packages(output: &str) -> Packages {
    let (output, metadata) = output
        .split_once("--- imagegen: python metadata ---")
        .unwrap_or((output, ""));
    let (pip, os) = output
        .split_once("--- imagegen: os packages ---")
        .unwrap_or((output, ""));
    let mut python_metadata: Vec<PythonDistribution> = metadata
        .lines()
        .filter_map(|line| {
            let mut fields = line.trim_end_matches('\r').splitn(3, '\t');
            let (name, version, path) = (fields.next()?, fields.next()?, fields.next()?);
            (!name.trim().is_empty() && !version.trim().is_empty()).then(|| PythonDistribution {
                name: name.trim().to_string(),
                version: version.trim().to_string(),
                path: path.to_string(),
            })
        })
        .collect();
    python_metadata.sort();
    python_metadata.dedup();
    let lines = |text: &str| {
        let mut lines: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
        lines.sort();
        lines.dedup();
        lines
    };
    Packages {
        pip: lines(pip),
        os: lines(os),
        binaries: Vec::new(),
        python_metadata,
        apt_extras: std::collections::BTreeMap::new(),
    }
}

/// The ELF section cargo-auditable writes: zlib-compressed JSON of every crate of the binary.
const AUDIT_SECTION: &[u8] = b".dep-v0";
/// cargo-auditable caps its own reader's output at 8 MiB; a crate list is a few KiB.
const AUDIT_LIMIT: usize = 8 << 20;

/// The record of a binary copied to `path` in an image: its sha256 and, where it carries
/// cargo-auditable's crate list, its root crate's version and the crates linked into it. A binary
/// without the list (or not an ELF64 little-endian file) is recorded with a note, never refused.
pub(crate) fn binary_record(path: &str, bytes: &[u8]) -> BinaryRecord {
    let file_name = path.rsplit('/').next().unwrap_or(path).to_string();
    let mut record = BinaryRecord {
        path: path.to_string(),
        name: file_name,
        version: None,
        sha256: Digest::of(bytes),
        crates: Vec::new(),
        note: None,
    };
    match audit_crates(bytes) {
        Ok((root, crates)) => {
            if let Some((name, version)) = root {
                record.name = name;
                record.version = Some(version);
            }
            record.crates = crates;
        }
        Err(why) => record.note = Some(why),
    }
    record
}

/// The root crate and the crates (`name==version`, sorted, build-time-only ones left out) of
/// cargo-auditable's `.dep-v0` section.
#[allow(clippy::type_complexity)]
fn audit_crates(bytes: &[u8]) -> Result<(Option<(String, String)>, Vec<String>), String> {
    let section = elf_section(bytes, AUDIT_SECTION)?.ok_or_else(|| {
        "no .dep-v0 section: built without cargo-auditable, so its crates are unknown".to_string()
    })?;
    let json = miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(section, AUDIT_LIMIT)
        .map_err(|error| format!("the .dep-v0 section does not inflate: {error:?}"))?;
    let audit: serde_json::Value = serde_json::from_slice(&json)
        .map_err(|error| format!("the .dep-v0 section is not JSON: {error}"))?;
    let packages = audit["packages"]
        .as_array()
        .ok_or("the .dep-v0 section lists no packages")?;
    let mut root = None;
    let mut crates = Vec::new();
    for package in packages {
        let (Some(name), Some(version)) = (package["name"].as_str(), package["version"].as_str())
        else {
            return Err(format!(
                "a .dep-v0 package without name or version: {package}"
            ));
        };
        if package["root"] == true {
            root = Some((name.to_string(), version.to_string()));
        } else if package["kind"] != "build" {
            crates.push(format!("{name}=={version}"));
        }
    }
    crates.sort();
    crates.dedup();
    Ok((root, crates))
}

/// The contents of the section called `wanted` of an ELF64 little-endian file (x86_64, aarch64),
/// `None` when it has none. Every offset is checked against the file's length.
fn elf_section<'a>(bytes: &'a [u8], wanted: &[u8]) -> Result<Option<&'a [u8]>, String> {
    const NOT_ELF: &str = "not an ELF64 little-endian file";
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return Err(NOT_ELF.into());
    }
    let read = |offset: usize, width: usize| -> Result<u64, String> {
        let field = bytes
            .get(offset..offset + width)
            .ok_or_else(|| format!("truncated ELF file (offset {offset})"))?;
        Ok(field
            .iter()
            .rev()
            .fold(0u64, |value, byte| (value << 8) | u64::from(*byte)))
    };
    let headers = read(0x28, 8)? as usize;
    let header_size = read(0x3A, 2)? as usize;
    let count = read(0x3C, 2)? as usize;
    let names_index = read(0x3E, 2)? as usize;
    if header_size < 64 || names_index >= count {
        return Err(NOT_ELF.into());
    }
    let section = |index: usize| -> Result<(usize, usize, usize), String> {
        let header = headers + index * header_size;
        Ok((
            read(header, 4)? as usize,
            read(header + 24, 8)? as usize,
            read(header + 32, 8)? as usize,
        ))
    };
    let (_, names_offset, names_size) = section(names_index)?;
    let names = bytes
        .get(names_offset..names_offset.saturating_add(names_size))
        .ok_or("truncated ELF section names")?;
    for index in 0..count {
        let (name, offset, size) = section(index)?;
        let name = names.get(name..).unwrap_or_default();
        let name = &name[..name
            .iter()
            .position(|byte| *byte == 0)
            .unwrap_or(name.len())];
        if name == wanted {
            return bytes
                .get(offset..offset.saturating_add(size))
                .map(Some)
                .ok_or_else(|| "truncated .dep-v0 section".to_string());
        }
    }
    Ok(None)
}

/// Checks that `text` is a gpu-selftest baseline (`gpu-selftest --save-baseline FILE`) before
/// it is handed to every self-test: JSON of kind `gpu-selftest-baseline`, schema version 1, with
/// figures. The self-test judges the figures; this only refuses a wrong file early.
pub(crate) fn check_baseline(text: &str) -> Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|error| format!("it is not JSON: {error}"))?;
    if value["kind"] != "gpu-selftest-baseline" {
        return Err(format!(
            "its kind is {}, not \"gpu-selftest-baseline\" (write one with `gpu-selftest --save-baseline FILE` on a node known to be good)",
            value["kind"]
        ));
    }
    if value["schema_version"] != 1 {
        return Err(format!(
            "its schema version is {}; this imagegen passes version 1",
            value["schema_version"]
        ));
    }
    if value["figures"]
        .as_array()
        .is_none_or(|figures| figures.is_empty())
    {
        return Err("it holds no figures".into());
    }
    Ok(())
}

/// Reads gpu-selftest's exit code and JSON report. Without GPUs, an exit 2 ("cannot run: no
/// driver") means the binary ran in the image and found no GPU: the test is skipped, not failed.
pub(crate) fn interpret_selftest(
    exit_code: i64,
    stdout: &str,
    stderr: &str,
    gpus: bool,
) -> TestOutcome {
    let report: Option<serde_json::Value> = serde_json::from_str(stdout.trim()).ok();
    let checks_summary = |report: &Option<serde_json::Value>| -> String {
        report
            .as_ref()
            .and_then(|r| r["checks"].as_array())
            .map(|checks| checks_summary(checks))
            .unwrap_or_default()
    };
    let error_text = || {
        report
            .as_ref()
            .and_then(|r| r["error"].as_str().map(String::from))
            .unwrap_or_else(|| {
                stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("no output")
                    .trim()
                    .to_string()
            })
    };
    // The report's verdict is recomputed from its checks, as for an imported report: a report
    // whose `overall` or a check's status disagrees with what it carries is no pass.
    let disagreement = report.as_ref().and_then(|r| {
        crate::history::test_results::read_verdict(r)
            .err()
            .map(|error| error.to_string())
    });
    match exit_code {
        _ if disagreement.is_some() => TestOutcome::Error {
            summary: format!("gpu-selftest's report {}", disagreement.unwrap_or_default()),
            report,
        },
        0 if report.as_ref().is_some_and(|r| r["overall"] == "pass") => TestOutcome::Pass {
            summary: checks_summary(&report),
            report,
        },
        0 => TestOutcome::Error {
            summary: "gpu-selftest exited 0 without a JSON report".into(),
            report,
        },
        1 => TestOutcome::Fail {
            summary: checks_summary(&report),
            report,
        },
        2 if !gpus => TestOutcome::Skipped {
            summary: format!(
                "no GPU on this host; gpu-selftest ran in the image and said: {}",
                error_text()
            ),
        },
        2 => TestOutcome::Error {
            summary: error_text(),
            report,
        },
        126 | 127 => TestOutcome::Error {
            summary: format!(
                "gpu-selftest could not be executed in the image (exit {exit_code}): {}",
                error_text()
            ),
            report,
        },
        other => TestOutcome::Error {
            summary: format!("gpu-selftest exited {other}: {}", error_text()),
            report,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 little-endian file with the sections `sections` (name, contents), laid out as a
    /// linker would: header, section contents, the section-name table, section headers.
    fn elf(sections: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut file = vec![0u8; 64];
        file[..6].copy_from_slice(b"\x7fELF\x02\x01");
        let mut names = vec![0u8];
        let mut headers = vec![[0u8; 64]];
        let add = |file: &mut Vec<u8>, names: &mut Vec<u8>, name: &str, contents: &[u8]| {
            let mut header = [0u8; 64];
            header[..4].copy_from_slice(&(names.len() as u32).to_le_bytes());
            names.extend_from_slice(name.as_bytes());
            names.push(0);
            header[24..32].copy_from_slice(&(file.len() as u64).to_le_bytes());
            header[32..40].copy_from_slice(&(contents.len() as u64).to_le_bytes());
            file.extend_from_slice(contents);
            header
        };
        for (name, contents) in sections {
            headers.push(add(&mut file, &mut names, name, contents));
        }
        let names_name = names.len();
        names.extend_from_slice(b".shstrtab\0");
        let mut names_header = [0u8; 64];
        names_header[..4].copy_from_slice(&(names_name as u32).to_le_bytes());
        names_header[24..32].copy_from_slice(&(file.len() as u64).to_le_bytes());
        names_header[32..40].copy_from_slice(&(names.len() as u64).to_le_bytes());
        file.extend_from_slice(&names);
        headers.push(names_header);
        let header_offset = file.len() as u64;
        for header in &headers {
            file.extend_from_slice(header);
        }
        file[0x28..0x30].copy_from_slice(&header_offset.to_le_bytes());
        file[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        file[0x3C..0x3E].copy_from_slice(&(headers.len() as u16).to_le_bytes());
        file[0x3E..0x40].copy_from_slice(&((headers.len() - 1) as u16).to_le_bytes());
        file
    }

    #[test]
    fn the_crates_cargo_auditable_recorded_are_read_from_the_binary() {
        let audit = r#"{"format":1,"packages":[
            {"name":"anyhow","version":"1.0.105","source":"crates.io"},
            {"name":"autocfg","version":"1.5.1","source":"crates.io","kind":"build"},
            {"name":"cudarc","version":"0.19.10","source":"crates.io","dependencies":[0]},
            {"name":"gpu-selftest","version":"0.1.0","source":"local","dependencies":[0,2],"root":true}]}"#;
        let section = miniz_oxide::deflate::compress_to_vec_zlib(audit.as_bytes(), 6);
        let binary = elf(&[(".text", vec![0x90; 32]), (".dep-v0", section)]);
        let record = binary_record("/usr/local/bin/gpu-selftest", &binary);
        assert_eq!(record.name, "gpu-selftest");
        assert_eq!(record.version.as_deref(), Some("0.1.0"));
        assert_eq!(record.sha256, Digest::of(&binary));
        assert_eq!(record.crates, ["anyhow==1.0.105", "cudarc==0.19.10"]);
        assert_eq!(record.note, None);

        // A binary built without cargo-auditable (this test's own) is recorded with a note.
        let own = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let record = binary_record("/usr/local/bin/gpu-selftest", &own);
        assert_eq!(
            (record.name.as_str(), record.version.as_deref()),
            ("gpu-selftest", None)
        );
        assert!(record.crates.is_empty());
        assert!(record.note.unwrap().starts_with("no .dep-v0 section"));

        // Not ELF, a truncated file, a section that does not inflate: notes, never a panic.
        let note = |bytes: &[u8]| binary_record("/x", bytes).note.unwrap();
        assert_eq!(note(b"#!/bin/sh\n"), "not an ELF64 little-endian file");
        assert!(
            note(&binary[..200]).starts_with("truncated"),
            "{}",
            note(&binary[..200])
        );
        let broken = elf(&[(".dep-v0", b"not zlib".to_vec())]);
        assert!(note(&broken).starts_with("the .dep-v0 section does not inflate"));
    }

    #[test]
    fn package_lists_are_split_and_sorted() {
        let packages = parse_packages("torch==2.7.1\nnumpy==2.1.0\n--- imagegen: os packages ---\nlibc6=2.39-0ubuntu8\ngcc=4:13.2.0-7ubuntu1\n");
        assert_eq!(packages.pip, vec!["numpy==2.1.0", "torch==2.7.1"]);
        assert_eq!(
            packages.os,
            vec!["gcc=4:13.2.0-7ubuntu1", "libc6=2.39-0ubuntu8"]
        );
        assert_eq!(
            parse_packages("--- imagegen: os packages ---\n"),
            Packages::default()
        );
        let found = parse_packages("pip==25.3\n--- imagegen: os packages ---\nlibc6=2.36-9\n--- imagegen: python metadata ---\nwheel\t0.46.3\t/opt/venv/lib/python3.11/site-packages/setuptools/_vendor/wheel-0.46.3.dist-info\npip\t25.3\t/opt/venv/lib/python3.11/site-packages/pip-25.3.dist-info\n\t\t/broken\n");
        assert_eq!(found.pip, vec!["pip==25.3"]);
        assert_eq!(found.os, vec!["libc6=2.36-9"]);
        let names: Vec<(&str, &str)> = found
            .python_metadata
            .iter()
            .map(|d| (d.name.as_str(), d.version.as_str()))
            .collect();
        assert_eq!(names, vec![("pip", "25.3"), ("wheel", "0.46.3")]);
    }

    #[test]
    fn selftest_results_are_interpreted() {
        let pass = r#"{"schema_version":1,"overall":"pass","checks":[{"name":"matmul","status":"pass","summary":"ok"},{"name":"shm","status":"warn","summary":"64 MiB"}]}"#;
        assert_eq!(interpret_selftest(0, pass, "", true).status(), "pass");
        assert_eq!(
            interpret_selftest(0, pass, "", true).summary(),
            "1 checks passed"
        );
        let fail = r#"{"schema_version":1,"overall":"fail","checks":[{"name":"matmul","status":"fail","summary":"bf16 error 0.3 > 0.02"}]}"#;
        let outcome = interpret_selftest(1, fail, "", true);
        assert_eq!(outcome.status(), "fail");
        assert_eq!(outcome.summary(), "matmul: bf16 error 0.3 > 0.02");
        let error = r#"{"schema_version":1,"overall":"error","error":"cannot load libcuda.so.1","checks":[]}"#;
        let skipped = interpret_selftest(2, error, "", false);
        assert_eq!(skipped.status(), "skipped");
        assert!(skipped.summary().contains("cannot load libcuda.so.1"));
        assert_eq!(
            interpret_selftest(2, error, "", true).status(),
            "error",
            "with GPUs, exit 2 is an error"
        );
        let missing = interpret_selftest(
            127,
            "",
            "exec: \"gpu-selftest\": executable file not found in $PATH",
            false,
        );
        assert_eq!(missing.status(), "error");
        assert!(missing.summary().contains("could not be executed"));
        assert_eq!(
            interpret_selftest(0, "not json", "", true).status(),
            "error"
        );
    }

    #[test]
    fn baselines_are_checked_before_they_are_passed_on() {
        let good = r#"{"schema_version":1,"kind":"gpu-selftest-baseline","gpus":["NVIDIA H200"],"figures":[{"check":"matmul","figure":"bf16","size":8192,"unit":"tflops","value":815.0,"per_gpu":[818.0,810.0]}]}"#;
        assert_eq!(check_baseline(good), Ok(()));
        assert!(check_baseline("not json").unwrap_err().contains("not JSON"));
        assert!(
            check_baseline(r#"{"schema_version":1,"overall":"pass","checks":[]}"#)
                .unwrap_err()
                .contains("--save-baseline")
        );
        assert!(
            check_baseline(&good.replace("\"schema_version\":1", "\"schema_version\":2"))
                .unwrap_err()
                .contains("schema version is 2")
        );
        assert!(check_baseline(
            r#"{"schema_version":1,"kind":"gpu-selftest-baseline","figures":[]}"#
        )
        .unwrap_err()
        .contains("no figures"));
    }
}
