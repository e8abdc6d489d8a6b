//! The crate's shape, checked: the import graph of `src/` (its `use crate::…`, `super::…` and
//! child-module paths, test code left out) has no circle and at most [`MAX_LEVELS`] levels; each
//! folder imports only folders below it in [`FOLDER_ORDER`] (so `generate/` never imports
//! `pipeline/`); `docker/` imports nothing but the model's parsers for the PyPI index; `cli.rs`
//! imports nothing of the crate; files are read and written only at the edges
//! ([`FILE_IO_ALLOWED`]: `project.rs` the loader, `docker/`, the build logs); and only `main.rs`
//! ends the process; a `pub` item is one another file uses or a `pub` signature shows (else it is
//! `pub(crate)` or private, where the dead-code lint sees it); the edge crates under `crates/`
//! are leaves (no workspace dependency, which Cargo enforces from then on), and registry clients
//! come from their one factory there; nothing outside `history/` can change the manifest but
//! through `history::ledger` (the declarations that make the compiler refuse it, see
//! [`ledger_doors_left_open`]). Each checker is also run on a small tree that breaks its rule, so
//! a checker that sees nothing fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest chain of modules, each importing the next, that the layout allows.
const MAX_LEVELS: usize = 8;

/// The top-level folders (and files) of `src/`, from the imperative shell down to the edge: each
/// imports only those after it. `cli.rs` (clap only) imports nothing of the crate.
const FOLDER_ORDER: &[&str] = &[
    "commands", "project", "pipeline", "attest", "generate", "history", "render", "resolve",
    "docker", "model", "cli",
];

/// The only files that may touch the file system (`std::fs`, `File`, `OpenOptions`, temporary
/// folders): the loader, the Docker/registry/PyPI edge, and the executor's build logs. A path
/// ending in `/` allows the whole folder.
const FILE_IO_ALLOWED: &[&str] = &["project.rs", "docker/", "pipeline/progress.rs"];

/// What touching the file system looks like in code.
const FILE_IO: &[&str] = &[
    "std::fs",
    "fs::",
    "File::open",
    "File::create",
    "OpenOptions",
    "tempfile::",
];

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `src/a/b.rs` → `a::b`, `src/a/mod.rs` → `a`, `src/lib.rs` → `` (the crate root).
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts.join("::")
}

/// The file's code without test modules and comments.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifier segments after `prefix` at `text[start..]`: `a::b::c` of `crate::a::b::c::{x}`.
fn segments_after(text: &str, start: usize) -> Vec<String> {
    let mut segments = Vec::new();
    let mut rest = &text[start..];
    loop {
        let length = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if length == 0 {
            break;
        }
        segments.push(rest[..length].to_string());
        rest = &rest[length..];
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => break,
        }
    }
    segments
}

/// The module paths a file refers to, absolute (`resolve::tags`, possibly with an item at the
/// end, which the caller trims to the nearest module).
fn references(module: &str, code: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let own: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        found.push(segments_after(code, at + "crate::".len()));
    }
    for (at, _) in code.match_indices("super::") {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        // In `a/b.rs` (module a::b), `super` is `a`; in `a/mod.rs` (module a) too it is the parent.
        let mut path: Vec<String> = own[..own.len().saturating_sub(1)].to_vec();
        path.extend(segments_after(code, at + "super::".len()));
        found.push(path);
    }
    for line in code.lines() {
        let line = line.trim_start();
        let Some(rest) = line
            .strip_prefix("pub use ")
            .or_else(|| line.strip_prefix("use "))
        else {
            continue;
        };
        let first = segments_after(rest, 0);
        if first.first().is_some_and(|name| children.contains(name)) {
            let mut path = own.clone();
            path.extend(first);
            found.push(path);
        }
    }
    found
}

struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
}

/// The crate's `src/`.
fn crate_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Each edge of the folder graph that goes up (or sideways) in `order`, and each folder the
/// order does not name, as `from -> to` lines.
fn order_violations(folders: &Graph, order: &[&str]) -> Vec<String> {
    let rank = |folder: &str| order.iter().position(|name| *name == folder);
    let mut violations = Vec::new();
    for (from, targets) in &folders.edges {
        if from.is_empty() {
            continue; // lib.rs, the crate root, only declares the folders.
        }
        let Some(from_rank) = rank(from) else {
            violations.push(format!("{from} is not in the folder order"));
            continue;
        };
        for target in targets {
            match rank(target) {
                Some(target_rank) if target_rank > from_rank => {}
                Some(_) => violations.push(format!("{from} -> {target}")),
                None => violations.push(format!("{target} is not in the folder order")),
            }
        }
    }
    violations
}

