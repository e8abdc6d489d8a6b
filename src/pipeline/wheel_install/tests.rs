use super::*;
use std::io::Cursor;

/// A wheel in memory: `(member, mode, content)`; RECORD listed last with every member's hash.
pub(crate) fn wheel_bytes(members: &[(&str, u32, &[u8])], record: bool) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let mut rows = String::new();
    for (name, mode, data) in members {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(*mode);
        writer.start_file(*name, options).unwrap();
        writer.write_all(data).unwrap();
        rows.push_str(&format!(
            "{},{},{}\n",
            csv_field(name),
            record_hash(data),
            data.len()
        ));
    }
    if record {
        let info = members
            .iter()
            .find_map(|(name, _, _)| name.split_once(".dist-info/").map(|(stem, _)| stem))
            .unwrap();
        rows.push_str(&format!("{info}.dist-info/RECORD,,\n"));
        writer
            .start_file(
                format!("{info}.dist-info/RECORD"),
                zip::write::SimpleFileOptions::default().unix_permissions(0o100644),
            )
            .unwrap();
        writer.write_all(rows.as_bytes()).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

/// The wheel the pip run below was made with (Python's zipfile, modes without file-type bits
/// except where a test sets them).
fn demo_members() -> Vec<(&'static str, u32, &'static [u8])> {
    vec![
        ("demo/__init__.py", 0o644, b"def main():\n    print('hi')\n"),
        ("demo/tool.bin", 0o100755, b"\x7fELF"),
        ("demo-1.0.data/scripts/demo-script", 0o644, b"#!python\nprint('s')\n"),
        ("demo-1.0.data/scripts/plain.sh", 0o100755, b"#!/bin/sh\necho x\n"),
        ("demo-1.0.data/headers/demo.h", 0o644, b"int x;\n"),
        ("demo-1.0.data/data/share/demo/readme.txt", 0o644, b"data\n"),
        ("demo-1.0.data/purelib/demo_pure.py", 0o644, b"x=1\n"),
        (
            "demo-1.0.dist-info/METADATA",
            0o644,
            b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
        ),
        (
            "demo-1.0.dist-info/WHEEL",
            0o644,
            b"Wheel-Version: 1.0\nGenerator: x\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
        ),
        (
            "demo-1.0.dist-info/entry_points.txt",
            0o644,
            b"[console_scripts]\ndemo = demo:main\ndemo-sub = demo.sub:Klass.run\n[gui_scripts]\ndemo-gui = demo:main\n",
        ),
    ]
}

fn venv() -> Venv {
    Venv {
        prefix: "/tmp/wx/v".to_string(),
        python: "3.11".to_string(),
    }
}

fn planned(wheels: &mut [Wheel<Cursor<Vec<u8>>>]) -> BTreeMap<String, (Vec<u8>, bool)> {
    let install = plan(wheels, &venv()).unwrap();
    install
        .files
        .iter()
        .map(|(path, file)| {
            (
                path.clone(),
                (content_of(wheels, &file.content).unwrap(), file.executable),
            )
        })
        .collect()
}

fn demo() -> Wheel<Cursor<Vec<u8>>> {
    Wheel::new(
        "demo-1.0-py3-none-any.whl",
        Cursor::new(wheel_bytes(&demo_members(), true)),
    )
    .unwrap()
}

const SITE: &str = "tmp/wx/v/lib/python3.11/site-packages";

#[test]
fn a_wheels_files_go_where_pip_puts_them_with_pips_modes() {
    let files = planned(&mut [demo()]);
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "tmp/wx/v/bin/demo",
            "tmp/wx/v/bin/demo-gui",
            "tmp/wx/v/bin/demo-script",
            "tmp/wx/v/bin/demo-sub",
            "tmp/wx/v/bin/plain.sh",
            "tmp/wx/v/include/site/python3.11/demo/demo.h",
            &format!("{SITE}/demo-1.0.dist-info/INSTALLER"),
            &format!("{SITE}/demo-1.0.dist-info/METADATA"),
            &format!("{SITE}/demo-1.0.dist-info/RECORD"),
            &format!("{SITE}/demo-1.0.dist-info/REQUESTED"),
            &format!("{SITE}/demo-1.0.dist-info/WHEEL"),
            &format!("{SITE}/demo-1.0.dist-info/entry_points.txt"),
            &format!("{SITE}/demo/__init__.py"),
            &format!("{SITE}/demo/tool.bin"),
            &format!("{SITE}/demo_pure.py"),
            "tmp/wx/v/share/demo/readme.txt",
        ]
    );
    let executable: Vec<&str> = files
        .iter()
        .filter(|(_, (_, executable))| *executable)
        .map(|(path, _)| path.rsplit('/').next().unwrap())
        .collect();
    // Generated scripts always; members only where the zip mode is a regular file's with an
    // execute bit (a #!python script stored 0644 stays 0644, as with pip).
    assert_eq!(
        executable,
        ["demo", "demo-gui", "demo-sub", "plain.sh", "tool.bin"]
    );
    assert_eq!(
        files["tmp/wx/v/bin/demo-script"].0,
        b"#!/tmp/wx/v/bin/python3\nprint('s')\n"
    );
    assert_eq!(
        files["tmp/wx/v/bin/plain.sh"].0, b"#!/bin/sh\necho x\n",
        "only a #!python line is replaced"
    );
    assert_eq!(
        files[&format!("{SITE}/demo-1.0.dist-info/INSTALLER")].0,
        b"imagegen\n"
    );
    assert!(files[&format!("{SITE}/demo-1.0.dist-info/REQUESTED")]
        .0
        .is_empty());
}

