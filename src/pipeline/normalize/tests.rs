//! One test per normalization rule, on tars built in memory.

use super::*;
use crate::pipeline::image_diff::layer_files;

const EPOCH: u64 = 1_700_000_000;

/// What a test layer entry is: path, type, mode, uid, gid, mtime, content or link target.
struct Item<'a> {
    path: &'a str,
    kind: tar::EntryType,
    mode: u32,
    owner: (u64, u64),
    mtime: u64,
    data: &'a [u8],
}

fn item(path: &str, mtime: u64) -> Item<'_> {
    Item {
        path,
        kind: tar::EntryType::Regular,
        mode: 0o644,
        owner: (0, 0),
        mtime,
        data: b"content",
    }
}

fn layer(items: &[Item<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for item in items {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(item.kind);
        header.set_mode(item.mode);
        header.set_uid(item.owner.0);
        header.set_gid(item.owner.1);
        header.set_mtime(item.mtime);
        if item.kind.is_symlink() || item.kind.is_hard_link() {
            header.set_size(0);
            builder
                .append_link(
                    &mut header,
                    item.path,
                    std::str::from_utf8(item.data).unwrap(),
                )
                .unwrap();
        } else {
            let data = if item.kind.is_dir() {
                &b""[..]
            } else {
                item.data
            };
            header.set_size(data.len() as u64);
            builder.append_data(&mut header, item.path, data).unwrap();
        }
    }
    builder.into_inner().unwrap()
}

/// (path, type, mode, uid, gid, mtime) of every entry, in order.
fn listing(layer: &[u8]) -> Vec<(String, tar::EntryType, u32, u64, u64, u64)> {
    let mut archive = tar::Archive::new(layer);
    archive
        .entries()
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let header = entry.header();
            (
                String::from_utf8_lossy(&entry.path_bytes()).into_owned(),
                header.entry_type(),
                header.mode().unwrap(),
                header.uid().unwrap(),
                header.gid().unwrap(),
                header.mtime().unwrap(),
            )
        })
        .collect()
}

fn paths(layer: &[u8]) -> Vec<String> {
    listing(layer).into_iter().map(|entry| entry.0).collect()
}

#[test]
fn entries_come_in_path_order_with_hard_links_last() {
    let input = layer(&[
        item("usr/lib/b.so", 1),
        Item {
            kind: tar::EntryType::Link,
            data: b"zz/target",
            ..item("aa/hardlink", 1)
        },
        Item {
            kind: tar::EntryType::Directory,
            mode: 0o755,
            ..item("usr/", 1)
        },
        item("zz/target", 1),
        item("usr/lib/a.so", 1),
        Item {
            kind: tar::EntryType::Symlink,
            data: b"a.so",
            ..item("usr/lib/a.so.1", 1)
        },
    ]);
    let output = normalize_layer(&input, EPOCH).unwrap();
    assert_eq!(
        paths(&output),
        [
            "usr/",
            "usr/lib/a.so",
            "usr/lib/a.so.1",
            "usr/lib/b.so",
            "zz/target",
            "aa/hardlink"
        ]
    );
    let mut archive = tar::Archive::new(output.as_slice());
    let links: Vec<String> = archive
        .entries()
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.unwrap();
            entry
                .link_name_bytes()
                .map(|link| String::from_utf8_lossy(&link).into_owned())
        })
        .collect();
    assert_eq!(links, ["a.so", "zz/target"], "link targets are kept");
}

#[test]
fn mtimes_after_the_epoch_are_clamped_and_older_ones_kept() {
    let input = layer(&[
        item("new", EPOCH + 5),
        item("old", 1_000),
        item("at", EPOCH),
    ]);
    let mtimes: Vec<(String, u64)> = listing(&normalize_layer(&input, EPOCH).unwrap())
        .into_iter()
        .map(|entry| (entry.0, entry.5))
        .collect();
    assert_eq!(
        mtimes,
        [
            ("at".into(), EPOCH),
            ("new".into(), EPOCH),
            ("old".into(), 1_000)
        ]
    );
}

#[test]
fn files_that_only_record_the_build_time_are_left_out_and_whiteouts_kept() {
    let input = layer(&[
        item("var/log/dpkg.log", EPOCH + 9),
        item("var/log/apt/history.log", EPOCH + 9),
        item("var/log/apt/term.log", EPOCH + 9),
        item("var/cache/ldconfig/aux-cache", EPOCH + 9),
        item("etc/ld.so.cache", EPOCH + 9),
        item("etc/.wh.removed-file", EPOCH + 9),
        item("opt/dir/.wh..wh..opq", EPOCH + 9),
        item("var/log/other.log", EPOCH + 9),
    ]);
    assert_eq!(
        paths(&normalize_layer(&input, EPOCH).unwrap()),
        [
            "etc/.wh.removed-file",
            "etc/ld.so.cache",
            "opt/dir/.wh..wh..opq",
            "var/log/other.log"
        ]
    );
}