/// Every `file: pattern` of code (test code left out) outside `allowed` that touches the file
/// system.
fn file_io_violations(src: &Path, allowed: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(src).unwrap().display().to_string();
        let is_allowed = allowed.iter().any(|allowed| {
            relative == *allowed || (allowed.ends_with('/') && relative.starts_with(allowed))
        });
        if is_allowed || file.file_name().is_some_and(|name| name == "tests.rs") {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for pattern in FILE_IO {
            if code.contains(pattern) {
                violations.push(format!("{relative}: {pattern}"));
            }
        }
    }
    violations
}

impl Graph {
    fn of_crate() -> Graph {
        Graph::of_dir(&crate_src())
    }

    fn of_dir(src: &Path) -> Graph {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let mut modules: BTreeMap<String, PathBuf> = BTreeMap::new();
        for file in &files {
            let name = file.file_name().unwrap().to_string_lossy();
            if name == "main.rs" || name == "tests.rs" {
                continue;
            }
            modules.insert(module_of(src, file), file.clone());
        }
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (module, file) in &modules {
            let code = code_of(&std::fs::read_to_string(file).unwrap());
            let children: BTreeSet<String> = code
                .lines()
                .filter_map(|line| {
                    let line = line.trim();
                    let rest = line
                        .strip_prefix("pub mod ")
                        .or_else(|| line.strip_prefix("mod "))?;
                    Some(rest.trim_end_matches(';').to_string())
                })
                .collect();
            let entry = edges.entry(module.clone()).or_default();
            for mut path in references(module, &code, &children) {
                while !path.is_empty() && !modules.contains_key(&path.join("::")) {
                    path.pop();
                }
                let target = path.join("::");
                if path.is_empty() || target == *module {
                    continue;
                }
                entry.insert(target);
            }
        }
        Graph { edges }
    }

    /// Folder-level graph: each module's top-level folder (or file) of `src/`.
    fn folders(&self) -> Graph {
        let top = |module: &str| module.split("::").next().unwrap_or("").to_string();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, targets) in &self.edges {
            let entry = edges.entry(top(from)).or_default();
            for target in targets {
                if top(target) != top(from) {
                    entry.insert(top(target));
                }
            }
        }
        Graph { edges }
    }

    /// The longest import chain from each module, or the first circle found.
    fn levels(&self) -> Result<BTreeMap<String, Vec<String>>, Vec<String>> {
        fn visit(
            graph: &Graph,
            node: &str,
            stack: &mut Vec<String>,
            done: &mut BTreeMap<String, Vec<String>>,
        ) -> Result<Vec<String>, Vec<String>> {
            if let Some(chain) = done.get(node) {
                return Ok(chain.clone());
            }
            if let Some(at) = stack.iter().position(|n| n == node) {
                let mut circle = stack[at..].to_vec();
                circle.push(node.to_string());
                return Err(circle);
            }
            stack.push(node.to_string());
            let mut longest = Vec::new();
            for next in graph.edges.get(node).into_iter().flatten() {
                let chain = visit(graph, next, stack, done)?;
                if chain.len() > longest.len() {
                    longest = chain;
                }
            }
            stack.pop();
            let mut chain = vec![node.to_string()];
            chain.extend(longest);
            done.insert(node.to_string(), chain.clone());
            Ok(chain)
        }
        let mut done = BTreeMap::new();
        for node in self.edges.keys() {
            visit(self, node, &mut Vec::new(), &mut done)?;
        }
        Ok(done)
    }
}

