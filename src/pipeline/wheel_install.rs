//! imagegen's own wheel installer: the files pip would write into a venv for a set of wheels,
//! as values, so the venv's layer can be made on the host in one pass from the wheel cache
//! (issue 21's cold path) instead of by pip in a Docker build, which writes the venv once and has
//! the builder read it back.
//!
//! What it does is what pip 23 (the pip of Debian 12's and Ubuntu 22.04's `python3 -m venv`)
//! does for `pip install --no-deps --no-compile` of wheels, following the binary distribution
//! format (packaging.python.org, "Binary distribution format"; PEP 427) and the recording of
//! installed projects ("Recording installed projects"; PEP 376):
//! - **Where files go.** A wheel's files go into the venv's `site-packages`
//!   (`{prefix}/lib/python{X.Y}/site-packages`; purelib and platlib are one folder in a venv whose
//!   `platlibdir` is `lib`, as on Debian and Ubuntu). Its `{name}-{version}.data/{scheme}/` files
//!   go by scheme: `purelib`, `platlib` into `site-packages`; `scripts` into `{prefix}/bin`;
//!   `headers` into `{prefix}/include/site/python{X.Y}/{name}`; `data` into `{prefix}`.
//! - **Modes.** A file is executable (0755) where its zip entry's mode is a regular file's with an
//!   execute bit, else 0644; folders are 0755 (pip's `zip_item_is_executable` under umask 022).
//! - **Scripts.** A `.data/scripts` file whose first line starts with `#!python` gets the venv's
//!   interpreter as its first line instead (pip's `fix_script`); each `console_scripts` and
//!   `gui_scripts` entry point becomes a script (pip's, through distlib's template), with pip's
//!   own names for pip and easy_install.
//! - **RECORD** is rewritten as pip does: every row of the wheel's RECORD with its path as
//!   installed (relative to `site-packages`), the rows of changed files hashed again, generated
//!   files (scripts, `INSTALLER`, `REQUESTED`) added with their sha256 and size, files the wheel
//!   did not record added without; sorted, CSV, `\r\n` line ends.
//! - **INSTALLER** says `imagegen` (what installed it, as the specification asks), and
//!   `REQUESTED` is written for every wheel (each is in the image's lock, as `pip install -r`
//!   marks each).
//!
//! Stricter than pip: two wheels that write the same path with different content are refused
//! (pip lets the later one win, in an order it does not promise); the same content is written
//! once. A wheel without exactly one `.dist-info` folder matching its file name, a `.data` scheme
//! pip does not know, a path leaving its folder, an entry point without a callable or a
//! `Wheel-Version` other than 1.x are refused with the wheel's name.
//!
//! Not here: byte-compiling (`.pyc` files need the image's own Python) and the venv itself
//! (`pyvenv.cfg`, the interpreter links: `python3 -m venv` in the image makes them).
//! Everything is a value in, value out over zip archives the caller opens.

use std::collections::BTreeMap;
use std::io::{Read, Seek, Write};
use std::str::FromStr;

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine as _;
use imagegen_python::{PackageName, WheelFilename};
use sha2::{Digest as _, Sha256};

/// The venv every image installs its lock into (the templates' `VIRTUAL_ENV`).
pub(crate) const VENV_PREFIX: &str = "/opt/venv";

/// The venv a set of wheels is installed into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Venv {
    /// The venv's folder, absolute, without a trailing `/`: `/opt/venv`.
    pub(crate) prefix: String,
    /// The Python version, `major.minor`: `3.11`.
    pub(crate) python: String,
}

impl Venv {
    /// The interpreter scripts are written for: `{prefix}/bin/python3`, what `sys.executable` is
    /// when the venv's `pip` runs.
    pub(crate) fn interpreter(&self) -> String {
        format!("{}/bin/python3", self.prefix)
    }

    /// `site-packages`, absolute.
    pub(crate) fn site_packages(&self) -> String {
        format!("{}/lib/python{}/site-packages", self.prefix, self.python)
    }
}

/// Where an installed file's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Content {
    /// Member `index` of wheel `wheel` (its place in the list given to [`plan`]), as it is.
    Member { wheel: usize, index: usize },
    /// Bytes made here: a generated script, a fixed script, RECORD, INSTALLER, REQUESTED.
    Made(Vec<u8>),
}

/// One file of the install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Installed {
    pub(crate) content: Content,
    pub(crate) executable: bool,
    /// Which wheel put it there (its file name), for messages.
    pub(crate) wheel: String,
    /// A file of the wheel (not a script, RECORD, INSTALLER or REQUESTED made for it): pip
    /// byte-compiles those ending in `.py`.
    pub(crate) from_wheel: bool,
}