#[test]
fn owners_modes_and_extended_attributes_are_kept() {
    let mut builder = tar::Builder::new(Vec::new());
    builder
        .append_pax_extensions([
            ("SCHILY.xattr.security.capability", &b"\x01\x00\x00\x02"[..]),
            ("mtime", &b"1800000000.123"[..]),
        ])
        .unwrap();
    let mut header = tar::Header::new_ustar();
    header.set_mode(0o4750);
    header.set_uid(1000);
    header.set_gid(42);
    header.set_mtime(EPOCH + 100);
    header.set_size(3);
    header.set_username("alice").unwrap();
    builder
        .append_data(&mut header, "usr/bin/ping", &b"elf"[..])
        .unwrap();
    let input = builder.into_inner().unwrap();
    let output = normalize_layer(&input, EPOCH).unwrap();
    let listed = listing(&output);
    assert_eq!(
        listed,
        [(
            "usr/bin/ping".to_string(),
            tar::EntryType::Regular,
            0o4750,
            1000,
            42,
            EPOCH
        )]
    );
    let mut archive = tar::Archive::new(output.as_slice());
    let mut entry = archive.entries().unwrap().next().unwrap().unwrap();
    assert_eq!(entry.header().username().unwrap(), Some("alice"));
    let pax: Vec<(String, Vec<u8>)> = entry
        .pax_extensions()
        .unwrap()
        .unwrap()
        .map(|extension| {
            let extension = extension.unwrap();
            (
                extension.key().unwrap().to_string(),
                extension.value_bytes().to_vec(),
            )
        })
        .collect();
    assert_eq!(
        pax,
        [(
            "SCHILY.xattr.security.capability".to_string(),
            b"\x01\x00\x00\x02".to_vec()
        )],
        "the xattr stays, the fractional mtime record goes"
    );
}

#[test]
fn a_timestamp_pyc_records_the_clamped_source_mtime() {
    let mut pyc = vec![0xcb, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0];
    pyc.extend_from_slice(&((EPOCH + 60) as u32).to_le_bytes());
    pyc.extend_from_slice(&7u32.to_le_bytes());
    pyc.extend_from_slice(b"code");
    let input = layer(&[Item {
        data: &pyc,
        ..item("app/__pycache__/m.cpython-312.pyc", EPOCH + 60)
    }]);
    let output = normalize_layer(&input, EPOCH).unwrap();
    let files = layer_files(&output).unwrap();
    let mut expected = pyc.clone();
    expected[8..12].copy_from_slice(&(EPOCH as u32).to_le_bytes());
    assert_eq!(
        files["app/__pycache__/m.cpython-312.pyc"].content,
        Digest::of(&expected)
    );
    // A hash-based pyc (flags 1) is content only: left as it is.
    let mut hashed = pyc.clone();
    hashed[4] = 1;
    assert!(!clamp_pyc(&mut hashed.clone(), EPOCH));
    let mut older = pyc;
    older[8..12].copy_from_slice(&5u32.to_le_bytes());
    assert!(!clamp_pyc(&mut older, EPOCH), "an older source time stays");
}

#[test]
fn normalizing_twice_changes_nothing_and_order_of_input_does_not_matter() {
    let items = || {
        vec![
            item("b", EPOCH + 3),
            item("a", 5),
            item("var/log/dpkg.log", 9),
            Item {
                kind: tar::EntryType::Directory,
                mode: 0o755,
                ..item("c/", EPOCH + 1)
            },
        ]
    };
    let once = normalize_layer(&layer(&items()), EPOCH).unwrap();
    assert_eq!(normalize_layer(&once, EPOCH).unwrap(), once);
    let mut reversed = items();
    reversed.reverse();
    assert_eq!(normalize_layer(&layer(&reversed), EPOCH).unwrap(), once);
}