/// The scripts and RECORD pip 23.2.1 wrote for this wheel (`pip install --no-deps --no-index
/// --no-compile` into a venv at /tmp/wx/v; its pyc rows left out with --no-compile), byte for
/// byte, but for INSTALLER (pip writes `pip`, imagegen `imagegen`).
#[test]
fn entry_point_scripts_and_record_are_pips_byte_for_byte() {
    let files = planned(&mut [demo()]);
    let script =
        |name: &str| String::from_utf8(files[&format!("tmp/wx/v/bin/{name}")].0.clone()).unwrap();
    assert_eq!(
        script("demo"),
        "#!/tmp/wx/v/bin/python3\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom demo import main\nif __name__ == '__main__':\n    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit(main())\n"
    );
    assert_eq!(script("demo").len(), 208, "pip's RECORD gave 208 bytes");
    assert_eq!(script("demo-gui"), script("demo"));
    assert!(script("demo-sub").contains("from demo.sub import Klass\n"));
    assert!(script("demo-sub").ends_with("    sys.exit(Klass.run())\n"));
    let record = String::from_utf8(
        files[&format!("{SITE}/demo-1.0.dist-info/RECORD")]
            .0
            .clone(),
    )
    .unwrap();
    let installer = record_hash(b"imagegen\n");
    assert_eq!(
        record,
        format!(
            "../../../bin/demo,sha256=r-10IHSJP8tbH9g95FNXyk8yfDd1Spw3sC6HkDE_ytM,208\r\n\
             ../../../bin/demo-gui,sha256=r-10IHSJP8tbH9g95FNXyk8yfDd1Spw3sC6HkDE_ytM,208\r\n\
             ../../../bin/demo-script,sha256=HlGgLWyQqULv0mUj7JZhvMfdLOPLuLjkIibsOcCOORg,35\r\n\
             ../../../bin/demo-sub,sha256=hN2N0ofczVZ4Y8PjxxFIp8GhZvIBcl18-It9Awwi6ks,218\r\n\
             ../../../bin/plain.sh,sha256=ULuLeF127LZDoB6SZZLVGrcJh6VDPzAcWrmFhn6fOrc,17\r\n\
             ../../../include/site/python3.11/demo/demo.h,sha256=fHJfMIVKRgM92U9yisawjK8QhFmTzT7UjkAHnNsKdqY,7\r\n\
             ../../../share/demo/readme.txt,sha256=Zmey0aq2oAyqWu5a-K2fFGXlZ6vxwgnRVyfVez6Pbl8,5\r\n\
             demo-1.0.dist-info/INSTALLER,{installer},9\r\n\
             demo-1.0.dist-info/METADATA,sha256=NKonpgZPlYtBt4GiF_KQ_Qq1-WUeK25Kzas0G3uTwwU,46\r\n\
             demo-1.0.dist-info/RECORD,,\r\n\
             demo-1.0.dist-info/REQUESTED,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\r\n\
             demo-1.0.dist-info/WHEEL,sha256=uJ7aXvumwizBTEL5j4IaEC0ADflGgbIXpqcBtk1VOhw,73\r\n\
             demo-1.0.dist-info/entry_points.txt,sha256=y67yHzEN0uy316ShCVvg1iMhkbidwauol-J8i6Rs4IU,100\r\n\
             demo/__init__.py,sha256=Apxw9IvaEL1FRj4Mc5jXeGBbUmKjv5w-CRAAyXjoeoo,28\r\n\
             demo/tool.bin,sha256=O9u0_oOXzSuEJDCznM_wGoZjx1GUXvXpoJ4mf7ix01k,4\r\n\
             demo_pure.py,sha256=mHUu4o1UhL3CgU-3CttqCy-zH2qbjueugf0vyc8wCzs,4\r\n"
        )
    );
}

#[test]
fn files_the_wheel_did_not_record_get_rows_without_a_hash_and_odd_paths_are_quoted() {
    let mut members = demo_members();
    members.push(("demo/a,b \"q\".txt", 0o644, b"odd\n"));
    let mut with_odd = wheel_bytes(&members, true);
    // One member left out of RECORD: a wheel made by hand.
    let mut unrecorded = members.clone();
    unrecorded.push(("demo/unrecorded.py", 0o644, b"y=2\n"));
    let bytes = {
        let mut writer =
            zip::ZipWriter::new_append(Cursor::new(std::mem::take(&mut with_odd))).unwrap();
        writer
            .start_file(
                "demo/unrecorded.py",
                zip::write::SimpleFileOptions::default(),
            )
            .unwrap();
        writer.write_all(b"y=2\n").unwrap();
        writer.finish().unwrap().into_inner()
    };
    let mut wheels = [Wheel::new("demo-1.0-py3-none-any.whl", Cursor::new(bytes)).unwrap()];
    let files = planned(&mut wheels);
    let record = String::from_utf8(
        files[&format!("{SITE}/demo-1.0.dist-info/RECORD")]
            .0
            .clone(),
    )
    .unwrap();
    assert!(record.contains(&format!(
        "\"demo/a,b \"\"q\"\".txt\",{},4\r\n",
        record_hash(b"odd\n")
    )));
    assert!(record.contains("\r\ndemo/unrecorded.py,,\r\n"));
    let rows = parse_csv(&record).unwrap();
    assert!(rows.iter().any(|row| row[0] == "demo/a,b \"q\".txt"));
}