/// Every file the wheels install, by absolute path without the leading `/`, in byte order.
#[derive(Debug, Default)]
pub(crate) struct InstallPlan {
    pub(crate) files: BTreeMap<String, Installed>,
    /// Each wheel's RECORD (path as in `files`) and its rows, for the rows of `.pyc` files.
    records: BTreeMap<String, Vec<[String; 3]>>,
    /// Each source pip byte-compiles (path as in `files`) and the RECORD of every wheel that
    /// installs it (pip records a shared source's `.pyc` in each).
    sources: BTreeMap<String, Vec<String>>,
    /// The `.pyc` files [`InstallPlan::add_bytecode`] added (paths as in `files`).
    bytecode: std::collections::BTreeSet<String>,
    /// Every path each wheel installs (by its place in the list given to [`plan`]), a file two
    /// wheels share in both: a layer of one wheel holds all of its files whatever else the venv
    /// holds.
    installs: Vec<std::collections::BTreeSet<String>>,
    /// Each wheel's RECORD (path as in `files`), by its place in the list given to [`plan`].
    wheel_records: Vec<String>,
}

/// Which of a set of wheels' files a layer holds ([`InstallPlan::part`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// Known before byte-compiling: every file of the wheels but their `.pyc` files and the
    /// RECORDs of wheels with sources (which gain the `.pyc` rows).
    Files,
    /// The `.pyc` files of the wheels' sources and the RECORDs of the wheels with sources.
    Compiled,
}

impl InstallPlan {
    /// The sources pip byte-compiles: every file of a wheel ending in `.py` (absolute paths).
    pub(crate) fn sources(&self) -> impl Iterator<Item = String> + '_ {
        self.sources.keys().map(|path| format!("/{path}"))
    }

    /// Whether wheel `wheel` (its place in the list given to [`plan`]) installs a source pip
    /// byte-compiles: its RECORD then gains rows when it is byte-compiled.
    pub(crate) fn has_sources(&self, wheel: usize) -> bool {
        self.installs
            .get(wheel)
            .is_some_and(|paths| paths.iter().any(|path| self.sources.contains_key(path)))
    }

    /// The part `part` of the files of `wheels` (places in the list given to [`plan`]): what one
    /// layer of the venv holds ([`crate::pipeline::venv_cut`]). Every file one of the wheels
    /// installs is in it, also one another wheel of the venv installs too, so the layer is the
    /// same whatever else the venv holds.
    pub(crate) fn part(&self, wheels: &[usize], part: Part) -> InstallPlan {
        let mut paths = std::collections::BTreeSet::new();
        let mut compiled_records = std::collections::BTreeSet::new();
        for &wheel in wheels {
            let Some(installed) = self.installs.get(wheel) else {
                continue;
            };
            if self.has_sources(wheel) {
                compiled_records.insert(self.wheel_records[wheel].as_str());
            }
            paths.extend(installed.iter().map(String::as_str));
        }
        let keep = |path: &str| -> bool {
            if self.bytecode.contains(path) {
                return part == Part::Compiled
                    && source_of_bytecode(path)
                        .is_some_and(|source| paths.contains(source.as_str()));
            }
            let compiled_record = compiled_records.contains(path);
            match part {
                Part::Files => paths.contains(path) && !compiled_record,
                Part::Compiled => compiled_record,
            }
        };
        InstallPlan {
            files: self
                .files
                .iter()
                .filter(|(path, _)| keep(path))
                .map(|(path, file)| (path.clone(), file.clone()))
                .collect(),
            ..InstallPlan::default()
        }
    }

    /// Adds the byte-compiled files `compiled` (path as in `files`, content, executable), each
    /// next to a source of the plan, with a row in its wheel's RECORD (`path,,`, as pip records
    /// the `.pyc` files it writes). A `.pyc` of no source of the plan is refused.
    pub(crate) fn add_bytecode(&mut self, compiled: Vec<Bytecode>, venv: &Venv) -> Result<usize> {
        let site = venv.site_packages();
        let count = compiled.len();
        let mut touched = std::collections::BTreeSet::new();
        for Bytecode {
            path,
            data,
            executable,
        } in compiled
        {
            let source = source_of_bytecode(&path)
                .ok_or_else(|| anyhow!("/{path}: not a .pyc in a __pycache__ folder"))?;
            let records = self
                .sources
                .get(&source)
                .ok_or_else(|| anyhow!("/{path}: byte-compiled from no source of the install"))?
                .clone();
            let wheel = self.files[&source].wheel.clone();
            for record in records {
                self.records
                    .get_mut(&record)
                    .expect("every source's RECORD is planned")
                    .push([
                        relative(&site, &format!("/{path}")),
                        String::new(),
                        String::new(),
                    ]);
                touched.insert(record);
            }
            self.bytecode.insert(path.clone());
            self.files.insert(
                path,
                Installed {
                    content: Content::Made(data),
                    executable,
                    wheel,
                    from_wheel: false,
                },
            );
        }
        for record in touched {
            let rows = self.records.get_mut(&record).expect("planned");
            rows.sort();
            let text = record_text(rows);
            self.files
                .get_mut(&record)
                .expect("every RECORD is a file of the plan")
                .content = Content::Made(text);
        }
        Ok(count)
    }
}

/// A byte-compiled file host-venv.sh wrote: its path (as in [`InstallPlan::files`]), content and
/// whether it is executable (a `.pyc` takes its source's mode).
pub(crate) struct Bytecode {
    pub(crate) path: String,
    pub(crate) data: Vec<u8>,
    pub(crate) executable: bool,
}