#[test]
fn the_config_carries_the_epoch_only_and_the_new_diff_ids() {
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "created": "2026-12-02T15:31:07.123456789Z",
        "container": "4f1e2d",
        "container_config": {"Hostname": "4f1e2d"},
        "docker_version": "20.10.24",
        "config": {"Env": ["A=1"], "Image": "sha256:step-before", "Labels": {"imagegen.build-key": "sha256:k", "org.opencontainers.image.created": "2026-12-02T15:30:00Z"}},
        "history": [
            {"created": "2024-01-01T00:00:00Z", "created_by": "base"},
            {"created": "2026-12-02T15:31:07Z", "created_by": "RUN x", "empty_layer": true}
        ],
        "rootfs": {"type": "layers", "diff_ids": ["sha256:old"]}
    });
    let diff_ids = [Digest::of(b"layer")];
    let normalized =
        normalize_config(&serde_json::to_vec(&config).unwrap(), EPOCH, &diff_ids).unwrap();
    let normalized: Value = serde_json::from_slice(&normalized).unwrap();
    let time = "2023-11-14T22:13:20Z";
    assert_eq!(normalized["created"], time);
    assert_eq!(normalized["history"][0]["created"], time);
    assert_eq!(normalized["history"][1]["created"], time);
    assert_eq!(normalized["history"][1]["created_by"], "RUN x");
    for gone in ["container", "container_config", "docker_version"] {
        assert!(normalized.get(gone).is_none(), "{gone} stays: {normalized}");
    }
    let labels = &normalized["config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.created"], time);
    assert_eq!(labels["imagegen.build-key"], "sha256:k");
    assert_eq!(labels[NORMALIZED_LABEL], EPOCH.to_string());
    assert_eq!(normalized["config"]["Env"][0], "A=1");
    assert!(normalized["config"].get("Image").is_none());
    assert_eq!(
        normalized["rootfs"]["diff_ids"],
        serde_json::json!([diff_ids[0].as_str()])
    );
}

/// A daemon build's config as `docker save` gives it: a base layer, a RUN layer, an ENV and a
/// LABEL step; `labels` and `extra` (steps after the LABEL) vary.
fn raw_build_config(labels: Value, extra: &[Value]) -> Value {
    let mut history = vec![
        serde_json::json!({"created": "2024-01-01T00:00:00Z", "created_by": "base", "comment": "imported"}),
        serde_json::json!({"created": "2026-12-02T15:31:00Z", "created_by": "/bin/sh -c apt-get install x"}),
        serde_json::json!({"created": "2026-12-02T15:31:05Z", "created_by": "/bin/sh -c #(nop)  ENV A=1", "empty_layer": true}),
        serde_json::json!({"created": "2026-12-02T15:31:06Z", "created_by": "/bin/sh -c #(nop)  LABEL a=b", "empty_layer": true}),
    ];
    history.extend(extra.iter().cloned());
    serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "created": "2026-12-02T15:31:07.123456789Z",
        "container": "4f1e2d",
        "container_config": {"Hostname": "4f1e2d"},
        "docker_version": "20.10.24",
        "config": {
            "Hostname": "", "Domainname": "", "User": "", "AttachStdin": false, "Tty": false,
            "Env": ["A=1"], "Cmd": ["bash"], "Image": "sha256:step-before", "Volumes": null,
            "WorkingDir": "", "Entrypoint": null, "OnBuild": null, "Labels": labels
        },
        "history": history,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:raw1", "sha256:raw2"]}
    })
}

/// The inspect answer's `Config` of a build with `config` (what the daemon reports: the same
/// object, `Image` named).
fn inspect_config_of(config: &Value) -> Value {
    config["config"].clone()
}

