//! The crate's shape, checked: the import graph of `src/` (its `use crate::…`, `super::…` and
//! child-module paths, test code left out) has no circle and at most [`MAX_LEVELS`] levels, the
//! stage folders import each other in one direction, `docker/` imports no domain module,
//! `cli.rs` imports nothing of the crate, and only `main.rs` ends the process.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest chain of modules, each importing the next, that the layout allows.
const MAX_LEVELS: usize = 8;

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

impl Graph {
    fn of_crate() -> Graph {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut modules: BTreeMap<String, PathBuf> = BTreeMap::new();
        for file in &files {
            let name = file.file_name().unwrap().to_string_lossy();
            if name == "main.rs" || name == "tests.rs" {
                continue;
            }
            modules.insert(module_of(&src, file), file.clone());
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
    assert_eq!(
        folders.edges.get("docker").cloned().unwrap_or_default(),
        BTreeSet::new(),
        "docker/ is the edge: it imports no domain module"
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