/// A file or link host-venv.sh wrote besides bytecode: its header, link target and content.
type WrittenEntry = (tar::Header, Option<Vec<u8>>, Vec<u8>);

/// The files and links host-venv.sh wrote besides bytecode, by path (relative to `/`).
pub(crate) type WrittenOthers = BTreeMap<String, WrittenEntry>;

/// The source of `dir/__pycache__/name.cpython-311.pyc`: `dir/name.py`.
pub(crate) fn source_of_bytecode(path: &str) -> Option<String> {
    let (folder, file) = path.rsplit_once("/__pycache__/")?;
    let stem = file.strip_suffix(".pyc")?;
    let (name, _tag) = stem.rsplit_once('.')?;
    Some(format!("{folder}/{name}.py"))
}

/// RECORD's text for `rows` (sorted): CSV as Python's `csv` module writes it, `\r\n` line ends.
fn record_text(rows: &[[String; 3]]) -> Vec<u8> {
    let mut record = String::new();
    for row in rows {
        let fields: Vec<String> = row.iter().map(|field| csv_field(field)).collect();
        record.push_str(&fields.join(","));
        record.push_str("\r\n");
    }
    record.into_bytes()
}

/// A wheel to install: its file name (`torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl`) and
/// its archive.
pub(crate) struct Wheel<R> {
    pub(crate) file_name: String,
    pub(crate) archive: zip::ZipArchive<R>,
}

impl<R: Read + Seek> Wheel<R> {
    pub(crate) fn new(file_name: &str, reader: R) -> Result<Wheel<R>> {
        let archive = zip::ZipArchive::new(reader)
            .with_context(|| format!("{file_name}: not a readable zip archive"))?;
        Ok(Wheel {
            file_name: file_name.to_string(),
            archive,
        })
    }

    fn read_member(&mut self, index: usize) -> Result<Vec<u8>> {
        let mut member = self
            .archive
            .by_index(index)
            .with_context(|| format!("{}: member {index}", self.file_name))?;
        let mut data = Vec::with_capacity(member.size() as usize);
        member
            .read_to_end(&mut data)
            .with_context(|| format!("{}: {}", self.file_name, member.name()))?;
        Ok(data)
    }

    fn read_named(&mut self, name: &str) -> Result<Option<Vec<u8>>> {
        match self.archive.index_for_name(name) {
            Some(index) => self.read_member(index).map(Some),
            None => Ok(None),
        }
    }
}

/// The plan of installing `wheels` into `venv`: every file with its content's source.
pub(crate) fn plan<R: Read + Seek>(wheels: &mut [Wheel<R>], venv: &Venv) -> Result<InstallPlan> {
    let mut install = InstallPlan::default();
    for number in 0..wheels.len() {
        let WheelFiles {
            files,
            record,
            rows,
        } = plan_wheel(&mut wheels[number], number, venv)?;
        install
            .installs
            .push(files.iter().map(|(path, _)| path.clone()).collect());
        install.wheel_records.push(record.clone());
        for (path, file) in files {
            if file.from_wheel && path.ends_with(".py") {
                install
                    .sources
                    .entry(path.clone())
                    .or_default()
                    .push(record.clone());
            }
            add(&mut install, wheels, path, file)?;
        }
        install.records.insert(record, rows);
    }
    Ok(install)
}

/// Adds `file` at `path`; the same content from two wheels is kept once, other content refused.
fn add<R: Read + Seek>(
    install: &mut InstallPlan,
    wheels: &mut [Wheel<R>],
    path: String,
    file: Installed,
) -> Result<()> {
    let Some(earlier) = install.files.get(&path) else {
        install.files.insert(path, file);
        return Ok(());
    };
    let earlier = earlier.clone();
    let same = content_of(wheels, &earlier.content)? == content_of(wheels, &file.content)?
        && earlier.executable == file.executable;
    if !same {
        bail!(
            "/{path}: {} and {} both install it, with different content or mode; pip would keep \
             whichever it installed last, in an order it does not promise, and leave the other \
             project broken\nhint: keep one of the two projects in matrix.yaml's `pip:` \
             requirements and run `imagegen lock` again",
            earlier.wheel,
            file.wheel
        );
    }
    Ok(())
}

/// The bytes of `content`.
pub(crate) fn content_of<R: Read + Seek>(
    wheels: &mut [Wheel<R>],
    content: &Content,
) -> Result<Vec<u8>> {
    match content {
        Content::Member { wheel, index } => wheels[*wheel].read_member(*index),
        Content::Made(bytes) => Ok(bytes.clone()),
    }
}

/// The project of a wheel's file name (`{name}-{version}-…`), normalized (PEP 503).
fn project_name(file_name: &str) -> Result<PackageName> {
    let wheel = WheelFilename::from_str(file_name).map_err(|error| anyhow!("{error}"))?;
    Ok(wheel.name().clone())
}

/// What one wheel installs: its files (path, file), RECORD's path and RECORD's rows.
struct WheelFiles {
    files: Vec<(String, Installed)>,
    record: String,
    rows: Vec<[String; 3]>,
}