fn history_of(config: &Value) -> Vec<(String, String)> {
    config["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            (
                step["created_by"].as_str().unwrap().to_string(),
                step.get("comment")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

/// The image [`config_from_template`] makes for daemon build `build` over the normalized config
/// `template`, with `layers`.
fn made_from(template: &[u8], build: &Value, layers: &[NormalizedLayer]) -> NormalizedImage {
    let config = config_from_template(
        template,
        &inspect_config_of(build),
        &history_of(build),
        layers.len(),
    )
    .unwrap();
    assemble(&config, layers.to_vec(), EPOCH).unwrap()
}

#[test]
fn a_label_change_gives_the_config_a_full_normalization_gives_without_the_export() {
    let layers = vec![
        NormalizedLayer {
            gzip: None,
            digest: Digest::of(b"gz1"),
            diff_id: Digest::of(b"l1"),
            unpacked_size: 10,
            compressed_size: 5,
        },
        NormalizedLayer {
            gzip: None,
            digest: Digest::of(b"gz2"),
            diff_id: Digest::of(b"l2"),
            unpacked_size: 20,
            compressed_size: 7,
        },
    ];
    let first = raw_build_config(
        serde_json::json!({"a": "b", "imagegen.build-key": "sha256:one"}),
        &[],
    );
    let first_normalized =
        assemble(&serde_json::to_vec(&first).unwrap(), layers.clone(), EPOCH).unwrap();
    // The same build's own answers give its config back: the check a cold build makes.
    let again = made_from(&first_normalized.config, &first, &layers);
    assert_eq!(again.config, first_normalized.config);
    assert_eq!(again.manifest_digest, first_normalized.manifest_digest);

    // A label changed and a step added after it (CMD): the layers are the same.
    let mut second = raw_build_config(
        serde_json::json!({"a": "c", "imagegen.build-key": "sha256:two", "org.opencontainers.image.revision": "abc"}),
        &[
            serde_json::json!({"created": "2026-12-03T00:00:00Z", "created_by": "/bin/sh -c #(nop)  CMD [\"python\"]", "empty_layer": true}),
        ],
    );
    second["history"][3]["created_by"] = Value::String("/bin/sh -c #(nop)  LABEL a=c".into());
    second["config"]["Cmd"] = serde_json::json!(["python"]);
    second["config"]["Entrypoint"] = serde_json::json!(["/entry"]);
    second["config"]["Image"] = Value::String("sha256:another-step".into());
    let cold = assemble(&serde_json::to_vec(&second).unwrap(), layers.clone(), EPOCH).unwrap();
    let warm = made_from(&first_normalized.config, &second, &layers);
    assert_eq!(
        String::from_utf8_lossy(&warm.config),
        String::from_utf8_lossy(&cold.config)
    );
    assert_eq!(warm.manifest_digest, cold.manifest_digest);
    assert_ne!(warm.config_digest, first_normalized.config_digest);

    // A field the new build drops (no StopSignal any more) goes.
    let mut third = raw_build_config(serde_json::json!({"a": "b"}), &[]);
    third["config"]["StopSignal"] = Value::String("SIGINT".into());
    let with_signal =
        assemble(&serde_json::to_vec(&third).unwrap(), layers.clone(), EPOCH).unwrap();
    assert_eq!(
        made_from(&with_signal.config, &first, &layers).config,
        first_normalized.config
    );
}

#[test]
fn steps_that_do_not_add_up_to_the_layers_are_refused() {
    let first = raw_build_config(serde_json::json!({"a": "b"}), &[]);
    let template = normalize_config(
        &serde_json::to_vec(&first).unwrap(),
        EPOCH,
        &[Digest::of(b"l1"), Digest::of(b"l2")],
    )
    .unwrap();
    // The RUN step's text changed: it made a layer, which a template entry no longer says.
    let mut other = first.clone();
    other["history"][1]["created_by"] = Value::String("/bin/sh -c apt-get install y".into());
    let error = config_from_template(
        &template,
        &inspect_config_of(&other),
        &history_of(&other),
        2,
    )
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("1 steps that made a layer against 2 layers"),
        "{error}"
    );
    let error = config_from_template(
        &template,
        &inspect_config_of(&first),
        &history_of(&first),
        3,
    )
    .unwrap_err();
    assert!(error.to_string().contains("against 3 layers"), "{error}");
}

#[test]
fn the_epoch_is_the_base_images_created_time() {
    assert_eq!(epoch_of_created(Some("2023-11-14T22:13:20Z")), EPOCH);
    assert_eq!(
        epoch_of_created(Some("2023-11-14T22:13:20.987654321Z")),
        EPOCH
    );
    assert_eq!(epoch_of_created(None), 0);
    assert_eq!(epoch_of_created(Some("yesterday")), 0);
}

#[test]
fn gzip_is_a_valid_deterministic_stream_of_independent_chunks() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    // More than two chunks, partly compressible.
    let data: Vec<u8> = (0..(GZIP_CHUNK * 2 + 12_345))
        .map(|index| ((index * 7919) % 251) as u8 ^ ((index / 1000) as u8))
        .collect();
    let compressed = gzip(&data);
    assert_eq!(gzip(&data), compressed, "same bytes, same stream");
    assert_eq!(&compressed[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
    assert_eq!(gunzip(&compressed).unwrap(), data);
    // The stream is the chunks compressed one after another: threads change nothing.
    let mut sequential = compressed[..10].to_vec();
    let chunks: Vec<&[u8]> = data.chunks(GZIP_CHUNK).collect();
    for (index, chunk) in chunks.iter().enumerate() {
        sequential.extend(deflate_chunk(chunk, index == chunks.len() - 1));
    }
    sequential.extend(crc32(&data).to_le_bytes());
    sequential.extend((data.len() as u32).to_le_bytes());
    assert_eq!(sequential, compressed);
    assert_eq!(gunzip(&gzip(b"")).unwrap(), b"");
}

#[test]
fn an_export_becomes_a_manifest_over_normalized_layers_and_a_loadable_archive() {
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux", "created": "2026-12-02T15:31:07Z",
        "config": {}, "history": [], "rootfs": {"type": "layers", "diff_ids": []}
    });
    let export = |mtime: u64| {
        let first = layer(&[item("etc/a", mtime), item("etc/b", 1)]);
        let mut builder = tar::Builder::new(Vec::new());
        for (name, data) in [
            ("aaa/layer.tar", first.clone()),
            ("cfg.json", serde_json::to_vec(&config).unwrap()),
            (
                "manifest.json",
                serde_json::to_vec(&serde_json::json!([
                    {"Config": "cfg.json", "RepoTags": ["x:1"], "Layers": ["aaa/layer.tar"]}
                ]))
                .unwrap(),
            ),
        ] {
            append_file(&mut builder, name, &data).unwrap();
        }
        builder.into_inner().unwrap()
    };
    let mut heard = Vec::new();
    let none = [];
    let first = normalize_archive(
        export(EPOCH + 10).as_slice(),
        EPOCH,
        &none,
        |unpacked, packed, known| heard.push((unpacked, packed, known)),
    )
    .unwrap();
    let second =
        normalize_archive(export(EPOCH + 99).as_slice(), EPOCH, &none, |_, _, _| {}).unwrap();
    assert_eq!(first.manifest_digest, second.manifest_digest);
    assert_eq!(heard.len(), 1);
    let gzipped = first.layers[0].gzip.as_deref().unwrap();
    assert_eq!(heard[0].1, gzipped.len() as u64);
    assert_eq!(first.layers[0].compressed_size, gzipped.len() as u64);
    assert!(!heard[0].2);
    assert_eq!(first.unpacked_size(), heard[0].0);
    let manifest: Value = serde_json::from_slice(&first.manifest).unwrap();
    assert_eq!(manifest["config"]["digest"], first.config_digest.as_str());
    assert_eq!(
        manifest["layers"][0]["digest"],
        first.layers[0].digest.as_str()
    );
    let unpacked = gunzip(gzipped).unwrap();
    assert_eq!(Digest::of(&unpacked), first.layers[0].diff_id);
    // The recorded size: the manifest's layer sizes (not the config) and the unpacked tars.
    let size = first.size();
    assert_eq!(
        size.compressed_bytes,
        manifest["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|layer| layer["size"].as_u64().unwrap())
            .sum::<u64>()
    );
    assert_eq!(size.compressed_bytes, gzipped.len() as u64);
    assert_eq!(size.unpacked_bytes, unpacked.len() as u64);
    assert_eq!(size.layers, 1);
    let archive = first.load_archive("x:1").unwrap();
    let mut names = Vec::new();
    for entry in tar::Archive::new(archive.concat().as_slice())
        .entries()
        .unwrap()
    {
        names.push(entry.unwrap().path().unwrap().display().to_string());
    }
    assert_eq!(
        names,
        [
            format!("{}/layer.tar", first.layers[0].digest.hex()),
            format!("{}.json", first.config_digest.hex()),
            "manifest.json".to_string()
        ]
    );
}

/// A layer as real images hold them: long paths, hard and symbolic links, extended attributes, an
/// owner name, a device, a timestamp `.pyc`, a time-only file, mtimes on both sides of the epoch,
/// in no order.
fn mixed_layer() -> Vec<u8> {
    let long = format!(
        "opt/venv/lib/python3.12/site-packages/{}/m.py",
        "n".repeat(120)
    );
    let mut pyc = vec![0xcb, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0];
    pyc.extend_from_slice(&((EPOCH + 60) as u32).to_le_bytes());
    pyc.extend_from_slice(&7u32.to_le_bytes());
    pyc.extend_from_slice(b"code");
    let mut builder = tar::Builder::new(Vec::new());
    let mut append = |path: &str, kind: tar::EntryType, mtime: u64, data: &[u8]| {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(kind);
        header.set_mode(0o755);
        header.set_uid(1000);
        header.set_gid(1000);
        header.set_mtime(mtime);
        header.set_username("team").unwrap();
        if kind.is_symlink() || kind.is_hard_link() {
            header.set_size(0);
            builder
                .append_link(&mut header, path, std::str::from_utf8(data).unwrap())
                .unwrap();
        } else {
            header.set_size(data.len() as u64);
            builder.append_data(&mut header, path, data).unwrap();
        }
    };
    append("usr/bin/z", tar::EntryType::Regular, EPOCH + 5, b"elf");
    append(
        "usr/bin/a-link",
        tar::EntryType::Link,
        EPOCH + 5,
        b"usr/bin/z",
    );
    append(&long, tar::EntryType::Regular, 7, b"print()");
    append(
        &format!("{long}.lnk"),
        tar::EntryType::Symlink,
        EPOCH + 9,
        long.as_bytes(),
    );
    append(
        "app/__pycache__/m.cpython-312.pyc",
        tar::EntryType::Regular,
        EPOCH + 60,
        &pyc,
    );
    append(
        "var/log/apt/history.log",
        tar::EntryType::Regular,
        EPOCH + 1,
        b"x",
    );
    append("etc/.wh.old", tar::EntryType::Regular, EPOCH + 1, b"");
    append("dev/", tar::EntryType::Directory, EPOCH + 2, b"");
    builder
        .append_pax_extensions([("SCHILY.xattr.security.capability", &b"\x01\x00"[..])])
        .unwrap();
    let mut header = tar::Header::new_ustar();
    header.set_mode(0o4750);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(EPOCH + 100);
    header.set_size(3);
    builder
        .append_data(&mut header, "usr/bin/ping", &b"elf"[..])
        .unwrap();
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::Char);
    header.set_mode(0o666);
    header.set_uid(0);
    header.set_gid(0);
    header.set_device_major(1).unwrap();
    header.set_device_minor(3).unwrap();
    header.set_mtime(EPOCH + 4);
    header.set_size(0);
    builder
        .append_data(&mut header, "dev/null", &b""[..])
        .unwrap();
    builder.into_inner().unwrap()
}