/// A wheel `{name}-1.0` of an `nvidia` namespace: `nvidia/__init__.py` holding `content` and
/// `nvidia/{name}/lib.so`.
fn shared(name: &'static str, content: &'static [u8]) -> Wheel<Cursor<Vec<u8>>> {
    let info: &'static str = Box::leak(format!("{name}-1.0.dist-info").into_boxed_str());
    let metadata: &'static [u8] = Box::leak(
        format!("Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
            .into_bytes()
            .into_boxed_slice(),
    );
    let members: Vec<(&str, u32, &[u8])> = vec![
        ("nvidia/__init__.py", 0o644, content),
        (
            Box::leak(format!("nvidia/{name}/lib.so").into_boxed_str()),
            0o100755,
            b"lib",
        ),
        (
            Box::leak(format!("{info}/METADATA").into_boxed_str()),
            0o644,
            metadata,
        ),
        (
            Box::leak(format!("{info}/WHEEL").into_boxed_str()),
            0o644,
            b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n",
        ),
    ];
    Wheel::new(
        &format!("{name}-1.0-py3-none-any.whl"),
        Cursor::new(wheel_bytes(&members, true)),
    )
    .unwrap()
}

#[test]
fn two_wheels_with_one_file_keep_it_once_and_refuse_it_when_its_content_differs() {
    let files = planned(&mut [shared("cublas", b""), shared("cudnn", b"")]);
    assert_eq!(
        files
            .keys()
            .filter(|path| path.ends_with("nvidia/__init__.py"))
            .count(),
        1
    );
    assert!(files.contains_key(&format!("{SITE}/nvidia/cublas/lib.so")));
    assert!(files.contains_key(&format!("{SITE}/nvidia/cudnn/lib.so")));

    let mut wheels = [shared("cublas", b""), shared("cudnn", b"# another\n")];
    let error = plan(&mut wheels, &venv()).unwrap_err().to_string();
    assert_eq!(
        error,
        format!(
            "/{SITE}/nvidia/__init__.py: cublas-1.0-py3-none-any.whl and \
             cudnn-1.0-py3-none-any.whl both install it, with different content or mode; pip \
             would keep whichever it installed last, in an order it does not promise, and leave \
             the other project broken\nhint: keep one of the two projects in matrix.yaml's \
             `pip:` requirements and run `imagegen lock` again"
        )
    );
}

#[test]
fn pips_own_scripts_get_pips_names() {
    let scripts = scripts_to_generate(
        "[console_scripts]\npip = pip._internal.cli.main:main\npip3 = pip._internal.cli.main:main\npip3.12 = pip._internal.cli.main:main\n",
        "3.11",
    );
    let names: Vec<&str> = scripts.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["pip", "pip3", "pip3.11"]);
    let scripts = scripts_to_generate(
        "[console_scripts]\neasy_install = setuptools.command.easy_install:main\neasy_install-3.9 = setuptools.command.easy_install:main\n",
        "3.11",
    );
    let names: Vec<&str> = scripts.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["easy_install", "easy_install-3.11"]);
}

#[test]
fn a_bad_wheel_is_refused_with_its_name() {
    let refuse = |members: Vec<(&str, u32, &[u8])>, file_name: &str| {
        let mut wheels = [Wheel::new(file_name, Cursor::new(wheel_bytes(&members, true))).unwrap()];
        plan(&mut wheels, &venv()).unwrap_err().to_string()
    };
    let with = |extra: (&'static str, u32, &'static [u8])| {
        let mut members = demo_members();
        members.push(extra);
        members
    };
    let name = "demo-1.0-py3-none-any.whl";
    assert_eq!(
        refuse(with(("demo-1.0.data/../../etc/passwd", 0o644, b"x")), name),
        format!("{name}: demo-1.0.data/../../etc/passwd: unknown scheme \"..\" (purelib, platlib, scripts, headers, data)")
    );
    assert_eq!(
        refuse(
            with(("demo-1.0.data/data/../../../../etc/passwd", 0o644, b"x")),
            name
        ),
        format!("{name}: \"../../../../etc/passwd\": a path that would leave its folder")
    );
    assert_eq!(
        refuse(with(("demo/../../x.py", 0o644, b"x")), name),
        format!("{name}: \"demo/../../x.py\": a path that would leave its folder")
    );
    assert_eq!(
        refuse(with(("other-1.0.dist-info/METADATA", 0o644, b"x")), name),
        format!("{name}: more than one .dist-info folder: demo-1.0.dist-info, other-1.0.dist-info")
    );
    assert_eq!(
        refuse(demo_members(), "other-1.0-py3-none-any.whl"),
        "other-1.0-py3-none-any.whl: its metadata folder demo-1.0.dist-info is for another project"
    );
    let mut members = demo_members();
    members.retain(|(member, _, _)| !member.ends_with("entry_points.txt"));
    members.push((
        "demo-1.0.dist-info/entry_points.txt",
        0o644,
        b"[console_scripts]\nbad = demo\n",
    ));
    assert_eq!(
        format!("{:#}", {
            let mut wheels = [Wheel::new(name, Cursor::new(wheel_bytes(&members, true))).unwrap()];
            plan(&mut wheels, &venv()).unwrap_err()
        }),
        format!(
            "{name}: entry point bad = demo: an entry point needs a callable (module:function)"
        )
    );
    let mut members = demo_members();
    members.retain(|(member, _, _)| !member.ends_with("WHEEL"));
    members.push(("demo-1.0.dist-info/WHEEL", 0o644, b"Wheel-Version: 2.0\n"));
    assert_eq!(
        refuse(members, name),
        format!("{name}: Wheel-Version 2.0: only 1.x is installed")
    );
    let no_record = {
        let mut wheels =
            [Wheel::new(name, Cursor::new(wheel_bytes(&demo_members(), false))).unwrap()];
        plan(&mut wheels, &venv()).unwrap_err().to_string()
    };
    assert_eq!(no_record, format!("{name}: no demo-1.0.dist-info/RECORD"));
}