/// The files one wheel installs, with RECORD, INSTALLER and REQUESTED; RECORD's path and rows.
fn plan_wheel<R: Read + Seek>(
    wheel: &mut Wheel<R>,
    number: usize,
    venv: &Venv,
) -> Result<WheelFiles> {
    let file_name = wheel.file_name.clone();
    let name = project_name(&file_name)?;
    let names: Vec<String> = (0..wheel.archive.len())
        .map(|index| {
            wheel
                .archive
                .name_for_index(index)
                .map(str::to_string)
                .ok_or_else(|| anyhow!("{file_name}: member {index} has no name"))
        })
        .collect::<Result<_>>()?;
    let mut info_dirs: Vec<&str> = names
        .iter()
        .filter_map(|member| member.split('/').next())
        .filter(|top| top.ends_with(".dist-info"))
        .collect();
    info_dirs.sort();
    info_dirs.dedup();
    let info_dir = match info_dirs.as_slice() {
        [one] => one.to_string(),
        [] => bail!("{file_name}: no .dist-info folder"),
        many => bail!(
            "{file_name}: more than one .dist-info folder: {}",
            many.join(", ")
        ),
    };
    let info_stem = info_dir.trim_end_matches(".dist-info");
    let (info_name, _) = info_stem.split_once('-').unwrap_or((info_stem, ""));
    if PackageName::from_str(info_name).ok().as_ref() != Some(&name) {
        bail!("{file_name}: its metadata folder {info_dir} is for another project");
    }
    let wheel_metadata = wheel
        .read_named(&format!("{info_dir}/WHEEL"))?
        .ok_or_else(|| anyhow!("{file_name}: no {info_dir}/WHEEL"))?;
    let wheel_metadata = String::from_utf8_lossy(&wheel_metadata).into_owned();
    let wheel_version = header_value(&wheel_metadata, "Wheel-Version")
        .ok_or_else(|| anyhow!("{file_name}: {info_dir}/WHEEL has no Wheel-Version"))?;
    if wheel_version.split('.').next() != Some("1") {
        bail!("{file_name}: Wheel-Version {wheel_version}: only 1.x is installed");
    }
    let metadata = wheel
        .read_named(&format!("{info_dir}/METADATA"))?
        .ok_or_else(|| anyhow!("{file_name}: no {info_dir}/METADATA"))?;
    let dist_name = header_value(&String::from_utf8_lossy(&metadata), "Name")
        .ok_or_else(|| anyhow!("{file_name}: {info_dir}/METADATA has no Name"))?;

    let data_dir = format!("{info_stem}.data/");
    let site = venv.site_packages();
    let record_path = format!("{info_dir}/RECORD");
    let mut files: Vec<(String, Installed)> = Vec::new();
    // Zip path → path as recorded (relative to site-packages), and the paths whose content changed.
    let mut recorded: BTreeMap<String, String> = BTreeMap::new();
    let mut changed: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (index, member) in names.iter().enumerate() {
        if member.ends_with('/') || *member == record_path {
            continue;
        }
        let entry = wheel
            .archive
            .by_index_raw(index)
            .with_context(|| format!("{file_name}: {member}"))?;
        let mode = entry.unix_mode().unwrap_or(0);
        drop(entry);
        let executable = zip_mode_is_executable(mode);
        let (target, is_script) = match member.strip_prefix(&data_dir) {
            Some(rest) => {
                let (scheme, inner) = rest
                    .split_once('/')
                    .ok_or_else(|| anyhow!("{file_name}: {member}: a file outside a scheme"))?;
                let root = match scheme {
                    "purelib" | "platlib" => site.clone(),
                    "scripts" => format!("{}/bin", venv.prefix),
                    "headers" => format!(
                        "{}/include/site/python{}/{dist_name}",
                        venv.prefix, venv.python
                    ),
                    "data" => venv.prefix.clone(),
                    other => bail!(
                        "{file_name}: {member}: unknown scheme {other:?} (purelib, platlib, \
                         scripts, headers, data)"
                    ),
                };
                (join(&root, inner, &file_name)?, scheme == "scripts")
            }
            None => (join(&site, member, &file_name)?, false),
        };
        let mut content = Content::Member {
            wheel: number,
            index,
        };
        if is_script {
            let data = wheel.read_member(index)?;
            if data.starts_with(b"#!python") {
                let rest = match data.iter().position(|&byte| byte == b'\n') {
                    Some(end) => &data[end + 1..],
                    None => &[][..],
                };
                let mut fixed = format!("#!{}\n", venv.interpreter()).into_bytes();
                fixed.extend_from_slice(rest);
                changed.insert(relative(&site, &target), fixed.clone());
                content = Content::Made(fixed);
            }
        }
        recorded.insert(member.clone(), relative(&site, &target));
        files.push((
            target,
            Installed {
                content,
                executable,
                wheel: file_name.clone(),
                from_wheel: true,
            },
        ));
    }

    // Entry points.
    let mut generated: Vec<(String, Vec<u8>)> = Vec::new();
    if let Some(entry_points) = wheel.read_named(&format!("{info_dir}/entry_points.txt"))? {
        let entry_points = String::from_utf8_lossy(&entry_points).into_owned();
        for (script, value) in scripts_to_generate(&entry_points, &venv.python) {
            let data = entry_point_script(&venv.interpreter(), &value)
                .with_context(|| format!("{file_name}: entry point {script} = {value}"))?;
            let target = join(&format!("{}/bin", venv.prefix), &script, &file_name)?;
            generated.push((target, data));
        }
    }
    generated.push((
        format!("{site}/{info_dir}/INSTALLER"),
        b"imagegen\n".to_vec(),
    ));
    generated.push((format!("{site}/{info_dir}/REQUESTED"), Vec::new()));

    // RECORD, as pip rewrites it.
    let old_record = wheel
        .read_named(&record_path)?
        .ok_or_else(|| anyhow!("{file_name}: no {record_path}"))?;
    let old_record = String::from_utf8(old_record)
        .map_err(|_| anyhow!("{file_name}: {record_path} is not UTF-8"))?;
    let mut rows: Vec<[String; 3]> = Vec::new();
    for (line, row) in parse_csv(&old_record)
        .with_context(|| format!("{file_name}: {record_path}"))?
        .into_iter()
        .enumerate()
    {
        let mut row = row.into_iter();
        let Some(path) = row.next() else {
            continue;
        };
        if path.is_empty() {
            bail!("{file_name}: {record_path}: row {} has no path", line + 1);
        }
        let path = recorded.remove(&path).unwrap_or(path);
        let (hash, size) = match changed.get(&path) {
            Some(data) => (record_hash(data), data.len().to_string()),
            None => (
                row.next().unwrap_or_default(),
                row.next().unwrap_or_default(),
            ),
        };
        rows.push([path, hash, size]);
    }
    for (target, data) in &generated {
        rows.push([
            relative(&site, target),
            record_hash(data),
            data.len().to_string(),
        ]);
    }
    for path in recorded.into_values() {
        rows.push([path, String::new(), String::new()]);
    }
    rows.sort();
    let record = record_text(&rows);
    for (target, data) in generated {
        let executable = target.starts_with(&format!("{}/bin/", venv.prefix));
        files.push((
            target,
            Installed {
                content: Content::Made(data),
                executable,
                wheel: file_name.clone(),
                from_wheel: false,
            },
        ));
    }
    files.push((
        format!("{site}/{record_path}"),
        Installed {
            content: Content::Made(record),
            executable: false,
            wheel: file_name.clone(),
            from_wheel: false,
        },
    ));
    let files = files
        .into_iter()
        .map(|(path, file)| (path.trim_start_matches('/').to_string(), file))
        .collect();
    Ok(WheelFiles {
        files,
        record: format!("{site}/{record_path}")
            .trim_start_matches('/')
            .to_string(),
        rows,
    })
}