#[test]
fn the_import_graph_has_no_circle_and_at_most_eight_levels() {
    let graph = Graph::of_crate();
    assert!(
        graph.edges.len() > 40,
        "the scan found too few modules to be real: {:?}",
        graph.edges.keys()
    );
    let chains = graph
        .levels()
        .unwrap_or_else(|circle| panic!("import circle: {}", circle.join(" -> ")));
    let longest = chains.values().max_by_key(|chain| chain.len()).unwrap();
    eprintln!(
        "longest import chain, {} levels: {}",
        longest.len(),
        longest.join(" -> ")
    );
    assert!(
        longest.len() <= MAX_LEVELS,
        "{} levels: {}",
        longest.len(),
        longest.join(" -> ")
    );
    let folders = graph.folders();
    folders
        .levels()
        .unwrap_or_else(|circle| panic!("folder circle: {}", circle.join(" -> ")));
    let violations = order_violations(&folders, FOLDER_ORDER);
    assert!(
        violations.is_empty(),
        "imports against the folder order {FOLDER_ORDER:?}: {violations:?}"
    );
    assert!(
        !folders.edges["generate"].contains("pipeline"),
        "generate/ imports pipeline/"
    );
    let docker_imports: BTreeSet<(String, String)> = graph
        .edges
        .iter()
        .filter(|(from, _)| from.starts_with("docker"))
        .flat_map(|(from, targets)| targets.iter().map(move |to| (from.clone(), to.clone())))
        .filter(|(_, to)| !to.starts_with("docker"))
        .collect();
    assert!(
        docker_imports
            .iter()
            .all(|(from, to)| from == "docker::pypi_index" && to.starts_with("model::")),
        "docker/ is the edge: only its PyPI client imports the model's parsers: {docker_imports:?}"
    );
    assert_eq!(
        folders.edges.get("cli").cloned().unwrap_or_default(),
        BTreeSet::new(),
        "cli.rs imports no module of the crate"
    );
    for stage in ["model", "resolve", "render", "history", "generate"] {
        let imports = folders.edges.get(stage).cloned().unwrap_or_default();
        for forbidden in ["commands", "project", "cli"] {
            assert!(
                !imports.contains(forbidden),
                "{stage}/ imports {forbidden}: the pure stages import nothing above them"
            );
        }
    }
}

#[test]
fn gpu_selftest_has_no_import_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("selftest/src");
    let graph = Graph::of_dir(&src);
    assert!(
        graph.edges.len() > 15 && graph.edges["rules"].contains("expected"),
        "the scan found too few modules to be real: {:?}",
        graph.edges.keys()
    );
    graph
        .levels()
        .unwrap_or_else(|circle| panic!("import circle: {}", circle.join(" -> ")));
}

#[test]
fn only_the_edges_touch_the_file_system() {
    let src = crate_src();
    let violations = file_io_violations(&src, FILE_IO_ALLOWED);
    assert!(
        violations.is_empty(),
        "file system calls outside {FILE_IO_ALLOWED:?}: {violations:?}"
    );
    // The loader does read files: the scan sees them there.
    assert!(!file_io_violations(&src, &[]).is_empty());
}