#[test]
fn the_layer_holds_every_folder_and_file_sorted_with_one_mtime_and_the_same_bytes_each_time() {
    let layer = |epoch| {
        let mut wheels = [demo()];
        let install = plan(&mut wheels, &venv()).unwrap();
        write_layer(&install, &mut wheels, epoch, Vec::new()).unwrap()
    };
    let (tar_bytes, count) = layer(1_700_000_000);
    assert_eq!(count, 16);
    assert_eq!(layer(1_700_000_000).0, tar_bytes, "deterministic");
    let mut archive = tar::Archive::new(tar_bytes.as_slice());
    let mut seen = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let header = entry.header();
        assert_eq!(header.mtime().unwrap(), 1_700_000_000);
        assert_eq!((header.uid().unwrap(), header.gid().unwrap()), (0, 0));
        let path = String::from_utf8(entry.path_bytes().into_owned()).unwrap();
        let mode = header.mode().unwrap();
        let directory = header.entry_type().is_dir();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        seen.push((
            path.trim_end_matches('/').to_string(),
            mode,
            directory,
            data,
        ));
    }
    let paths: Vec<&str> = seen.iter().map(|(path, ..)| path.as_str()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
    assert_eq!(&paths[..4], ["tmp", "tmp/wx", "tmp/wx/v", "tmp/wx/v/bin"]);
    assert!(seen
        .iter()
        .filter(|(_, _, directory, _)| *directory)
        .all(|(_, mode, ..)| *mode == 0o755));
    let file = |path: &str| seen.iter().find(|(seen, ..)| seen == path).unwrap();
    assert_eq!(file(&format!("{SITE}/demo/tool.bin")).1, 0o755);
    assert_eq!(file(&format!("{SITE}/demo/tool.bin")).3, b"\x7fELF");
    assert_eq!(file(&format!("{SITE}/demo/__init__.py")).1, 0o644);
    assert_eq!(
        file("tmp/wx/v/bin/demo-script").3,
        b"#!/tmp/wx/v/bin/python3\nprint('s')\n"
    );
    assert_eq!(
        seen.iter()
            .filter(|(_, _, directory, _)| !directory)
            .count(),
        16
    );
}

#[test]
fn a_member_is_executable_where_its_mode_is_a_regular_files_with_an_execute_bit() {
    assert!(zip_mode_is_executable(0o100755));
    assert!(zip_mode_is_executable(0o100744));
    assert!(!zip_mode_is_executable(0o100644));
    // No file type (Python's zipfile with external_attr = 0o755 << 16): pip leaves it 0644.
    assert!(!zip_mode_is_executable(0o755));
    assert!(!zip_mode_is_executable(0o120777), "a symbolic link's mode");
    assert!(!zip_mode_is_executable(0o040755), "a folder's mode");
    assert!(!zip_mode_is_executable(0));
}

#[test]
fn entry_points_outside_the_script_groups_make_no_script() {
    let scripts = scripts_to_generate(
        "# comment\n[console_scripts]\ntool = pkg.cli:main [extra]\n\n[other]\nnot-a-script = pkg:main\n[gui_scripts]\n Gui = pkg:gui\n",
        "3.11",
    );
    assert_eq!(
        scripts,
        [
            ("Gui".to_string(), "pkg:gui".to_string()),
            ("tool".to_string(), "pkg.cli:main [extra]".to_string())
        ]
    );
    let script = String::from_utf8(
        entry_point_script("/opt/venv/bin/python3", "pkg.cli:main [extra]").unwrap(),
    )
    .unwrap();
    assert!(script.starts_with("#!/opt/venv/bin/python3\n"));
    assert!(script.contains("from pkg.cli import main\n"));
    assert!(entry_point_script("/opt/my venv/bin/python3", "pkg:main").is_err());
    assert!(entry_point_script("/opt/venv/bin/python3", "pkg:main; rm -rf /").is_err());
}

#[test]
fn relative_paths_are_os_path_relpaths() {
    assert_eq!(
        relative("/opt/venv/lib/python3.11/site-packages", "/opt/venv/bin/x"),
        "../../../bin/x"
    );
    assert_eq!(
        relative(
            "/opt/venv/lib/python3.11/site-packages",
            "/opt/venv/lib/python3.11/site-packages/a/b"
        ),
        "a/b"
    );
    assert_eq!(
        relative(
            "/opt/venv/lib/python3.11/site-packages",
            "/opt/venv/share/x"
        ),
        "../../../share/x"
    );
}

/// The tree under `root`: path → (mode, sha256 of the content or the link target), folders left
/// out; `pip` writes its own INSTALLER and RECORD's row for it, so both are compared apart.
fn tree(root: &std::path::Path) -> BTreeMap<String, (u32, String)> {
    use std::os::unix::fs::PermissionsExt;
    let mut files = BTreeMap::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let metadata = std::fs::symlink_metadata(&path).unwrap();
            if metadata.is_dir() {
                folders.push(path);
                continue;
            }
            let content = if metadata.file_type().is_symlink() {
                std::fs::read_link(&path)
                    .unwrap()
                    .display()
                    .to_string()
                    .into_bytes()
            } else {
                std::fs::read(&path).unwrap()
            };
            let relative = path.strip_prefix(root).unwrap().display().to_string();
            files.insert(
                relative,
                (
                    metadata.permissions().mode() & 0o7777,
                    record_hash(&content),
                ),
            );
        }
    }
    files
}