/// pip's `zip_item_is_executable`: a regular file's mode with an execute bit (a mode without a
/// file type, as Python's zipfile writes when told only the permissions, is not).
fn zip_mode_is_executable(mode: u32) -> bool {
    mode & 0o170000 == 0o100000 && mode & 0o111 != 0
}

/// The value of an email-header-style field (`Name: value`) of WHEEL or METADATA.
fn header_value(text: &str, field: &str) -> Option<String> {
    text.lines()
        .take_while(|line| !line.is_empty())
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(field)
                .then(|| value.trim().to_string())
        })
}

/// `root/inner`, refusing an `inner` that is absolute or leaves `root` (`..`).
fn join(root: &str, inner: &str, file_name: &str) -> Result<String> {
    if inner.is_empty()
        || inner.starts_with('/')
        || inner.split('/').any(|part| part == ".." || part == ".")
        || inner.contains('\\')
        || inner.contains('\0')
    {
        bail!("{file_name}: {inner:?}: a path that would leave its folder");
    }
    Ok(format!("{root}/{inner}"))
}

/// `path` relative to the folder `from` (both absolute), as `os.path.relpath` gives it.
fn relative(from: &str, path: &str) -> String {
    let from: Vec<&str> = from.split('/').filter(|part| !part.is_empty()).collect();
    let to: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    let common = from
        .iter()
        .zip(&to)
        .take_while(|(left, right)| left == right)
        .count();
    let mut parts: Vec<&str> = vec![".."; from.len() - common];
    parts.extend(&to[common..]);
    parts.join("/")
}

/// RECORD's hash of `data`: `sha256=` and the urlsafe base64 of the digest, unpadded.
fn record_hash(data: &[u8]) -> String {
    format!(
        "sha256={}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(data))
    )
}

/// A field as Python's `csv` module writes it (the `excel` dialect, minimal quoting).
fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

