//! Every Rust file in the tree is compiled into a target, so no test drops out unseen. Removing
//! `mod upgrade;` from `tests/it/main.rs`, or a `#[cfg(test)] mod tests;` from `src/`, deletes
//! those tests without a word from the compiler; this check names the file instead.
//!
//! A file is compiled when a chain of `mod` declarations reaches it from a crate root, the
//! `src_path` of a target that `cargo metadata` lists (libraries, binaries, test and bench
//! targets of every workspace package). The walk reads each file as the compiler resolves
//! modules: comments, strings and character literals are not code; `mod x;` in `a/b.rs` is
//! `a/b/x.rs` or `a/b/x/mod.rs`, in a `mod.rs` or crate root `x.rs` beside it; inline
//! `mod m { }` blocks add a folder; `#[path = "..."]` is relative to the declaring file's folder
//! (within inline blocks, to their folders), and the file it names resolves its own modules as a
//! `mod.rs` does; `include!("f.rs")` reaches `f.rs` (its own `mod`s are not followed).
//!
//! A declaration under a `#[cfg(...)]` (or in a file or block under `#![cfg(...)]`) that is
//! false in `cargo test` on this machine reaches nothing: `test`, `unix`, `debug_assertions`,
//! this machine's `target_*` and the package's default features are true, everything else known
//! is false, and a cfg the walk does not know is an error naming its place, never a guess.
//!
//! The check itself is in `main.rs`, the crate root, so no `mod` line can drop it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// A crate root and the cargo features its package compiles with by default.
#[derive(Clone, Debug)]
pub struct Root {
    pub path: PathBuf,
    pub features: BTreeSet<String>,
}

/// What the walk found: the files it reached (and from where), and what it could not accept.
#[derive(Debug, Default)]
pub struct Walk {
    /// Each file reached, with the declaration that reached it (`file:line`, or "crate root").
    pub reached: BTreeMap<PathBuf, String>,
    /// Files declared only under a cfg that is false here, or switching themselves off: why.
    pub switched_off: BTreeMap<PathBuf, String>,
    /// Attributes the walk cannot evaluate (`file:line: ...`).
    pub errors: Vec<String>,
}

/// The crate roots of the workspace at `workspace`, from `cargo metadata`.
pub fn workspace_roots(workspace: &Path) -> Vec<Root> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(workspace)
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut roots = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        let features = default_features(&package["features"]);
        for target in package["targets"].as_array().unwrap() {
            roots.push(Root {
                path: PathBuf::from(target["src_path"].as_str().unwrap()),
                features: features.clone(),
            });
        }
    }
    roots
}

/// The package's own features that `default` turns on, directly or through other features.
fn default_features(features: &serde_json::Value) -> BTreeSet<String> {
    let mut on = BTreeSet::new();
    let mut queue = vec!["default".to_string()];
    while let Some(name) = queue.pop() {
        let Some(implied) = features[&name].as_array() else {
            continue;
        };
        if !on.insert(name) {
            continue;
        }
        for feature in implied.iter().filter_map(|f| f.as_str()) {
            // `dep/feature` and `dep:name` turn on a dependency's feature, not one of ours.
            if !feature.contains('/') && !feature.contains(':') {
                queue.push(feature.to_string());
            }
        }
    }
    on.remove("default");
    on
}

/// Every `.rs` file under `workspace`, build output and hidden folders left out.
pub fn rust_files(workspace: &Path) -> BTreeSet<PathBuf> {
    fn visit(dir: &Path, files: &mut BTreeSet<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    visit(&path, files);
                }
            } else if name.ends_with(".rs") {
                files.insert(path);
            }
        }
    }
    let mut files = BTreeSet::new();
    visit(workspace, &mut files);
    files
}