/// Installs the wheels of `folder` with pip (`--no-deps --no-index --no-compile`, into a fresh
/// venv of the host's python3) and with [`plan`] and [`write_layer`] at the same prefix, and
/// compares every file: path, mode and content. The differences allowed are INSTALLER's content
/// (`pip` against `imagegen`) and, in RECORD, INSTALLER's row. Returns the files compared.
fn compare_with_pip(folder: &std::path::Path, wheel_names: &[String]) -> usize {
    let scratch = tempfile::tempdir().unwrap();
    let run = |command: &mut std::process::Command| {
        let output = command.output().expect("python3 (with venv) runs");
        assert!(
            output.status.success(),
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let venv_path = scratch.path().join("pip/venv");
    run(std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv_path));
    let python = run(std::process::Command::new(venv_path.join("bin/python3"))
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"]));
    let before = tree(&venv_path);
    let mut pip = std::process::Command::new("python3");
    pip.args(["-m", "pip", "--python"])
        .arg(venv_path.join("bin/python3"))
        .args([
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-compile",
            "--disable-pip-version-check",
            "--find-links",
        ])
        .arg(folder)
        // Requirements by name and version from the folder, as the image's `-r` lock is
        // installed (a wheel given by its path would be a direct URL: pip adds direct_url.json).
        .args(wheel_names.iter().map(|name| {
            let mut parts = name.split('-');
            format!("{}=={}", parts.next().unwrap(), parts.next().unwrap())
        }));
    run(&mut pip);
    let mut by_pip = tree(&venv_path);
    by_pip.retain(|path, _| !before.contains_key(path));

    let venv = Venv {
        prefix: venv_path.display().to_string(),
        python: python.trim().to_string(),
    };
    let mut wheels: Vec<_> = wheel_names
        .iter()
        .map(|name| Wheel::new(name, std::fs::File::open(folder.join(name)).unwrap()).unwrap())
        .collect();
    let install = plan(&mut wheels, &venv).unwrap();
    let (layer, _) = write_layer(&install, &mut wheels, 1_700_000_000, Vec::new()).unwrap();
    let unpacked = scratch.path().join("imagegen");
    std::fs::create_dir_all(&unpacked).unwrap();
    let mut archive = tar::Archive::new(layer.as_slice());
    archive.set_preserve_permissions(true);
    archive.unpack(&unpacked).unwrap();
    let by_imagegen = tree(&unpacked.join(venv.prefix.trim_start_matches('/')));

    let paths = |files: &BTreeMap<String, (u32, String)>| files.keys().cloned().collect::<Vec<_>>();
    assert_eq!(paths(&by_imagegen), paths(&by_pip), "the same files");
    let mut compared = 0;
    for (path, (mode, hash)) in &by_pip {
        let (our_mode, our_hash) = &by_imagegen[path];
        assert_eq!(our_mode, mode, "{path}: mode");
        compared += 1;
        if path.ends_with(".dist-info/INSTALLER") {
            continue;
        }
        if path.ends_with(".dist-info/RECORD") {
            let keep = |text: String| -> Vec<String> {
                text.split("\r\n")
                    .filter(|row| !row.contains(".dist-info/INSTALLER,"))
                    .map(str::to_string)
                    .collect()
            };
            let ours = keep(
                std::fs::read_to_string(
                    unpacked
                        .join(venv.prefix.trim_start_matches('/'))
                        .join(path),
                )
                .unwrap(),
            );
            let pips = keep(std::fs::read_to_string(venv_path.join(path)).unwrap());
            assert_eq!(ours, pips, "{path}");
            continue;
        }
        assert_eq!(our_hash, hash, "{path}: content");
    }
    compared
}

/// Against the host's real pip: the demo wheel (entry points, every `.data` scheme, a `#!python`
/// script) and a second wheel sharing a file with the first, as the nvidia-* wheels share
/// `nvidia/__init__.py`.
#[test]
fn the_install_is_pips_file_by_file() {
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(
        folder.path().join("demo-1.0-py3-none-any.whl"),
        wheel_bytes(&demo_members(), true),
    )
    .unwrap();
    let other: Vec<(&str, u32, &[u8])> = vec![
        ("demo/__init__.py", 0o644, b"def main():\n    print('hi')\n"),
        ("Other_Pkg/x.py", 0o100755, b"x = 1\n"),
        (
            "other_pkg-2.0.dist-info/METADATA",
            0o644,
            b"Metadata-Version: 2.1\nName: Other_Pkg\nVersion: 2.0\n",
        ),
        (
            "other_pkg-2.0.dist-info/WHEEL",
            0o644,
            b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n",
        ),
        (
            "other_pkg-2.0.dist-info/entry_points.txt",
            0o644,
            b"[console_scripts]\nother = Other_Pkg.x:run [cli]\n",
        ),
    ];
    std::fs::write(
        folder.path().join("other_pkg-2.0-py3-none-any.whl"),
        wheel_bytes(&other, true),
    )
    .unwrap();
    let names = [
        "demo-1.0-py3-none-any.whl".to_string(),
        "other_pkg-2.0-py3-none-any.whl".to_string(),
    ];
    assert_eq!(compare_with_pip(folder.path(), &names), 24);
}

/// The same against every wheel of `IMAGEGEN_WHEEL_FOLDER` (torch's 29 wheels for the real
/// runtime image: `pip download --only-binary=:all: torch==2.13.0 -d FOLDER`); about a minute.
/// `IMAGEGEN_WHEEL_FOLDER=… cargo test --release --lib the_install_of_a_wheel_folder -- --ignored --nocapture`
#[test]
#[ignore = "needs IMAGEGEN_WHEEL_FOLDER, a folder of wheels (gigabytes for torch)"]
fn the_install_of_a_wheel_folder_is_pips_file_by_file() {
    let folder = std::path::PathBuf::from(
        std::env::var("IMAGEGEN_WHEEL_FOLDER").expect("IMAGEGEN_WHEEL_FOLDER"),
    );
    let mut names: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".whl"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no wheels in {}", folder.display());
    let started = std::time::Instant::now();
    let paths: Vec<_> = names.iter().map(|name| folder.join(name)).collect();
    let files = check_side_by_side(
        crate::docker::wheel_cache::open_wheels(&paths).unwrap(),
        &Venv {
            prefix: VENV_PREFIX.into(),
            python: "3.11".into(),
        },
    )
    .unwrap();
    println!(
        "side by side: {files} files planned in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let compared = compare_with_pip(&folder, &names);
    println!(
        "{} wheels, {compared} files: the same as pip's but INSTALLER",
        names.len()
    );
}

/// The wheels of the folder `IMAGEGEN_WHEEL_FOLDER` names, sorted (at least one).
fn folder_wheels() -> Vec<std::path::PathBuf> {
    let folder = std::path::PathBuf::from(
        std::env::var("IMAGEGEN_WHEEL_FOLDER").expect("IMAGEGEN_WHEEL_FOLDER"),
    );
    let mut paths: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "whl"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no wheels in {}", folder.display());
    paths
}

/// The wheels of `IMAGEGEN_WHEEL_FOLDER` install side by side for Python `IMAGEGEN_PYTHON`
/// (what `imagegen build` checks after its fetch): for the real locks of images/, whose
/// Python the host may not have.
/// `IMAGEGEN_WHEEL_FOLDER=… IMAGEGEN_PYTHON=3.12 cargo test --lib the_wheels_of_a_folder -- --ignored --nocapture`
#[test]
#[ignore = "needs IMAGEGEN_WHEEL_FOLDER and IMAGEGEN_PYTHON"]
fn the_wheels_of_a_folder_install_side_by_side() {
    let python = std::env::var("IMAGEGEN_PYTHON").expect("IMAGEGEN_PYTHON");
    let paths = folder_wheels();
    let files = check_side_by_side(
        crate::docker::wheel_cache::open_wheels(&paths).unwrap(),
        &Venv {
            prefix: VENV_PREFIX.into(),
            python,
        },
    )
    .unwrap();
    println!("{} wheels install {files} files side by side", paths.len());
}

/// The venv's layer of every wheel of `IMAGEGEN_WHEEL_FOLDER`, written once into a hash alone and
/// once into the compressing writer `wheels: host` uses: one tar, the same diff ID; the two times
/// printed (the second pass is the layer pass of `imagegen build`, the first its floor here).
/// `IMAGEGEN_WHEEL_FOLDER=… cargo test --release --lib the_venv_layer_of_a_wheel_folder -- --ignored --nocapture`
#[test]
#[ignore = "needs IMAGEGEN_WHEEL_FOLDER, a folder of wheels (gigabytes for torch)"]
fn the_venv_layer_of_a_wheel_folder_is_compressed_as_it_is_written() {
    use sha2::Digest as _;
    struct Hashed(sha2::Sha256, u64);
    impl std::io::Write for Hashed {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0.update(data);
            self.1 += data.len() as u64;
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let paths = folder_wheels();
    let venv = Venv {
        prefix: VENV_PREFIX.into(),
        python: "3.11".into(),
    };
    let mut wheels: Vec<_> = crate::docker::wheel_cache::open_wheels(&paths)
        .unwrap()
        .into_iter()
        .map(|(name, reader)| Wheel::new(&name, reader).unwrap())
        .collect();
    let install = plan(&mut wheels, &venv).unwrap();
    let started = std::time::Instant::now();
    let (hashed, files) = write_layer(
        &install,
        &mut wheels,
        1_700_000_000,
        Hashed(sha2::Sha256::new(), 0),
    )
    .unwrap();
    let alone = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    let (writer, _) = write_layer(
        &install,
        &mut wheels,
        1_700_000_000,
        crate::pipeline::normalize::GzipWriter::new(),
    )
    .unwrap();
    let gzipped = writer.finish();
    let compressed = started.elapsed().as_secs_f64();
    let tar_digest = crate::model::digest::Digest::from_sha256(hashed.0.finalize().as_slice());
    assert_eq!(gzipped.diff_id, tar_digest);
    assert_eq!(gzipped.unpacked_size, hashed.1);
    println!(
        "{} wheels, {files} entries, {} bytes: the tar into a hash {alone:.1} s; into the gzip writer {compressed:.1} s ({} bytes); ratio {:.2}",
        paths.len(),
        hashed.1,
        gzipped.gzip.len(),
        compressed / alone
    );
}

/// A tar of `(path, kind, content)`: `f` a file (0644), `x` an executable, `d` a folder, `l` a
/// link to `content`.
fn written(entries: &[(&str, char, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, kind, content) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(1_800_000_000);
        match kind {
            'd' => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder
                    .append_data(&mut header, path, std::io::empty())
                    .unwrap();
            }
            'l' => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                builder
                    .append_link(&mut header, path, std::str::from_utf8(content).unwrap())
                    .unwrap();
            }
            _ => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(if *kind == 'x' { 0o755 } else { 0o644 });
                header.set_size(content.len() as u64);
                builder.append_data(&mut header, path, *content).unwrap();
            }
        }
    }
    builder.into_inner().unwrap()
}

fn paths_of(tar_bytes: &[u8]) -> Vec<String> {
    let mut archive = tar::Archive::new(tar_bytes);
    archive
        .entries()
        .unwrap()
        .map(|entry| String::from_utf8(entry.unwrap().path_bytes().into_owned()).unwrap())
        .collect()
}

#[test]
fn the_helper_gets_the_sources_the_metadata_the_scripts_and_the_cuda_libraries_and_nothing_else() {
    let mut members = demo_members();
    members.push(("nvidia/cu13/lib/libcublas.so.13", 0o100755, b"\x7fELF lib"));
    members.push(("nvidia/cu13/include/cublas.h", 0o100644, b"header"));
    members.push(("nvidia/cu13/lib/deeper/not-listed.so", 0o100755, b"\x7fELF"));
    let mut wheels = [Wheel::new(
        "demo-1.0-py3-none-any.whl",
        Cursor::new(wheel_bytes(&members, true)),
    )
    .unwrap()];
    let install = plan(&mut wheels, &venv()).unwrap();
    let (tar_bytes, _) = helper_tar(
        &install,
        &mut wheels,
        &venv(),
        1_700_000_000,
        &[("imagegen/host-venv.sh", b"#!/bin/sh\n")],
        Vec::new(),
    )
    .unwrap();
    let files: Vec<String> = paths_of(&tar_bytes)
        .into_iter()
        .filter(|path| !path.ends_with('/'))
        .collect();
    assert_eq!(
        files,
        [
            "imagegen/host-venv.sh".to_string(),
            "imagegen/sources".to_string(),
            "tmp/wx/v/bin/demo".to_string(),
            "tmp/wx/v/bin/demo-gui".to_string(),
            "tmp/wx/v/bin/demo-script".to_string(),
            "tmp/wx/v/bin/demo-sub".to_string(),
            "tmp/wx/v/bin/plain.sh".to_string(),
            format!("{SITE}/demo-1.0.dist-info/INSTALLER"),
            format!("{SITE}/demo-1.0.dist-info/METADATA"),
            format!("{SITE}/demo-1.0.dist-info/RECORD"),
            format!("{SITE}/demo-1.0.dist-info/REQUESTED"),
            format!("{SITE}/demo-1.0.dist-info/WHEEL"),
            format!("{SITE}/demo-1.0.dist-info/entry_points.txt"),
            format!("{SITE}/demo/__init__.py"),
            format!("{SITE}/demo_pure.py"),
            format!("{SITE}/nvidia/cu13/lib/libcublas.so.13"),
        ]
    );
    let mut archive = tar::Archive::new(tar_bytes.as_slice());
    let mut sources = String::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path_bytes().as_ref() == HELPER_SOURCES.as_bytes() {
            entry.read_to_string(&mut sources).unwrap();
        }
    }
    assert_eq!(
        sources,
        format!("/{SITE}/demo/__init__.py\n/{SITE}/demo_pure.py\n")
    );
}