#[test]
fn normalizing_a_normalized_layer_gives_it_back() {
    // What lets a derived image take its parent's normalized layers as they are (KnownLayer).
    let once = normalize_layer(&mixed_layer(), EPOCH).unwrap();
    assert_ne!(once, mixed_layer());
    assert!(paths(&once).iter().any(|path| path.len() > 100));
    assert_eq!(normalize_layer(&once, EPOCH).unwrap(), once);
}

/// A `docker save` archive of `layers` (in that order) under a minimal config.
fn export_of(layers: &[Vec<u8>]) -> Vec<u8> {
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux", "created": "2026-12-02T15:31:07Z",
        "config": {}, "history": [], "rootfs": {"type": "layers", "diff_ids": []}
    });
    let names: Vec<String> = (0..layers.len())
        .map(|i| format!("l{i}/layer.tar"))
        .collect();
    let mut builder = tar::Builder::new(Vec::new());
    for (name, layer) in names.iter().zip(layers) {
        append_file(&mut builder, name, layer).unwrap();
    }
    append_file(
        &mut builder,
        "cfg.json",
        &serde_json::to_vec(&config).unwrap(),
    )
    .unwrap();
    let manifest =
        serde_json::json!([{"Config": "cfg.json", "RepoTags": ["x:1"], "Layers": names}]);
    append_file(
        &mut builder,
        "manifest.json",
        &serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
    builder.into_inner().unwrap()
}