/// Follows the `mod` declarations from each root.
pub fn walk(roots: &[Root]) -> Walk {
    let mut result = Walk::default();
    // (file, resolves like a mod.rs, features of its package)
    let mut queue: VecDeque<(PathBuf, bool, BTreeSet<String>)> = VecDeque::new();
    let mut seen: BTreeSet<(PathBuf, BTreeSet<String>)> = BTreeSet::new();
    for root in roots {
        result
            .reached
            .insert(root.path.clone(), "crate root".to_string());
        queue.push_back((root.path.clone(), true, root.features.clone()));
    }
    while let Some((file, mod_rs, features)) = queue.pop_front() {
        if !seen.insert((file.clone(), features.clone())) {
            continue;
        }
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        let scan = scan(&tokens(&text), &features);
        for error in scan.errors {
            result.errors.push(format!("{}:{error}", file.display()));
        }
        if let Some((line, cfg)) = scan.switched_off {
            result.reached.remove(&file);
            result.switched_off.insert(
                file.clone(),
                format!(
                    "it switches itself off at {}:{line} (under {cfg})",
                    file.display()
                ),
            );
        }
        for declaration in scan.declarations {
            let Some(target) = resolve(&file, mod_rs, &declaration) else {
                continue;
            };
            let place = format!("{}:{}", file.display(), declaration.line);
            if !declaration.live {
                result.switched_off.entry(target).or_insert(format!(
                    "its `mod` declaration at {place} is switched off (under {})",
                    declaration.cfg
                ));
            } else if declaration.include {
                // Its text is part of this file's module; its own `mod`s are not followed.
                result.reached.entry(target).or_insert(place);
            } else {
                result.reached.entry(target.clone()).or_insert(place);
                let target_mod_rs =
                    declaration.path.is_some() || target.file_name().is_some_and(|n| n == "mod.rs");
                queue.push_back((target, target_mod_rs, features.clone()));
            }
        }
    }
    result
}

/// The files of `files` that no root reaches, each with why, and the walk's own errors.
pub fn not_compiled(files: &BTreeSet<PathBuf>, walk: &Walk, base: &Path) -> Vec<String> {
    let shown = |path: &Path| {
        path.strip_prefix(base)
            .unwrap_or(path)
            .display()
            .to_string()
    };
    let mut problems: Vec<String> = walk
        .errors
        .iter()
        .map(|error| error.replace(&format!("{}/", base.display()), ""))
        .collect();
    for file in files.iter().filter(|f| !walk.reached.contains_key(*f)) {
        problems.push(match walk.switched_off.get(file) {
            Some(reason) => format!(
                "{} is compiled into no target: {}",
                shown(file),
                reason.replace(&format!("{}/", base.display()), "")
            ),
            None => format!(
                "{} is compiled into no target: no `mod` declaration reaches it from a crate root",
                shown(file)
            ),
        });
    }
    problems
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Punct(char),
}

/// The tokens of `text` with their line numbers: comments dropped, string contents kept as one
/// token (so a `mod x;` in a string or a comment is not a declaration), numbers as identifiers.
fn tokens(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut at = 0;
    let count_lines =
        |from: usize, to: usize| chars[from..to].iter().filter(|c| **c == '\n').count();
    while at < chars.len() {
        let c = chars[at];
        let next = chars.get(at + 1).copied();
        let start = at;
        if c == '\n' {
            line += 1;
            at += 1;
        } else if c.is_whitespace() {
            at += 1;
        } else if c == '/' && next == Some('/') {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while at < chars.len() {
                if chars[at] == '/' && chars.get(at + 1) == Some(&'*') {
                    depth += 1;
                    at += 2;
                } else if chars[at] == '*' && chars.get(at + 1) == Some(&'/') {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    at += 1;
                }
            }
            line += count_lines(start, at);
        } else if let Some((value, end)) = string_literal(&chars, at) {
            out.push((Token::Str(value), line));
            line += count_lines(start, end);
            at = end;
        } else if c == '\'' {
            // A character literal ('x', '\n', '"'), else a lifetime's quote.
            let end = if next == Some('\\') {
                (at + 2..chars.len())
                    .find(|i| chars[*i] == '\'')
                    .map(|i| i + 1)
            } else if chars.get(at + 2) == Some(&'\'') {
                Some(at + 3)
            } else {
                None
            };
            match end {
                Some(end) => at = end,
                None => {
                    out.push((Token::Punct('\''), line));
                    at += 1;
                }
            }
        } else if c.is_alphanumeric() || c == '_' {
            while at < chars.len() && (chars[at].is_alphanumeric() || chars[at] == '_') {
                at += 1;
            }
            let mut word: String = chars[start..at].iter().collect();
            // A raw identifier (`r#mod`) is never the keyword.
            if word == "r" && chars.get(at) == Some(&'#') {
                let name_end = (at + 1..chars.len())
                    .find(|i| !(chars[*i].is_alphanumeric() || chars[*i] == '_'))
                    .unwrap_or(chars.len());
                word = chars[start..name_end].iter().collect();
                at = name_end;
            }
            out.push((Token::Ident(word), line));
        } else {
            out.push((Token::Punct(c), line));
            at += 1;
        }
    }
    out
}