#[test]
fn the_bytecode_and_records_go_into_the_compiled_part_and_the_rest_of_what_the_helper_wrote_last() {
    let mut wheels = [demo()];
    let mut install = plan(&mut wheels, &venv()).unwrap();
    let record_path = format!("{SITE}/demo-1.0.dist-info/RECORD");
    // The files' layer, written before host-venv.sh ran: every file but the RECORD of a wheel
    // with sources.
    assert!(install.has_sources(0));
    let lower = install.part(&[0], Part::Files);
    assert!(!lower.files.contains_key(&record_path));
    assert_eq!(
        lower.files.len(),
        install.files.len() - 1,
        "one wheel, one RECORD"
    );
    assert!(lower
        .files
        .contains_key(&format!("{SITE}/demo/__init__.py")));
    assert!(install
        .part(&[0], Part::Compiled)
        .files
        .keys()
        .eq([&record_path]));

    let pyc = format!("{SITE}/demo/__pycache__/__init__.cpython-311.pyc");
    let stray = format!("{SITE}/other/__pycache__/x.cpython-311.pyc");
    let link = format!("{SITE}/nvidia/nccl/lib/libnccl.so");
    let tar_bytes = written(&[
        ("etc", 'd', b""),
        ("etc/ld.so.cache", 'f', b"cache"),
        (&format!("{SITE}/demo/__pycache__"), 'd', b""),
        (&pyc, 'f', b"bytecode"),
        (&stray, 'f', b"stray"),
        (&link, 'l', b"libnccl.so.2"),
    ]);
    let (bytecode, others) = split_written(&tar_bytes, &install).unwrap();
    assert_eq!(bytecode.len(), 1);
    assert_eq!(bytecode[0].path, pyc);
    assert_eq!(bytecode[0].data, b"bytecode");
    assert!(!bytecode[0].executable);
    // The pyc of no source of the install is what the script wrote, not bytecode of the venv's
    // packages; folders are left to the layers.
    assert_eq!(
        others.keys().cloned().collect::<Vec<_>>(),
        vec!["etc/ld.so.cache".to_string(), link.clone(), stray.clone()]
    );

    assert_eq!(install.add_bytecode(bytecode, &venv()).unwrap(), 1);
    let compiled = install.part(&[0], Part::Compiled);
    assert_eq!(
        compiled.files.keys().collect::<Vec<_>>(),
        [&record_path, &pyc],
        "the .pyc and the RECORD that lists it"
    );
    let last = others_tar(&install, others.clone()).unwrap();
    let last_paths = paths_of(&last);
    for expected in [
        "etc/".to_string(),
        "etc/ld.so.cache".to_string(),
        stray.clone(),
        link.clone(),
        format!("{SITE}/nvidia/nccl/lib/"),
    ] {
        assert!(last_paths.contains(&expected), "{expected}: {last_paths:?}");
    }
    // The two parts hold every file of the install once.
    for path in install.files.keys() {
        assert!(
            lower.files.contains_key(path) != compiled.files.contains_key(path),
            "/{path}: in exactly one of the two parts"
        );
    }
    assert!(
        install
            .part(&[0], Part::Files)
            .files
            .keys()
            .eq(lower.files.keys()),
        "the files' part is the same after byte-compiling"
    );
    // host-venv.sh may not rewrite a file of the wheels.
    let mut rewriting = others;
    rewriting.insert(
        format!("{SITE}/demo/__init__.py"),
        rewriting[&"etc/ld.so.cache".to_string()].clone(),
    );
    assert!(others_tar(&install, rewriting)
        .unwrap_err()
        .to_string()
        .contains("host-venv.sh rewrote a file the wheels install"));

    let files: BTreeMap<String, (Vec<u8>, bool)> = install
        .files
        .iter()
        .map(|(path, file)| {
            (
                path.clone(),
                (
                    content_of(&mut wheels, &file.content).unwrap(),
                    file.executable,
                ),
            )
        })
        .collect();
    assert_eq!(files[&pyc].0, b"bytecode");
    let record = String::from_utf8(files[&record_path].0.clone()).unwrap();
    assert!(
        record.contains(
            "demo/__init__.py,sha256=Apxw9IvaEL1FRj4Mc5jXeGBbUmKjv5w-CRAAyXjoeoo,28\r\ndemo/__pycache__/__init__.cpython-311.pyc,,\r\n"
        ),
        "{record}"
    );
    let rows: Vec<&str> = record.split("\r\n").collect();
    let mut sorted = rows.clone();
    sorted.sort();
    assert_eq!(rows[..rows.len() - 1], sorted[1..], "rows stay sorted");

    let orphan = Bytecode {
        path: stray,
        data: b"x".to_vec(),
        executable: false,
    };
    assert!(install
        .add_bytecode(vec![orphan], &venv())
        .unwrap_err()
        .to_string()
        .contains("byte-compiled from no source of the install"));
    assert_eq!(
        source_of_bytecode("a/b/__pycache__/c.cpython-312.opt-1.pyc"),
        Some("a/b/c.cpython-312.py".to_string())
    );
    assert_eq!(
        source_of_bytecode("a/b/__pycache__/c.cpython-311.pyc"),
        Some("a/b/c.py".to_string())
    );
    assert_eq!(source_of_bytecode("a/b/c.pyc"), None);
}