/// A small `src/` that breaks the rules: `generate/` imports `pipeline/`, `model/` reads a file,
/// `commands/` writes one; test code that does both is left out.
fn bad_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("lib.rs", "pub mod commands;\npub mod generate;\npub mod model;\npub mod pipeline;\n"),
        ("commands/mod.rs", "use crate::generate::x;\npub fn run() { std::fs::write(\"a\", \"b\").unwrap(); }\n"),
        ("generate/mod.rs", "use crate::pipeline::plan::select;\npub fn x() {}\n"),
        ("pipeline/mod.rs", "pub mod plan;\n"),
        ("pipeline/plan.rs", "use crate::model::Matrix;\npub fn select() {}\n"),
        ("model/mod.rs", "pub struct Matrix;\npub fn load() -> String { std::fs::read_to_string(\"m\").unwrap() }\n#[cfg(test)]\nmod tests { fn t() { let _ = std::fs::File::open(\"x\"); } }\n"),
    ];
    for (path, text) in files {
        let path = dir.path().join("src").join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

#[test]
fn the_checkers_fail_on_a_tree_that_breaks_the_layout() {
    let dir = bad_tree();
    let src = dir.path().join("src");
    let order = ["commands", "generate", "pipeline", "model"];
    let folders = Graph::of_dir(&src).folders();
    assert_eq!(order_violations(&folders, &order), Vec::<String>::new());
    // generate/ below pipeline/, as in the crate: its import goes up.
    let order = ["commands", "pipeline", "generate", "model"];
    assert_eq!(
        order_violations(&folders, &order),
        vec!["generate -> pipeline".to_string()]
    );
    assert_eq!(
        order_violations(&folders, &["commands", "pipeline", "model"]),
        vec![
            "generate is not in the folder order".to_string(),
            "generate is not in the folder order".to_string()
        ]
    );
    assert_eq!(
        file_io_violations(&src, &["project.rs"]),
        vec![
            "commands/mod.rs: std::fs",
            "commands/mod.rs: fs::",
            "model/mod.rs: std::fs",
            "model/mod.rs: fs::"
        ]
    );
    assert_eq!(
        file_io_violations(&src, &["commands/", "model/mod.rs"]),
        Vec::<String>::new()
    );
}

#[test]
fn the_scanner_sees_circles_and_levels() {
    let mut graph = Graph {
        edges: BTreeMap::new(),
    };
    graph.edges.insert("a".into(), ["b".to_string()].into());
    graph.edges.insert("b".into(), ["c".to_string()].into());
    graph.edges.insert("c".into(), BTreeSet::new());
    assert_eq!(graph.levels().unwrap()["a"], vec!["a", "b", "c"]);
    graph.edges.insert("c".into(), ["a".to_string()].into());
    assert!(graph.levels().is_err());
    let children: BTreeSet<String> = ["cells".to_string()].into();
    let found = references(
        "resolve",
        "use crate::model::version::DottedVersion;\nuse cells::expand;\nlet x = super::other::f();",
        &children,
    );
    assert!(found.contains(&vec![
        "model".into(),
        "version".into(),
        "DottedVersion".into()
    ]));
    assert!(found.contains(&vec!["resolve".into(), "cells".into(), "expand".into()]));
    assert!(found.contains(&vec!["other".into(), "f".into()]));
}

#[test]
fn only_main_ends_the_process() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let enders: Vec<String> = files
        .iter()
        .filter(|file| {
            std::fs::read_to_string(file)
                .unwrap()
                .contains("process::exit(")
        })
        .map(|file| file.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    assert_eq!(enders, vec!["main.rs"]);
}

/// The value types of `model/` (versions, OS names, platforms, digests) whose inner value is
/// visible: `struct Name(pub …)`. Such a field lets code past the loader build an unchecked value
/// or read the `String` and parse it again, which the newtypes exist to prevent.
fn public_newtype_fields(model: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(model, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        for line in code.lines() {
            let line = line.trim();
            let Some(at) = line.find("struct ") else {
                continue;
            };
            let rest = &line[at + "struct ".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let fields = rest[name.len()..].trim_start();
            if fields.starts_with('(')
                && fields[1..]
                    .split(',')
                    .any(|field| field.trim_start().starts_with("pub"))
            {
                let relative = file.strip_prefix(model).unwrap().display();
                found.push(format!("{relative}: {name}"));
            }
        }
    }
    found
}

#[test]
fn the_model_value_types_keep_their_fields_private() {
    let model = crate_src().join("model");
    let found = public_newtype_fields(&model);
    assert!(
        found.is_empty(),
        "newtypes of model/ with a public field (make it private, with a parsing constructor and an accessor): {found:?}"
    );
    // The scan sees the value types it guards ...
    let axes = std::fs::read_to_string(model.join("axes.rs")).unwrap();
    let version = std::fs::read_to_string(model.join("version.rs")).unwrap();
    for (name, text) in [
        ("VersionText", &version),
        ("OsName", &version),
        ("Platform", &axes),
    ] {
        assert!(
            text.contains(&format!("pub struct {name}(String"))
                && !text.contains(&format!("pub struct {name}(pub")),
            "{name} not found as a private newtype in model/"
        );
    }
    // ... and fails on one whose field is public.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("axes.rs"),
        "pub struct OsName(pub String);\npub struct Ok(String);\npub(crate) struct Pair(u8, pub(crate) u8);\n",
    )
    .unwrap();
    assert_eq!(
        public_newtype_fields(dir.path()),
        vec!["axes.rs: OsName".to_string(), "axes.rs: Pair".to_string()]
    );
}

/// The kind and name a line declares as `pub` (not `pub(crate)`), with whether its declaration
/// runs to a `{` or `;` (a function, type or constant) rather than ending with its line (a
/// field or variant).
fn pub_declaration(line: &str) -> Option<(&str, &str)> {
    let mut words = line
        .trim_start()
        .strip_prefix("pub ")?
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| !word.is_empty())
        .skip_while(|word| matches!(*word, "const" | "async" | "unsafe"));
    let kind = words.next()?;
    let kind = match kind {
        // `pub const fn name` skipped `const`; a bare `pub const NAME` lands here as the name.
        "fn" | "struct" | "enum" | "trait" | "type" | "static" => kind,
        _ if line.trim_start().starts_with("pub const ") => {
            return Some(("const", kind));
        }
        _ => return None,
    };
    Some((kind, words.next()?))
}