#[test]
fn a_parents_normalized_layers_are_taken_as_known_and_give_the_same_image() {
    let none = [];
    // The parent: one raw layer, normalized.
    let parent = normalize_archive(
        export_of(&[mixed_layer()]).as_slice(),
        EPOCH,
        &none,
        |_, _, _| {},
    )
    .unwrap();
    let parent_layer = gunzip(parent.layers[0].gzip.as_deref().unwrap()).unwrap();
    // The child as the daemon exports it: the parent's normalized layer, then its own raw one.
    let own = layer(&[item("etc/child", EPOCH + 50)]);
    let child_export = export_of(&[parent_layer, own]);
    let full = normalize_archive(child_export.as_slice(), EPOCH, &none, |_, _, _| {}).unwrap();
    let chains = vec![(
        EPOCH,
        parent.layers.iter().map(NormalizedLayer::known).collect(),
    )];
    let child_layers: Vec<Digest> = full.layers.iter().map(|l| l.diff_id.clone()).collect();
    let known = known_prefix(&child_layers, EPOCH, &chains);
    assert_eq!(known.len(), 1);
    assert!(
        known_prefix(&child_layers, EPOCH + 1, &chains).is_empty(),
        "another epoch"
    );
    assert!(
        known_prefix(&child_layers[1..], EPOCH, &chains).is_empty(),
        "not at the bottom"
    );
    let mut heard = Vec::new();
    let quick = normalize_archive(
        child_export.as_slice(),
        EPOCH,
        &known,
        |unpacked, packed, taken| heard.push((unpacked, packed, taken)),
    )
    .unwrap();
    // Hashed as it streams (as a large layer is), the same.
    let streamed =
        normalize_archive_streaming_from(child_export.as_slice(), EPOCH, &known, 0, |_, _, _| {})
            .unwrap();
    assert_eq!(streamed.manifest, full.manifest);
    assert!(streamed.layers[0].gzip.is_none());
    // A layer of the known one's size but other bytes is refused when streamed (its bytes are
    // gone): the caller normalizes again with no known layers.
    let mut other = gunzip(parent.layers[0].gzip.as_deref().unwrap()).unwrap();
    let last = other.len() - 1;
    other[last] ^= 1;
    let Err(error) = normalize_archive_streaming_from(
        export_of(&[other]).as_slice(),
        EPOCH,
        &known,
        0,
        |_, _, _| {},
    ) else {
        panic!("a layer of a known size with other bytes must be refused");
    };
    let misplaced = error.downcast_ref::<MisplacedKnownLayer>().expect("typed");
    assert_eq!(misplaced.position, None);
    assert!(error.to_string().contains("other bytes"), "{error}");
    // The same image, byte for byte, with the parent's layer not made again.
    assert_eq!(quick.manifest, full.manifest);
    assert_eq!(quick.config, full.config);
    assert_eq!(quick.size(), full.size());
    assert!(quick.layers[0].gzip.is_none());
    assert_eq!(quick.layers[1].gzip, full.layers[1].gzip);
    assert_eq!(heard.iter().filter(|(_, _, taken)| *taken).count(), 1);
    assert_eq!(
        heard
            .iter()
            .find(|(_, _, taken)| *taken)
            .map(|(u, p, _)| (*u, *p)),
        Some((
            parent.layers[0].unpacked_size,
            parent.layers[0].compressed_size
        ))
    );
    // The load archive names the known layer with an empty file (the daemon has its chain).
    let archive = quick.load_archive("x:2").unwrap();
    let mut sizes = BTreeMap::new();
    for entry in tar::Archive::new(archive.concat().as_slice())
        .entries()
        .unwrap()
    {
        let entry = entry.unwrap();
        sizes.insert(entry.path().unwrap().display().to_string(), entry.size());
    }
    assert_eq!(
        sizes[&format!("{}/layer.tar", quick.layers[0].digest.hex())],
        0
    );
    assert_eq!(
        sizes[&format!("{}/layer.tar", quick.layers[1].digest.hex())],
        quick.layers[1].compressed_size
    );
}