#[test]
fn a_venvs_key_changes_with_each_input_but_the_labels() {
    let wheels = vec!["wheels/a.whl cache/sha256-a".to_string()];
    let base = venv_wheels_key(b"script", "listing", &venv(), &wheels, "a");
    let mut changed = vec![
        venv_wheels_key(b"other script", "listing", &venv(), &wheels, "a"),
        venv_wheels_key(b"script", "other listing", &venv(), &wheels, "a"),
        venv_wheels_key(
            b"script",
            "listing",
            &Venv {
                python: "3.12".into(),
                ..venv()
            },
            &wheels,
            "a",
        ),
        venv_wheels_key(b"script", "listing", &venv(), &[], "a"),
        venv_wheels_key(b"script", "listing", &venv(), &wheels, "b"),
    ];
    assert_eq!(
        base,
        venv_wheels_key(b"script", "listing", &venv(), &wheels, "a")
    );
    let layers = vec!["sha256:l".to_string()];
    let config = serde_json::json!({"Env": ["A=1"], "Labels": {"a": "1"}});
    let key = venv_key(&base, &layers, &config);
    let relabelled = serde_json::json!({"Env": ["A=1"], "Labels": {"a": "2"}});
    assert_eq!(key, venv_key(&base, &layers, &relabelled), "labels aside");
    changed.extend([
        venv_key(&changed[0], &layers, &config),
        venv_key(&base, &[], &config),
        venv_key(&base, &layers, &serde_json::json!({"Env": ["A=2"]})),
    ]);
    changed.push(base.clone());
    changed.push(key);
    let distinct: std::collections::BTreeSet<&String> = changed.iter().collect();
    assert_eq!(distinct.len(), changed.len(), "{changed:?}");
}