/// Whether `name` occurs in `text` as a whole word.
fn names(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        let word = |c: char| c.is_alphanumeric() || c == '_';
        !text[..at].ends_with(word) && !text[at + name.len()..].starts_with(word)
    })
}

/// What a file shows through its `pub` declarations other than line `skip`: each `pub` item's
/// signature (to its `{` or `;`), each `pub` field, and the variants of each `pub enum`.
fn public_surface(lines: &[&str], skip: usize) -> String {
    let mut surface = String::new();
    for (index, line) in lines.iter().enumerate() {
        if index == skip || !line.trim_start().starts_with("pub ") {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let is_enum = line.trim_start().starts_with("pub enum ");
        let runs_on = pub_declaration(line).is_some();
        for (offset, next) in lines[index..].iter().enumerate() {
            surface.push_str(next);
            surface.push('\n');
            let closes_enum = next.trim() == "}" && next.len() - next.trim_start().len() == indent;
            let ends = if is_enum {
                closes_enum
            } else {
                next.contains('{') || next.contains(';') || (offset == 0 && !runs_on)
            };
            if ends {
                break;
            }
        }
    }
    surface
}

/// `pub` items of the library (`src/` but `main.rs`) that no other file of `roots` names and
/// that no `pub` signature, field or variant of their own file shows: they can be `pub(crate)`
/// or private, so the dead-code lint sees them. Comments are left out.
fn needlessly_public(src: &Path, roots: &[PathBuf]) -> Vec<String> {
    let mut files = Vec::new();
    for root in roots {
        if root.exists() {
            rust_files(root, &mut files);
        }
    }
    let code: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let code: Vec<&str> = text
                .lines()
                .map(|line| line.split("//").next().unwrap_or_default())
                .collect();
            (file.clone(), code.join("\n"))
        })
        .collect();
    let mut found = Vec::new();
    for (file, text) in &code {
        if !file.starts_with(src) || file.ends_with("main.rs") {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for (index, line) in lines.iter().enumerate() {
            let Some((_, name)) = pub_declaration(line) else {
                continue;
            };
            let elsewhere = code
                .iter()
                .any(|(other, text)| other != file && names(text, name));
            if !elsewhere && !names(&public_surface(&lines, index), name) {
                let relative = file.strip_prefix(src).unwrap().display();
                found.push(format!("{relative}:{}: {name}", index + 1));
            }
        }
    }
    found
}

#[test]
fn pub_is_kept_for_what_other_files_use() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let roots = ["src", "tests", "bench"].map(|dir| root.join(dir));
    let found = needlessly_public(&crate_src(), &roots);
    assert!(
        found.is_empty(),
        "`pub` items nothing outside their file uses (make them pub(crate) or private): {found:?}"
    );
    // The scan fails on a tree that breaks the rule, and passes what another file calls and
    // what a multi-line signature or an enum variant shows.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("a.rs"),
        "pub fn lonely() {}\npub(crate) fn narrowed() {}\npub struct Shown;\npub enum Choice {\n    One(Carried),\n}\npub struct Carried;\npub fn show(\n    x: u8,\n) -> Shown {\n    Shown\n}\npub const LIMIT: usize = 1;\n// pub fn commented() {}\npub fn used() {}\n",
    )
    .unwrap();
    std::fs::write(src.join("b.rs"), "fn f() { crate::a::used(); }\n").unwrap();
    assert_eq!(
        needlessly_public(&src, std::slice::from_ref(&src)),
        vec![
            "a.rs:1: lonely".to_string(),
            "a.rs:4: Choice".to_string(),
            "a.rs:8: show".to_string(),
            "a.rs:13: LIMIT".to_string()
        ]
    );
}