/// A string literal starting at `at` (`"…"`, `r#"…"#`, with a `b` or `c` prefix): its text and
/// the index after it.
fn string_literal(chars: &[char], at: usize) -> Option<(String, usize)> {
    let mut index = at;
    if matches!(chars[index], 'b' | 'c') {
        index += 1;
    }
    let raw = chars.get(index) == Some(&'r');
    if raw {
        index += 1;
        let hashes = chars[index..].iter().take_while(|c| **c == '#').count();
        index += hashes;
        if chars.get(index) != Some(&'"') {
            return None;
        }
        let body = index + 1;
        let closing: String = std::iter::once('"')
            .chain(std::iter::repeat_n('#', hashes))
            .collect();
        let closing: Vec<char> = closing.chars().collect();
        let end = (body..=chars.len().saturating_sub(closing.len()))
            .find(|i| chars[*i..].starts_with(&closing))
            .unwrap_or(chars.len());
        return Some((
            chars[body..end].iter().collect(),
            (end + closing.len()).min(chars.len()),
        ));
    }
    if chars.get(index) != Some(&'"') {
        return None;
    }
    let mut value = String::new();
    index += 1;
    while index < chars.len() && chars[index] != '"' {
        if chars[index] == '\\' && index + 1 < chars.len() {
            value.push(chars[index + 1]);
            index += 2;
        } else {
            value.push(chars[index]);
            index += 1;
        }
    }
    Some((value, (index + 1).min(chars.len())))
}

/// One `mod name;` (or `include!("f.rs")`) of a file.
#[derive(Debug)]
struct Declaration {
    name: String,
    /// The `#[path]` value, or the `include!` path.
    path: Option<String>,
    include: bool,
    /// The inline modules it sits in, outermost first.
    inline: Vec<String>,
    /// Whether every cfg around it holds in `cargo test` here.
    live: bool,
    /// The first cfg around it that does not hold.
    cfg: String,
    line: usize,
}

struct Scan {
    declarations: Vec<Declaration>,
    errors: Vec<String>,
    /// A false `#![cfg(...)]` of the file itself: its line and text.
    switched_off: Option<(usize, String)>,
}