/// The rows of a CSV text (RECORD): fields split at commas, double-quoted fields with `""` for a
/// quote; empty lines skipped.
fn parse_csv(text: &str) -> Result<Vec<Vec<String>>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut characters = text.chars().peekable();
    let mut any = false;
    while let Some(character) = characters.next() {
        if quoted {
            match character {
                '"' if characters.peek() == Some(&'"') => {
                    characters.next();
                    field.push('"');
                }
                '"' => quoted = false,
                other => field.push(other),
            }
            continue;
        }
        match character {
            '"' if field.is_empty() => {
                quoted = true;
                any = true;
            }
            ',' => {
                row.push(std::mem::take(&mut field));
                any = true;
            }
            '\r' if characters.peek() == Some(&'\n') => {}
            '\n' | '\r' => {
                if any || !field.is_empty() {
                    row.push(std::mem::take(&mut field));
                    rows.push(std::mem::take(&mut row));
                }
                any = false;
            }
            other => {
                field.push(other);
                any = true;
            }
        }
    }
    if quoted {
        bail!("a quoted field is not closed");
    }
    if any || !field.is_empty() {
        row.push(field);
        rows.push(row);
    }
    Ok(rows)
}

/// The `(script name, entry point)` pairs pip generates scripts for, from `entry_points.txt`:
/// `console_scripts` and `gui_scripts` (alike on Linux), with pip's own names for pip
/// (`pip`, `pip3`, `pip3.11`) and easy_install (`easy_install`, `easy_install-3.11`) in place of
/// the wheel's versioned ones.
fn scripts_to_generate(entry_points: &str, python: &str) -> Vec<(String, String)> {
    let mut scripts: BTreeMap<String, String> = BTreeMap::new();
    let mut section = String::new();
    for line in entry_points.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
        {
            section = name.trim().to_string();
            continue;
        }
        if section != "console_scripts" && section != "gui_scripts" {
            continue;
        }
        if let Some((name, value)) = line.split_once('=') {
            scripts.insert(name.trim().to_string(), value.trim().to_string());
        }
    }
    let major = python.split('.').next().unwrap_or(python);
    let versioned = |name: &str, base: &str| {
        name.strip_prefix(base).is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .trim_start_matches('-')
                    .chars()
                    .all(|character| character.is_ascii_digit() || character == '.')
        })
    };
    if let Some(pip) = scripts.remove("pip") {
        scripts.retain(|name, _| !versioned(name, "pip"));
        scripts.insert("pip".to_string(), pip.clone());
        scripts.insert(format!("pip{major}"), pip.clone());
        scripts.insert(format!("pip{python}"), pip);
    }
    if let Some(easy_install) = scripts.remove("easy_install") {
        scripts.retain(|name, _| !versioned(name, "easy_install"));
        scripts.insert("easy_install".to_string(), easy_install.clone());
        scripts.insert(format!("easy_install-{python}"), easy_install);
    }
    scripts.into_iter().collect()
}

/// The script pip writes for the entry point `value` (`module:attribute.path [extras]`).
fn entry_point_script(interpreter: &str, value: &str) -> Result<Vec<u8>> {
    let value = match value.split_once('[') {
        Some((before, _extras)) => before.trim(),
        None => value.trim(),
    };
    let (module, function) = value
        .split_once(':')
        .map(|(module, function)| (module.trim(), function.trim()))
        .ok_or_else(|| anyhow!("an entry point needs a callable (module:function)"))?;
    let identifier = |text: &str| {
        !text.is_empty()
            && text.split('.').all(|part| {
                !part.is_empty()
                    && !part.starts_with(|character: char| character.is_ascii_digit())
                    && part
                        .chars()
                        .all(|character| character.is_alphanumeric() || character == '_')
            })
    };
    if !identifier(module) || !identifier(function) {
        bail!("not a module:function entry point");
    }
    if interpreter.len() > 127 || interpreter.contains(' ') {
        bail!("the interpreter path {interpreter} cannot be a shebang line");
    }
    let import_name = function.split('.').next().unwrap_or(function);
    let mut script = Vec::new();
    write!(
        script,
        "#!{interpreter}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {module} import \
         {import_name}\nif __name__ == '__main__':\n    sys.argv[0] = \
         re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit({function}())\n"
    )?;
    Ok(script)
}

/// Checks that the wheels `wheels` (file name, reader) install into `venv` side by side: no two
/// of them write one path with different content (pip would keep whichever it installed last,
/// in an order it does not promise, leaving one of the two packages broken). Reads each wheel's
/// directory and metadata, and the content of shared paths only. Returns how many files the
/// install writes.
pub(crate) fn check_side_by_side<R: Read + Seek>(
    wheels: Vec<(String, R)>,
    venv: &Venv,
) -> Result<usize> {
    let mut wheels = wheels
        .into_iter()
        .map(|(file_name, reader)| Wheel::new(&file_name, reader))
        .collect::<Result<Vec<_>>>()?;
    Ok(plan(&mut wheels, venv)?.files.len())
}