/// The files under `src` (relative names) that make a registry client themselves
/// (`RegistryClient::new`) outside `allowed`.
fn registry_client_makers(src: &Path, allowed: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .iter()
        .filter_map(|file| {
            let name = file
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let code = code_of(&std::fs::read_to_string(file).unwrap());
            (code.contains("RegistryClient::new(") && !allowed.contains(&name.as_str()))
                .then_some(name)
        })
        .collect()
}

/// One registry factory: every command gets its registry clients from `Registries`
/// (credentials, CA, deadlines set once), which lives beside the client in the registry crate
/// (`crates/imagegen-oci`); no file of `src/` calls `RegistryClient::new`.
#[test]
fn registry_clients_come_from_the_one_factory() {
    let makers = registry_client_makers(&crate_src(), &[]);
    assert!(
        makers.is_empty(),
        "registry clients made outside imagegen_oci::Registries: {makers:?}"
    );
    // The scan sees the factory's own call.
    let oci = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/imagegen-oci/src");
    assert_eq!(
        registry_client_makers(&oci, &["registry.rs"]),
        vec!["registries.rs".to_string()]
    );
}

/// The workspace's packages and, for each, the workspace packages it depends on (path
/// dependencies), as `cargo metadata` reads the manifests.
fn workspace_dependencies() -> BTreeMap<String, (PathBuf, BTreeSet<String>)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|package| {
            let local: BTreeSet<String> = package["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|dependency| dependency["path"].is_string())
                .map(|dependency| dependency["name"].as_str().unwrap().to_string())
                .collect();
            let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap());
            (
                package["name"].as_str().unwrap().to_string(),
                (manifest, local),
            )
        })
        .collect()
}

/// The edges are crates under `crates/`, each a leaf: it depends on no package of the workspace
/// (Cargo then keeps imagegen's code out of it: nothing it does not name can be imported), and
/// imagegen depends on each.
#[test]
fn the_edge_crates_are_leaves_imagegen_depends_on() {
    let packages = workspace_dependencies();
    let crates_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let edges: Vec<&String> = packages
        .iter()
        .filter(|(_, (manifest, _))| manifest.starts_with(&crates_dir))
        .map(|(name, _)| name)
        .collect();
    for expected in ["imagegen-attest", "imagegen-oci", "imagegen-python"] {
        assert!(
            edges.iter().any(|name| *name == expected),
            "{expected} is not a workspace crate under crates/: {edges:?}"
        );
    }
    for name in &edges {
        let (_, local) = &packages[*name];
        assert!(
            local.is_empty(),
            "{name} depends on workspace packages {local:?}: an edge crate is a leaf"
        );
        assert!(
            packages["imagegen"].1.contains(*name),
            "imagegen does not depend on {name}"
        );
    }
}