/// The `mod` declarations and `include!`s of a file's tokens, each with whether the cfgs around
/// it are true for a package with `features`.
fn scan(tokens: &[(Token, usize)], features: &BTreeSet<String>) -> Scan {
    struct Frame {
        module: Option<String>,
        live: bool,
        cfg: String,
    }
    let mut frames = vec![Frame {
        module: None,
        live: true,
        cfg: String::new(),
    }];
    let mut pending: Vec<&[(Token, usize)]> = Vec::new();
    let mut scan = Scan {
        declarations: Vec::new(),
        errors: Vec::new(),
        switched_off: None,
    };
    let token = |i: usize| tokens.get(i).map(|(t, _)| t);
    let mut i = 0;
    while i < tokens.len() {
        let (current, line) = (&tokens[i].0, tokens[i].1);
        match current {
            Token::Punct('#') => {
                let inner = token(i + 1) == Some(&Token::Punct('!'));
                let open = if inner { i + 2 } else { i + 1 };
                if token(open) != Some(&Token::Punct('[')) {
                    i += 1;
                    continue;
                }
                let close = matching(tokens, open, '[', ']');
                let attribute = &tokens[open + 1..close];
                if inner {
                    let (live, cfg, errors) = cfgs_hold(&[attribute], features);
                    scan.errors.extend(errors);
                    if !live && frames.len() == 1 && scan.switched_off.is_none() {
                        scan.switched_off = Some((line, cfg.clone()));
                    }
                    let frame = frames.last_mut().unwrap();
                    frame.live &= live;
                    if !live {
                        frame.cfg = cfg;
                    }
                } else {
                    pending.push(attribute);
                }
                i = close + 1;
                continue;
            }
            Token::Ident(word) if word == "mod" => {
                if let Some(Token::Ident(name)) = token(i + 1) {
                    let (cfg_live, cfg, errors) = cfgs_hold(&pending, features);
                    scan.errors.extend(errors);
                    let outer = frames.last().unwrap();
                    let live = outer.live && cfg_live;
                    let cfg = if cfg_live { outer.cfg.clone() } else { cfg };
                    match token(i + 2) {
                        Some(Token::Punct(';')) => {
                            scan.declarations.push(Declaration {
                                name: name.clone(),
                                path: path_attribute(&pending),
                                include: false,
                                inline: frames.iter().filter_map(|f| f.module.clone()).collect(),
                                live,
                                cfg,
                                line,
                            });
                            pending.clear();
                            i += 3;
                            continue;
                        }
                        Some(Token::Punct('{')) => {
                            frames.push(Frame {
                                module: Some(name.clone()),
                                live,
                                cfg,
                            });
                            pending.clear();
                            i += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
            }
            Token::Ident(word)
                if word == "include"
                    && token(i + 1) == Some(&Token::Punct('!'))
                    && token(i + 2) == Some(&Token::Punct('(')) =>
            {
                if let Some(Token::Str(path)) = token(i + 3) {
                    if path.ends_with(".rs") {
                        let frame = frames.last().unwrap();
                        scan.declarations.push(Declaration {
                            name: String::new(),
                            path: Some(path.clone()),
                            include: true,
                            inline: Vec::new(),
                            live: frame.live,
                            cfg: frame.cfg.clone(),
                            line,
                        });
                    }
                }
            }
            Token::Punct('{') => {
                let (cfg_live, cfg, errors) = cfgs_hold(&pending, features);
                scan.errors.extend(errors);
                let outer = frames.last().unwrap();
                let frame = Frame {
                    module: None,
                    live: outer.live && cfg_live,
                    cfg: if cfg_live { outer.cfg.clone() } else { cfg },
                };
                frames.push(frame);
                pending.clear();
            }
            Token::Punct('}') => {
                if frames.len() > 1 {
                    frames.pop();
                }
                pending.clear();
            }
            Token::Punct(';') => pending.clear(),
            _ => {}
        }
        i += 1;
    }
    scan
}

/// The index of the bracket closing the one at `open`.
fn matching(tokens: &[(Token, usize)], open: usize, left: char, right: char) -> usize {
    let mut depth = 0;
    for (index, (token, _)) in tokens.iter().enumerate().skip(open) {
        if *token == Token::Punct(left) {
            depth += 1;
        } else if *token == Token::Punct(right) {
            depth -= 1;
            if depth == 0 {
                return index;
            }
        }
    }
    tokens.len().saturating_sub(1)
}

/// The value of a `#[path = "..."]` among `attributes`.
fn path_attribute(attributes: &[&[(Token, usize)]]) -> Option<String> {
    attributes.iter().find_map(|attribute| match attribute {
        [(Token::Ident(name), _), (Token::Punct('='), _), (Token::Str(value), _)]
            if name == "path" =>
        {
            Some(value.clone())
        }
        _ => None,
    })
}

/// Whether every `#[cfg(...)]` among `attributes` holds; the first that does not, as text; and
/// the predicates that could not be evaluated.
fn cfgs_hold(
    attributes: &[&[(Token, usize)]],
    features: &BTreeSet<String>,
) -> (bool, String, Vec<String>) {
    let mut errors = Vec::new();
    for attribute in attributes {
        let [(Token::Ident(name), line), (Token::Punct('('), _), rest @ ..] = attribute else {
            continue;
        };
        if name != "cfg" {
            continue;
        }
        let predicate = &rest[..rest.len().saturating_sub(1)];
        let mut at = 0;
        match evaluate(predicate, &mut at, features) {
            Ok(true) => {}
            Ok(false) => return (false, format!("cfg({})", text_of(predicate)), errors),
            Err(error) => errors.push(format!("{line}: cfg({}): {error}", text_of(predicate))),
        }
    }
    (true, String::new(), errors)
}

fn text_of(tokens: &[(Token, usize)]) -> String {
    let mut text = String::new();
    for (token, _) in tokens {
        match token {
            Token::Ident(word) => {
                if text.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                    text.push(' ');
                }
                text.push_str(word);
            }
            Token::Str(value) => text.push_str(&format!("{value:?}")),
            Token::Punct(',') => text.push_str(", "),
            Token::Punct('=') => text.push_str(" = "),
            Token::Punct(c) => text.push(*c),
        }
    }
    text
}

/// Evaluates the cfg predicate at `tokens[*at..]`, as `cargo test` on this machine would.
fn evaluate(
    tokens: &[(Token, usize)],
    at: &mut usize,
    features: &BTreeSet<String>,
) -> Result<bool, String> {
    let Some((Token::Ident(name), _)) = tokens.get(*at) else {
        return Err("a predicate was expected".into());
    };
    *at += 1;
    match tokens.get(*at).map(|(t, _)| t) {
        Some(Token::Punct('(')) => {
            *at += 1;
            let mut values = Vec::new();
            while tokens.get(*at).map(|(t, _)| t) != Some(&Token::Punct(')')) {
                values.push(evaluate(tokens, at, features)?);
                if tokens.get(*at).map(|(t, _)| t) == Some(&Token::Punct(',')) {
                    *at += 1;
                }
                if *at >= tokens.len() {
                    return Err("unclosed predicate list".into());
                }
            }
            *at += 1;
            match name.as_str() {
                "all" => Ok(values.iter().all(|v| *v)),
                "any" => Ok(values.iter().any(|v| *v)),
                "not" if values.len() == 1 => Ok(!values[0]),
                _ => Err(format!("`{name}(...)` is not a cfg operator")),
            }
        }
        Some(Token::Punct('=')) => {
            let Some((Token::Str(value), _)) = tokens.get(*at + 1) else {
                return Err(format!("`{name} =` needs a string"));
            };
            *at += 2;
            let value = value.as_str();
            match name.as_str() {
                "feature" => Ok(features.contains(value)),
                "target_os" => Ok(value == std::env::consts::OS),
                "target_family" => Ok(value == std::env::consts::FAMILY),
                "target_arch" => Ok(value == std::env::consts::ARCH),
                "target_pointer_width" => Ok(value == (usize::BITS).to_string()),
                "target_endian" => Ok(value
                    == if cfg!(target_endian = "little") {
                        "little"
                    } else {
                        "big"
                    }),
                _ => Err(format!(
                    "`{name} = {value:?}` is not a cfg this check knows"
                )),
            }
        }
        _ => match name.as_str() {
            "test" | "debug_assertions" => Ok(true),
            "unix" => Ok(cfg!(unix)),
            "windows" => Ok(cfg!(windows)),
            "doc" | "doctest" | "miri" => Ok(false),
            _ => Err(format!("`{name}` is not a cfg this check knows")),
        },
    }
}

/// The file a declaration in `file` names, as the compiler looks for it; None when none exists
/// (the compiler reports that itself).
fn resolve(file: &Path, mod_rs: bool, declaration: &Declaration) -> Option<PathBuf> {
    let folder = file.parent().unwrap();
    // The folder `mod x;` looks in: beside a mod.rs or crate root, else in the file's own folder.
    let own = if mod_rs {
        folder.to_path_buf()
    } else {
        folder.join(file.file_stem().unwrap())
    };
    let mut within = own.clone();
    for module in &declaration.inline {
        within.push(module);
    }
    if let Some(path) = &declaration.path {
        // Outside inline blocks a #[path] is relative to the file's folder; inside, to theirs.
        let base = if declaration.inline.is_empty() {
            folder.to_path_buf()
        } else {
            within
        };
        let target = base.join(path);
        return target.exists().then(|| normalise(&target));
    }
    [
        within.join(format!("{}.rs", declaration.name)),
        within.join(&declaration.name).join("mod.rs"),
    ]
    .into_iter()
    .find(|candidate| candidate.exists())
    .map(|candidate| normalise(&candidate))
}

/// `a/b/../c` → `a/c` (a #[path] may climb), without touching the file system.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The check of `main.rs`: every `.rs` file of the workspace is reached from a crate root.
pub fn assert_every_file_is_compiled() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let roots = workspace_roots(workspace);
    let files = rust_files(workspace);
    let walk = walk(&roots);
    let problems = not_compiled(&files, &walk, workspace);
    assert!(
        problems.is_empty(),
        "test code that no test binary runs:\n  {}",
        problems.join("\n  ")
    );
    // It saw the tree: both packages' roots, the test modules of each kind, over 100 files.
    for expected in [
        "src/lib.rs",
        "src/resolve/tests.rs",
        "src/model/knowledge/derive/tests.rs",
        "tests/it/main.rs",
        "tests/it/upgrade.rs",
        "tests/it/support/project.rs",
        "selftest/src/main.rs",
        "selftest/tests/no_gpu.rs",
        "selftest/src/binary_name.rs",
    ] {
        assert!(
            walk.reached.contains_key(&workspace.join(expected)),
            "{expected} was not reached: {:#?}",
            walk.reached.keys()
        );
    }
    assert!(files.len() > 100, "{} files", files.len());
    eprintln!(
        "{} Rust files, every one compiled, from {} crate roots",
        files.len(),
        roots.len()
    );
}

// The checker on trees made for it.

/// Writes `files` into a temporary tree.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let full = dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, text).unwrap();
    }
    dir
}