/// The layer of `install`: a tar whose entries are every folder on the way to an installed file
/// (0755) and every file (0644, or 0755 where executable), in byte order of their path, owned by
/// root, every mtime `epoch`: the normalized form of `normalize`, written into `out` as each
/// wheel member is inflated (one file is held at a time). Returns `out` and the file count.
pub(crate) fn write_layer<R: Read + Seek, W: Write>(
    install: &InstallPlan,
    wheels: &mut [Wheel<R>],
    epoch: u64,
    out: W,
) -> Result<(W, usize)> {
    let mut folders: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    for path in install.files.keys() {
        let mut end = path.len();
        while let Some(slash) = path[..end].rfind('/') {
            if !folders.insert(&path[..slash]) {
                break;
            }
            end = slash;
        }
    }
    let mut entries: Vec<(&str, Option<&Installed>)> = folders
        .into_iter()
        .map(|folder| (folder, None))
        .chain(
            install
                .files
                .iter()
                .map(|(path, file)| (path.as_str(), Some(file))),
        )
        .collect();
    entries.sort_by(|left, right| left.0.cmp(right.0));
    let mut builder = tar::Builder::new(out);
    let mut count = 0;
    for (path, file) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(epoch);
        match file {
            None => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder
                    .append_data(&mut header, format!("{path}/"), std::io::empty())
                    .with_context(|| format!("/{path}"))?;
            }
            Some(file) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(if file.executable { 0o755 } else { 0o644 });
                count += 1;
                match &file.content {
                    Content::Made(data) => {
                        header.set_size(data.len() as u64);
                        builder
                            .append_data(&mut header, path, data.as_slice())
                            .with_context(|| format!("/{path}"))?;
                    }
                    Content::Member { wheel, index } => {
                        let wheel = &mut wheels[*wheel];
                        let name = wheel.file_name.clone();
                        let member = wheel
                            .archive
                            .by_index(*index)
                            .with_context(|| format!("{name}: member {index}"))?;
                        header.set_size(member.size());
                        builder
                            .append_data(&mut header, path, member)
                            .with_context(|| format!("{name}: /{path}"))?;
                    }
                }
            }
        }
    }
    Ok((builder.into_inner()?, count))
}

/// What decides a venv made on the host (`wheels: host`) and the package listing made beside
/// it, as far as it is known before the Docker build of the image around it: this imagegen (its
/// installer and compressor write the layers), the `wheels` (each as `context-path source-path`:
/// a file of the content-addressed wheel cache, whose path names its sha256), host-venv.sh
/// (`script`), the `listing` script, the `venv` and the `layout` (how the venv is cut into
/// layers and their files' time: `pipeline::venv_cut::layout_key`).
pub(crate) fn venv_wheels_key(
    script: &[u8],
    listing: &str,
    venv: &Venv,
    wheels: &[String],
    layout: &str,
) -> String {
    let mut hasher = Sha256::new();
    let mut line = |text: &str| {
        hasher.update(text.as_bytes());
        hasher.update(b"\n");
    };
    // 2: the `.pyc` files and RECORDs in the upper layer, not the venv's. 3: layers along the
    // wheels (the layout line).
    line(&format!(
        "imagegen host venv 3, imagegen {}",
        env!("CARGO_PKG_VERSION")
    ));
    line(&format!(
        "script {}",
        crate::model::digest::Digest::of(script)
    ));
    line(&format!("listing {listing:?}"));
    line(&format!("venv {} python {}", venv.prefix, venv.python));
    for wheel in wheels {
        line(&format!("wheel {wheel}"));
    }
    line(&format!("layout {layout}"));
    crate::model::digest::Digest::from_sha256(hasher.finalize().as_slice()).to_string()
}

/// What decides a venv made on the host and its listing: its [`venv_wheels_key`] and the image
/// it goes into, its `layers` (diff IDs, bottom first) and its `run_config` (the config's
/// `config`) but its labels, which nothing the scripts run reads. Two venvs with one key are the
/// same two layers and the same listing.
pub(crate) fn venv_key(
    wheels_key: &str,
    layers: &[String],
    run_config: &serde_json::Value,
) -> String {
    let mut hasher = Sha256::new();
    let mut line = |text: &str| {
        hasher.update(text.as_bytes());
        hasher.update(b"\n");
    };
    line(&format!("wheels {wheels_key}"));
    for layer in layers {
        line(&format!("layer {layer}"));
    }
    let mut config = run_config.clone();
    if let Some(object) = config.as_object_mut() {
        object.remove("Labels");
    }
    line(&format!("config {config}"));
    crate::model::digest::Digest::from_sha256(hasher.finalize().as_slice()).to_string()
}

/// Where host-venv.sh finds the list of sources to byte-compile.
pub(crate) const HELPER_SOURCES: &str = "imagegen/sources";
/// What host-venv.sh packs: every path it wrote.
pub(crate) const HELPER_WRITTEN: &str = "/imagegen/written.tar";