/// Where the manifest's door could be left open, in the `src/` at `src`. The compiler keeps the
/// manifest behind `history::ledger` (a `Transaction` is the only way to change and write it)
/// because of a few declarations; this checks those declarations, so that widening one fails
/// here with the reason instead of silently letting code elsewhere change the record:
///
/// 1. `struct Manifest`'s tables are `pub(in crate::history)` or private: outside `history/`,
///    `manifest.images.insert(..)` and the like do not compile.
/// 2. No function of `history/` that changes a manifest (`&mut self` in `impl Manifest`, or a
///    `&mut Manifest` parameter) is `pub` or `pub(crate)`: outside `history/`, the only changes
///    are the `Transaction`'s methods.
/// 3. `CommitToken` keeps its field private and is made only in `history/ledger.rs`: only a
///    transaction's commit can call `Store::write`.
/// 4. No code outside `history/` (its tests included) names `&mut Manifest`: with 1 and 2 it
///    could only replace the whole record behind the ledger's back.
fn ledger_doors_left_open(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut open = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(src).unwrap().display().to_string();
        let text = std::fs::read_to_string(file).unwrap();
        let in_history = relative.starts_with("history/");
        let widely = |line: &str| {
            let line = line.trim_start();
            line.starts_with("pub ") || line.starts_with("pub(crate) ")
        };
        if relative == "history/manifest.rs" {
            let Some(start) = text.find("struct Manifest {") else {
                open.push(format!("{relative}: no `struct Manifest {{`"));
                continue;
            };
            let fields = &text[start..start + text[start..].find("\n}").unwrap_or(0)];
            for field in fields.lines().skip(1).filter(|line| widely(line)) {
                open.push(format!("{relative}: Manifest field `{}`", field.trim()));
            }
        }
        if in_history {
            let code = code_of(&text);
            let lines: Vec<&str> = code.lines().collect();
            let mut in_impl_manifest = false;
            for (index, line) in lines.iter().enumerate() {
                if line.starts_with("impl Manifest {") {
                    in_impl_manifest = true;
                } else if line.starts_with('}') {
                    in_impl_manifest = false;
                }
                if !widely(line) || !line.contains(" fn ") {
                    continue;
                }
                // The signature runs to its body's `{` (or a trait method's `;`).
                let end = lines[index..]
                    .iter()
                    .position(|line| line.contains('{') || line.contains(';'))
                    .map_or(lines.len(), |at| index + at + 1);
                let signature = lines[index..end].join(" ");
                let parameters = signature.split("->").next().unwrap_or_default();
                if parameters.contains("&mut Manifest")
                    || (in_impl_manifest && parameters.contains("&mut self"))
                {
                    open.push(format!(
                        "{relative}:{}: `{}` changes a manifest and is seen outside history/",
                        index + 1,
                        line.trim()
                    ));
                }
            }
        }
        if relative == "history/ledger.rs" && !text.contains("pub(crate) struct CommitToken(());") {
            open.push(format!("{relative}: CommitToken's field is not private"));
        }
        if relative != "history/ledger.rs" && text.contains("CommitToken(") {
            open.push(format!("{relative}: makes a CommitToken"));
        }
        if !in_history && names(&text, "&mut Manifest") {
            open.push(format!("{relative}: names `&mut Manifest`"));
        }
    }
    open
}

/// Nothing outside `history/` changes the manifest: every change is a
/// `history::ledger::Transaction` (see [`ledger_doors_left_open`] for what is checked and why).
#[test]
fn only_history_changes_the_manifest() {
    let open = ledger_doors_left_open(&crate_src());
    assert!(
        open.is_empty(),
        "the manifest changes only through history::ledger::Transaction (docs/manifest.md): {open:#?}"
    );
    // The checker fails on a tree that leaves each door open, and passes what stays closed.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let files = [
        (
            "history/manifest.rs",
            "pub(crate) struct Manifest {\n    pub(crate) images: u8,\n    pub(in crate::history) aliases: u8,\n}\n\nimpl Manifest {\n    pub(crate) fn record(&mut self) {}\n    pub(in crate::history) fn kept(&mut self) {}\n    pub(crate) fn images(&self) -> u8 {\n        self.images\n    }\n}\n",
        ),
        (
            "history/prune.rs",
            "pub(crate) fn prune(\n    manifest: &mut Manifest,\n) {\n}\npub(crate) fn pruned(manifest: &Manifest) -> Manifest {\n    manifest.clone()\n}\n",
        ),
        ("history/ledger.rs", "pub(crate) struct CommitToken(pub(crate) ());\n"),
        (
            "commands/x.rs",
            "fn f(manifest: &mut Manifest) {\n    let _ = CommitToken(());\n}\n",
        ),
    ];
    for (path, text) in files {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    assert_eq!(
        ledger_doors_left_open(&src),
        vec![
            "commands/x.rs: makes a CommitToken".to_string(),
            "commands/x.rs: names `&mut Manifest`".to_string(),
            "history/ledger.rs: CommitToken's field is not private".to_string(),
            "history/manifest.rs: Manifest field `pub(crate) images: u8,`".to_string(),
            "history/manifest.rs:7: `pub(crate) fn record(&mut self) {}` changes a manifest and is seen outside history/".to_string(),
            "history/prune.rs:1: `pub(crate) fn prune(` changes a manifest and is seen outside history/".to_string(),
        ]
    );
}