#[test]
fn a_parents_layer_found_above_its_place_asks_for_a_full_normalization() {
    let none = [];
    let empty = layer(&[]);
    let parent = normalize_archive(
        export_of(std::slice::from_ref(&empty)).as_slice(),
        EPOCH,
        &none,
        |_, _, _| {},
    )
    .unwrap();
    let known: Vec<KnownLayer> = parent.layers.iter().map(NormalizedLayer::known).collect();
    // The same (empty) layer at the bottom and again above the child's own layer.
    let child = export_of(&[empty.clone(), layer(&[item("etc/x", 1)]), empty]);
    let Err(error) = normalize_archive(child.as_slice(), EPOCH, &known, |_, _, _| {}) else {
        panic!("a misplaced known layer must be refused");
    };
    let misplaced = error
        .downcast_ref::<MisplacedKnownLayer>()
        .expect("the typed error");
    assert_eq!(misplaced.position, Some(2));
    assert!(
        error.to_string().contains("number 3 from the bottom"),
        "{error}"
    );
    // With no known layers it normalizes.
    assert_eq!(
        normalize_archive(child.as_slice(), EPOCH, &none, |_, _, _| {})
            .unwrap()
            .layers
            .len(),
        3
    );
}

#[test]
fn the_builders_source_hashes_leave_the_history_and_nothing_else_does() {
    let hash = "23751c12af71cbfbbc7bc1a42caa3fd63bf89c1fcd4e2bd7cecaece052370320";
    assert_eq!(
        without_source_hashes(&format!(
            "/bin/bash -o pipefail -c #(nop) COPY dir:{hash} in /opt/venv "
        )),
        "/bin/bash -o pipefail -c #(nop) COPY dir in /opt/venv "
    );
    assert_eq!(
        without_source_hashes(&format!(
            "/bin/sh -c #(nop) ADD multi:{hash} in /x/ file:{hash} in /y"
        )),
        "/bin/sh -c #(nop) ADD multi in /x/ file in /y"
    );
    // Not a whole hash, or not at a word's start: kept.
    for kept in [
        "/bin/sh -c echo dir:abc",
        &format!("/bin/sh -c echo profile:{hash}"),
        &format!("/bin/sh -c echo dir:{hash}0"),
        "/bin/sh -c #(nop)  LABEL a=b",
    ] {
        assert_eq!(without_source_hashes(kept), kept);
    }

    // Two builds that differ only in the hash of a `COPY --from` give one config.
    let with_hash = |hash: &str| {
        let mut config = raw_build_config(serde_json::json!({"a": "b"}), &[]);
        config["history"][1]["created_by"] =
            Value::String(format!("/bin/sh -c #(nop) COPY dir:{hash} in /opt/venv "));
        normalize_config(
            &serde_json::to_vec(&config).unwrap(),
            EPOCH,
            &[Digest::of(b"l1"), Digest::of(b"l2")],
        )
        .unwrap()
    };
    assert_eq!(with_hash(hash), with_hash(&"e7".repeat(32)));
}