/// What the image's host-venv.sh works on, as a tar to extract at `/` of a container of the
/// image: the sources pip byte-compiles, every file of the `.dist-info` folders (for `pip check`
/// and the package listing), the venv's scripts (`{prefix}/bin/*`: the listing runs the lock's
/// `pip` where it pins one), the files of the CUDA libraries' folders the loader cache step lists
/// (`{site-packages}/nvidia/*/lib/*`, as templates/loader-cache.j2 finds them: a render test
/// checks the template's `find` is still that) and the list of
/// sources ([`HELPER_SOURCES`]), with the files `extra` (path without the leading `/`,
/// content); every mtime `epoch`, older than anything the script writes.
pub(crate) fn helper_tar<R: Read + Seek, W: Write>(
    install: &InstallPlan,
    wheels: &mut [Wheel<R>],
    venv: &Venv,
    epoch: u64,
    extra: &[(&str, &[u8])],
    out: W,
) -> Result<(W, usize)> {
    let site = venv.site_packages();
    let site = site.trim_start_matches('/');
    let libraries = format!("{site}/nvidia/");
    let scripts = format!("{}/bin/", venv.prefix.trim_start_matches('/'));
    let needed = |path: &str| {
        install.sources.contains_key(path)
            || path
                .strip_prefix(&scripts)
                .is_some_and(|name| !name.contains('/'))
            || path.strip_prefix(site).is_some_and(|rest| {
                rest.split('/')
                    .rev()
                    .nth(1)
                    .is_some_and(|folder| folder.ends_with(".dist-info"))
            })
            || path.strip_prefix(&libraries).is_some_and(|rest| {
                let parts: Vec<&str> = rest.split('/').collect();
                parts.len() == 3 && parts[1] == "lib"
            })
    };
    let mut helper = InstallPlan::default();
    for (path, file) in &install.files {
        if needed(path) {
            helper.files.insert(path.clone(), file.clone());
        }
    }
    let mut list = String::new();
    for source in install.sources() {
        list.push_str(&source);
        list.push('\n');
    }
    helper.files.insert(
        HELPER_SOURCES.to_string(),
        Installed {
            content: Content::Made(list.into_bytes()),
            executable: false,
            wheel: String::new(),
            from_wheel: false,
        },
    );
    for (path, content) in extra {
        helper.files.insert(
            path.to_string(),
            Installed {
                content: Content::Made(content.to_vec()),
                executable: false,
                wheel: String::new(),
                from_wheel: false,
            },
        );
    }
    write_layer(&helper, wheels, epoch, out)
}

/// What host-venv.sh wrote ([`HELPER_WRITTEN`], a tar of paths relative to `/`), split: the
/// `.pyc` files of the install's sources (path, content, executable), for
/// [`InstallPlan::add_bytecode`]; and every other file and link, for [`others_tar`]. Folders it
/// lists are left to the layers, which make their own.
pub(crate) fn split_written(
    written: &[u8],
    install: &InstallPlan,
) -> Result<(Vec<Bytecode>, WrittenOthers)> {
    let mut bytecode = Vec::new();
    let mut others = WrittenOthers::new();
    let mut archive = tar::Archive::new(written);
    for entry in archive.entries().context("what host-venv.sh wrote")? {
        let mut entry = entry.context("what host-venv.sh wrote")?;
        let path = String::from_utf8(entry.path_bytes().into_owned())
            .map_err(|_| anyhow!("host-venv.sh wrote a path that is not UTF-8"))?;
        let path = path
            .trim_start_matches("./")
            .trim_end_matches('/')
            .to_string();
        let kind = entry.header().entry_type();
        if kind.is_dir() || path.is_empty() {
            continue;
        }
        let mut data = Vec::new();
        entry
            .read_to_end(&mut data)
            .with_context(|| format!("/{path} of what host-venv.sh wrote"))?;
        let mode = entry.header().mode().unwrap_or(0o644);
        if kind.is_file()
            && source_of_bytecode(&path).is_some_and(|source| install.sources.contains_key(&source))
        {
            bytecode.push(Bytecode {
                path,
                data,
                executable: mode & 0o111 != 0,
            });
            continue;
        }
        if !(kind.is_file() || kind.is_symlink()) {
            bail!("/{path}: host-venv.sh wrote something that is neither a file nor a link");
        }
        let link = entry.link_name_bytes().map(|link| link.into_owned());
        others.insert(path, (entry.header().clone(), link, data));
    }
    Ok((bytecode, others))
}

/// The venv's last layer, as a tar to be normalized (the mtimes are the container's): what
/// host-venv.sh wrote besides bytecode (the loader cache), with every folder above it (0755,
/// root). A path of the install is refused: host-venv.sh must not rewrite a file of the wheels.
pub(crate) fn others_tar(install: &InstallPlan, others: WrittenOthers) -> Result<Vec<u8>> {
    for path in others.keys() {
        if install.files.contains_key(path) {
            bail!("/{path}: host-venv.sh rewrote a file the wheels install");
        }
    }
    let mut folders = std::collections::BTreeSet::new();
    for path in others.keys() {
        let mut end = path.len();
        while let Some(slash) = path[..end].rfind('/') {
            if !folders.insert(path[..slash].to_string()) {
                break;
            }
            end = slash;
        }
    }
    let mut builder = tar::Builder::new(Vec::new());
    for folder in &folders {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(0);
        builder.append_data(&mut header, format!("{folder}/"), std::io::empty())?;
    }
    for (path, (mut header, link, data)) in others {
        match link {
            Some(link) if header.entry_type().is_symlink() => {
                let target = String::from_utf8_lossy(&link).into_owned();
                builder.append_link(&mut header, &path, target)?;
            }
            _ => builder.append_data(&mut header, &path, data.as_slice())?,
        }
    }
    Ok(builder.into_inner()?)
}

#[cfg(test)]
mod tests;