#[test]
fn a_wheels_layer_is_the_same_whatever_else_the_venv_holds() {
    let layer = |wheels: &mut [Wheel<Cursor<Vec<u8>>>], of: usize| {
        let install = plan(wheels, &venv()).unwrap();
        let part = install.part(&[of], Part::Files);
        let (tar_bytes, _) = write_layer(&part, wheels, 315_532_800, Vec::new()).unwrap();
        (paths_of(&tar_bytes), tar_bytes, install.has_sources(of))
    };
    // cudnn alone, and cudnn after cublas, which installs the shared nvidia/__init__.py first.
    let (alone_paths, alone, alone_sources) = layer(&mut [shared("cudnn", b"")], 0);
    let (beside_paths, beside, _) = layer(
        &mut [shared("cublas", b""), shared("cudnn", b""), demo()],
        1,
    );
    assert!(
        alone_paths.contains(&format!("{SITE}/nvidia/__init__.py")),
        "{alone_paths:?}"
    );
    assert_eq!(alone_paths, beside_paths);
    assert_eq!(
        alone, beside,
        "the same bytes: the same layer digest in both images"
    );
    // Its one source makes its RECORD wait for the bytecode; a wheel without sources keeps it.
    assert!(alone_sources);
    assert!(!alone_paths.iter().any(|path| path.ends_with("RECORD")));
    let members: Vec<(&str, u32, &[u8])> = vec![
        ("lib/libx.so", 0o100755, b"lib"),
        (
            "libx-1.0.dist-info/METADATA",
            0o644,
            b"Metadata-Version: 2.1\nName: libx\nVersion: 1.0\n",
        ),
        (
            "libx-1.0.dist-info/WHEEL",
            0o644,
            b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n",
        ),
    ];
    let mut wheels = [Wheel::new(
        "libx-1.0-py3-none-any.whl",
        Cursor::new(wheel_bytes(&members, true)),
    )
    .unwrap()];
    let install = plan(&mut wheels, &venv()).unwrap();
    assert!(!install.has_sources(0));
    assert!(install
        .part(&[0], Part::Files)
        .files
        .contains_key(&format!("{SITE}/libx-1.0.dist-info/RECORD")));
    assert!(install.part(&[0], Part::Compiled).files.is_empty());
}