/// Appends a regular file `name` holding `data` to an export made in a test.
fn append_file(builder: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) -> Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    builder.append_data(&mut header, name, data)?;
    Ok(())
}

/// gzip as the module documentation defines it, from the whole input at once: the header, each
/// 4 MiB chunk compressed alone (the last one ending the stream), the CRC-32 and the size.
fn gzip_of_whole(data: &[u8]) -> Vec<u8> {
    let chunks: Vec<&[u8]> = if data.is_empty() {
        vec![data]
    } else {
        data.chunks(GZIP_CHUNK).collect()
    };
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    for (index, chunk) in chunks.iter().enumerate() {
        out.extend_from_slice(&deflate_chunk(chunk, index == chunks.len() - 1));
    }
    out.extend_from_slice(&crc32(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

#[test]
fn the_gzip_writer_gives_the_whole_inputs_gzip_whatever_the_pieces_it_was_written_in() {
    // Compressible but not trivially so: short runs that drift every 8 kB.
    let data: Vec<u8> = (0..5 * GZIP_CHUNK + 7)
        .map(|index| (((index / 3) % 251) ^ (index >> 13)) as u8)
        .collect();
    let pieces = [1, 4095, 1 << 20, 7, 3 << 20, GZIP_CHUNK, 513];
    let mut seen = 0;
    for size in [
        0,
        1,
        GZIP_CHUNK - 1,
        GZIP_CHUNK,
        GZIP_CHUNK + 1,
        3 * GZIP_CHUNK,
        data.len(),
    ] {
        let data = &data[..size];
        let mut writer = GzipWriter::new();
        let mut rest = data;
        for piece in pieces.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (now, later) = rest.split_at((*piece).min(rest.len()));
            std::io::Write::write_all(&mut writer, now).unwrap();
            rest = later;
        }
        let made = writer.finish();
        let expected = gzip_of_whole(data);
        assert!(
            made.gzip == expected,
            "{size} bytes: the writer's gzip ({} bytes) is not the whole input's ({} bytes)",
            made.gzip.len(),
            expected.len()
        );
        assert_eq!(made.diff_id, Digest::of(data), "{size} bytes");
        assert_eq!(made.unpacked_size, size as u64);
        assert_eq!(gunzip(&made.gzip).unwrap(), data, "{size} bytes");
        assert_eq!(gzip(data), expected, "{size} bytes: gzip()");
        seen += 1;
    }
    assert_eq!(seen, 7);
}

#[test]
fn a_layer_normalized_into_the_gzip_writer_is_the_layer_normalized_then_compressed() {
    let layer = layer(&[
        item("opt/venv/b.py", EPOCH + 100),
        item("opt/venv/a.py", EPOCH - 100),
        item("var/log/apt/history.log", EPOCH + 5),
    ]);
    let normalized = normalize_layer(&layer, EPOCH).unwrap();
    let made = normalize_layer_into(&layer, EPOCH, GzipWriter::new())
        .unwrap()
        .finish();
    assert_eq!(made.gzip, gzip_of_whole(&normalized));
    assert_eq!(made.diff_id, Digest::of(&normalized));
    assert_eq!(made.unpacked_size, normalized.len() as u64);
}

#[test]
fn the_writers_threads_change_nothing_and_a_dropped_writer_ends_them() {
    // Enough chunks that the pool's queue fills and its results come back out of order.
    let data: Vec<u8> = (0..(GZIP_CHUNK * 9 + 777))
        .map(|index| ((index * 31) % 253) as u8 ^ ((index / 4096) as u8))
        .collect();
    let expected = gzip(&data);
    for threads in [1, 2, 5] {
        let mut writer = GzipWriter::with_threads(threads);
        for piece in data.chunks(100_003) {
            std::io::Write::write_all(&mut writer, piece).unwrap();
        }
        let made = writer.finish();
        assert!(
            made.gzip == expected,
            "{threads} threads: another stream ({} bytes, not {})",
            made.gzip.len(),
            expected.len()
        );
        assert_eq!(made.diff_id, Digest::of(&data), "{threads} threads");
    }
    // Dropped with chunks on their way (an error while writing a layer): its threads end, so
    // this returns.
    let mut writer = GzipWriter::with_threads(3);
    std::io::Write::write_all(&mut writer, &data[..GZIP_CHUNK * 5]).unwrap();
    drop(writer);
}