fn problems_of(dir: &Path, roots: &[&str], features: &[&str]) -> Vec<String> {
    let roots: Vec<Root> = roots
        .iter()
        .map(|root| Root {
            path: dir.join(root),
            features: features.iter().map(|f| f.to_string()).collect(),
        })
        .collect();
    let files = rust_files(dir);
    not_compiled(&files, &walk(&roots), dir)
}

/// A tree where every way of reaching a file is used once, and every way of not reaching
/// one: the checker names exactly the files no test binary compiles.
#[test]
fn the_checker_names_each_file_no_mod_reaches_and_no_other() {
    let dir = tree(&[
        (
            "src/lib.rs",
            "//! mod in_doc;\n\
             mod plain;\n\
             pub(crate) mod folder;\n\
             #[cfg(test)]\n\
             mod tests;\n\
             // mod commented;\n\
             /* mod blocked; /* nested */ mod still_blocked; */\n\
             const TEXT: &str = \"mod in_string;\";\n\
             const RAW: &str = r#\"mod in_raw; \"# ;\n\
             const QUOTE: char = '\"';\n\
             fn lifetime<'a>(x: &'a str) -> &'a str { x }\n\
             #[cfg(any())]\n\
             mod never;\n\
             #[cfg(feature = \"off\")]\n\
             mod feature_off;\n\
             #[cfg(all(test, feature = \"on\"))]\n\
             mod feature_on;\n\
             #[path = \"elsewhere/shared.rs\"]\n\
             mod shared;\n\
             #[cfg(test)]\n\
             mod inline {\n    mod nested;\n    #[path = \"by_path.rs\"]\n    mod by_path;\n}\n\
             #[cfg(not(test))]\n\
             mod inline_off {\n    mod under_off;\n}\n\
             include!(\"included.rs\");\n",
        ),
        ("src/plain.rs", "#[cfg(test)]\nmod tests;\n"),
        ("src/plain/tests.rs", ""),
        ("src/folder/mod.rs", "mod child;\n"),
        ("src/folder/child.rs", ""),
        ("src/tests.rs", ""),
        ("src/never.rs", ""),
        ("src/feature_off.rs", ""),
        ("src/feature_on.rs", ""),
        ("src/elsewhere/shared.rs", "mod beside;\n"),
        ("src/elsewhere/beside.rs", ""),
        ("src/inline/nested.rs", ""),
        ("src/inline/by_path.rs", ""),
        ("src/inline_off/under_off.rs", ""),
        ("src/included.rs", ""),
        ("src/in_doc.rs", ""),
        ("src/commented.rs", ""),
        ("src/blocked.rs", ""),
        ("src/still_blocked.rs", ""),
        ("src/in_string.rs", ""),
        ("src/in_raw.rs", ""),
        ("src/orphan.rs", ""),
        ("tests/it/main.rs", "mod kept;\n// mod dropped;\n"),
        ("tests/it/kept.rs", ""),
        ("tests/it/dropped.rs", ""),
        ("target/debug/build/generated.rs", ""),
    ]);
    let problems = problems_of(dir.path(), &["src/lib.rs", "tests/it/main.rs"], &["on"]);
    let unreached = |file: &str| {
        format!(
            "{file} is compiled into no target: no `mod` declaration reaches it from a crate root"
        )
    };
    assert_eq!(
        problems,
        vec![
            unreached("src/blocked.rs"),
            unreached("src/commented.rs"),
            "src/feature_off.rs is compiled into no target: its `mod` declaration at src/lib.rs:15 is switched off (under cfg(feature = \"off\"))".to_string(),
            unreached("src/in_doc.rs"),
            unreached("src/in_raw.rs"),
            unreached("src/in_string.rs"),
            "src/inline_off/under_off.rs is compiled into no target: its `mod` declaration at src/lib.rs:28 is switched off (under cfg(not(test)))".to_string(),
            "src/never.rs is compiled into no target: its `mod` declaration at src/lib.rs:13 is switched off (under cfg(any()))".to_string(),
            unreached("src/orphan.rs"),
            unreached("src/still_blocked.rs"),
            unreached("tests/it/dropped.rs"),
        ]
    );
}

/// A non-mod-rs file's modules live in its own folder; the same `mod tests;` in a mod.rs is
/// beside it; a `#[path]` file resolves its modules beside itself.
#[test]
fn module_files_are_looked_for_where_the_compiler_looks() {
    let dir = tree(&[
        ("src/main.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "mod tests;\n"),
        ("src/tests.rs", ""),
        ("src/b/mod.rs", "mod tests;\n"),
        ("src/b/tests.rs", ""),
    ]);
    assert_eq!(
        problems_of(dir.path(), &["src/main.rs"], &[]),
        vec!["src/tests.rs is compiled into no target: no `mod` declaration reaches it from a crate root"],
        "a.rs's `mod tests;` is src/a/tests.rs, which is missing, not src/tests.rs"
    );
}

#[test]
fn a_cfg_the_checker_does_not_know_is_an_error_not_a_guess() {
    let dir = tree(&[
        ("src/lib.rs", "#[cfg(tokio_unstable)]\nmod maybe;\n"),
        ("src/maybe.rs", ""),
    ]);
    assert_eq!(
        problems_of(dir.path(), &["src/lib.rs"], &[]),
        vec!["src/lib.rs:1: cfg(tokio_unstable): `tokio_unstable` is not a cfg this check knows"]
    );
}

#[test]
fn an_inner_cfg_switches_a_whole_file_off() {
    let dir = tree(&[
        ("src/lib.rs", "mod tests;\n"),
        ("src/tests.rs", "#![cfg(any())]\nmod deeper;\n"),
        ("src/tests/deeper.rs", ""),
    ]);
    assert_eq!(
        problems_of(dir.path(), &["src/lib.rs"], &[]),
        vec![
            "src/tests/deeper.rs is compiled into no target: its `mod` declaration at src/tests.rs:2 is switched off (under cfg(any()))",
            "src/tests.rs is compiled into no target: it switches itself off at src/tests.rs:1 (under cfg(any()))",
        ]
    );
}

#[test]
fn default_features_follow_what_default_turns_on() {
    let features = serde_json::json!({
        "default": ["cu12", "extra"],
        "cu11": ["cudarc/cuda-11080"],
        "cu12": ["cudarc/cuda-12000"],
        "extra": ["plot", "dep:serde"],
        "plot": [],
    });
    assert_eq!(
        default_features(&features),
        ["cu12", "extra", "plot"]
            .iter()
            .map(|f| f.to_string())
            .collect()
    );
}
