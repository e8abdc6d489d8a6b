//! The first, bounded read of a YAML file (the matrix, a `--knowledge` file), before serde sees
//! it: UTF-8 with the line of the first bad byte, a size limit, a nesting limit, a limit on what
//! aliases expand to (billion laughs), a limit on the entries of one list or mapping, duplicate
//! keys at their own line, and where every key and value is, so that later checks can name a
//! `file:line:column`.
//!
//! It streams parser events ([`saphyr_parser`], which reports a span for each) and stops at the
//! first limit it passes, so memory and time stay proportional to the limits, not to the input.
//! `serde_yaml` then deserializes a document that is known to be small. This module does no I/O:
//! the loader (`project.rs`) reads at most one byte more than the limit and hands the bytes to
//! [`within_size`].

use std::collections::{BTreeMap, HashSet};

use saphyr_parser::{Event, Parser, Span};

/// How large a YAML input may be, and what it may expand to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Bytes of the file.
    pub(crate) bytes: usize,
    /// Characters of the document with every alias replaced by the node it names.
    pub(crate) expanded: usize,
    /// Lists and mappings inside each other.
    pub(crate) depth: usize,
    /// Entries of one list or mapping.
    pub(crate) entries: usize,
}

/// The limits of the matrix and of knowledge files (documented in docs/matrix.md, "Limits").
pub(crate) const LIMITS: Limits = Limits {
    bytes: 1 << 20,
    expanded: 1 << 20,
    depth: 32,
    entries: 10_000,
};

/// A position in the file: 1-based line and column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Position {
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl Position {
    fn of(marker: &saphyr_parser::Marker) -> Position {
        Position {
            line: marker.line(),
            column: marker.col() + 1,
        }
    }
}

/// Why a YAML input was refused, with where and (when the user can act) what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub(crate) at: Option<Position>,
    pub(crate) message: String,
    pub(crate) hint: Option<String>,
}

impl Problem {
    fn new(at: Option<Position>, message: String, hint: Option<&str>) -> Problem {
        Problem {
            at,
            message,
            hint: hint.map(str::to_string),
        }
    }
}

/// One node of the document: its path (`torch[1]`, `include[0].cuda`), where its key and its
/// value start, and its text when it is a scalar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) path: String,
    /// The key of a mapping value (`cuda:`), `None` for list items and the root.
    pub(crate) key_at: Option<Position>,
    pub(crate) at: Position,
    pub(crate) scalar: Option<String>,
}

/// Where everything in a file is, in document order (the first document only; nodes under an
/// alias are found at the alias).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Locations {
    /// The file, as messages name it.
    pub(crate) file: String,
    pub(crate) entries: Vec<Entry>,
}

impl Locations {
    /// The node at `path`, or else the nearest enclosing node that exists (`torch[3]` under an
    /// alias is found at `torch`).
    pub(crate) fn find(&self, path: &str) -> Option<&Entry> {
        let mut wanted = path;
        loop {
            if let Some(entry) = self.entries.iter().find(|e| e.path == wanted) {
                return Some(entry);
            }
            let cut = wanted.rfind(['.', '['])?;
            wanted = &wanted[..cut];
        }
    }

    /// Where the value at `path` starts.
    pub(crate) fn value_at(&self, path: &str) -> Option<Position> {
        self.find(path).map(|entry| entry.at)
    }

    /// Where the key of `path` starts (its value's position for list items).
    pub(crate) fn key_at(&self, path: &str) -> Option<Position> {
        self.find(path)
            .map(|entry| entry.key_at.unwrap_or(entry.at))
    }

    /// The first node whose path ends in the key `key` (list indexes aside: `cuda[1]` ends in
    /// `cuda`, `labels.org.example.team` in `org.example.team`) and whose scalar contains
    /// `needle`: the value's position, or the key's when `needle` is empty.
    pub(crate) fn search(&self, key: &str, needle: &str) -> Option<Position> {
        for entry in &self.entries {
            let path = without_indexes(&entry.path);
            if path != key && !path.ends_with(&format!(".{key}")) {
                continue;
            }
            if needle.is_empty() {
                return Some(entry.key_at.unwrap_or(entry.at));
            }
            if entry.scalar.as_deref().is_some_and(|s| s.contains(needle)) {
                return Some(entry.at);
            }
        }
        None
    }

    /// The `file:line` of the node at `path`, for messages that point at a whole rule.
    pub(crate) fn line_of(&self, path: &str) -> Option<String> {
        self.value_at(path)
            .map(|at| format!("{}:{}", self.file, at.line))
    }
}

/// A path without its trailing list indexes: `include[0].variants[1]` → `include[0].variants`.
fn without_indexes(path: &str) -> &str {
    let mut rest = path;
    while let Some(open) = rest.strip_suffix(']').and_then(|r| r.rfind('[')) {
        rest = &rest[..open];
    }
    rest
}

/// `bytes` when they are within `limits.bytes` (the loader reads one byte more than the limit,
/// never the whole of a larger file), else the problem saying so.
pub(crate) fn within_size<'b>(bytes: &'b [u8], limits: &Limits) -> Result<&'b [u8], Problem> {
    if bytes.len() > limits.bytes {
        return Err(too_large(limits));
    }
    Ok(bytes)
}

fn too_large(limits: &Limits) -> Problem {
    Problem::new(
        None,
        format!(
            "the file is larger than {} bytes, the limit for a YAML input",
            limits.bytes
        ),
        Some("a matrix or knowledge file is a few kilobytes; is this the right file?"),
    )
}

/// The text of `bytes`, or where its first byte that is not UTF-8 is.
pub(crate) fn decode(bytes: &[u8]) -> Result<&str, Problem> {
    std::str::from_utf8(bytes).map_err(|error| {
        let valid = &bytes[..error.valid_up_to()];
        let line = valid.iter().filter(|b| **b == b'\n').count() + 1;
        let line_start = valid.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let column = String::from_utf8_lossy(&valid[line_start..])
            .chars()
            .count()
            + 1;
        Problem::new(
            Some(Position { line, column }),
            format!("byte 0x{:02x} is not UTF-8", bytes[error.valid_up_to()]),
            Some("save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"),
        )
    })
}

/// An open list or mapping while events stream in.
struct Frame {
    path: String,
    /// Mapping: the next node is a key.
    mapping: bool,
    expecting_key: bool,
    /// The key just read, with its position, waiting for its value.
    key: Option<(String, Position)>,
    keys: HashSet<String>,
    first_key_line: BTreeMap<String, usize>,
    entries: usize,
    /// Characters its aliases add when expanded.
    alias_extra: usize,
    start_index: usize,
    anchor: usize,
}

/// Reads `text` within `limits`, returning where everything is. Syntax errors, duplicate keys and
/// every limit are a [`Problem`] at the line and column where they happen.
pub(crate) fn locate(text: &str, limits: &Limits, file: &str) -> Result<Locations, Problem> {
    if text.len() > limits.bytes {
        return Err(too_large(limits));
    }
    let mut locations = Locations {
        file: file.to_string(),
        entries: Vec::new(),
    };
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchor_sizes: BTreeMap<usize, usize> = BTreeMap::new();
    let mut expanded: usize = text.chars().count();
    let mut documents = 0usize;
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|error| {
            if error.info() == "recursion limit exceeded" {
                // The scanner's own bound on `[`/`{` nesting (255), far past ours.
                too_deep(Position::of(error.marker()), limits)
            } else {
                syntax_problem(text, &error)
            }
        })?;
        let at = Position::of(&span.start);
        match event {
            Event::DocumentStart(_) => documents += 1,
            Event::Scalar(value, _, anchor, _) => {
                if anchor > 0 {
                    anchor_sizes.insert(anchor, span_chars(&span));
                }
                let path = node_path(&mut stack, Some(&value), at, limits)?;
                if let Some((path, key_at)) = path {
                    if documents == 1 {
                        locations.entries.push(Entry {
                            path,
                            key_at,
                            at,
                            scalar: Some(value.to_string()),
                        });
                    }
                }
            }
            Event::Alias(anchor) => {
                let Some(size) = anchor_sizes.get(&anchor).copied() else {
                    return Err(Problem::new(
                        Some(at),
                        "an alias inside the node its anchor names (a recursive structure)".into(),
                        Some("aliases may only name nodes that are complete"),
                    ));
                };
                expanded = expanded.saturating_add(size);
                if expanded > limits.expanded {
                    return Err(Problem::new(
                        Some(at),
                        format!(
                            "aliases expand the document to more than {} characters (this alias adds {size})",
                            limits.expanded
                        ),
                        Some("write the values out instead of repeating large anchors"),
                    ));
                }
                if let Some(parent) = stack.last_mut() {
                    parent.alias_extra = parent.alias_extra.saturating_add(size);
                }
                if let Some((path, key_at)) = node_path(&mut stack, None, at, limits)? {
                    if documents == 1 {
                        locations.entries.push(Entry {
                            path,
                            key_at,
                            at,
                            scalar: None,
                        });
                    }
                }
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                let mapping = matches!(event, Event::MappingStart(..));
                let (path, key_at) =
                    node_path(&mut stack, None, at, limits)?.unwrap_or_else(|| {
                        // A list or mapping used as a key: tracked, never looked up.
                        ("?".to_string(), None)
                    });
                if documents == 1 {
                    locations.entries.push(Entry {
                        path: path.clone(),
                        key_at,
                        at,
                        scalar: None,
                    });
                }
                if stack.len() >= limits.depth {
                    return Err(too_deep(at, limits));
                }
                stack.push(Frame {
                    path,
                    mapping,
                    expecting_key: mapping,
                    key: None,
                    keys: HashSet::new(),
                    first_key_line: BTreeMap::new(),
                    entries: 0,
                    alias_extra: 0,
                    start_index: span.start.index(),
                    anchor,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let frame = stack.pop().expect("the parser balances starts and ends");
                let size = span
                    .end
                    .index()
                    .saturating_sub(frame.start_index)
                    .saturating_add(frame.alias_extra);
                if frame.anchor > 0 {
                    anchor_sizes.insert(frame.anchor, size);
                }
                if let Some(parent) = stack.last_mut() {
                    parent.alias_extra = parent.alias_extra.saturating_add(frame.alias_extra);
                }
            }
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
        }
    }
    Ok(locations)
}

/// The characters a span covers.
fn span_chars(span: &Span) -> usize {
    span.end.index().saturating_sub(span.start.index())
}

/// Places a node that starts at `at` in the open collection on top of `stack`: returns its path
/// and its key's position, or `None` when the node is itself a key. Counts entries and refuses
/// duplicate keys.
fn node_path(
    stack: &mut [Frame],
    scalar: Option<&str>,
    at: Position,
    limits: &Limits,
) -> Result<Option<(String, Option<Position>)>, Problem> {
    let Some(frame) = stack.last_mut() else {
        return Ok(Some((String::new(), None)));
    };
    if frame.mapping && frame.expecting_key {
        frame.expecting_key = false;
        frame.entries += 1;
        if frame.entries > limits.entries {
            return Err(too_many(frame, at, limits));
        }
        let key = scalar.unwrap_or("?").to_string();
        if scalar.is_some() {
            if !frame.keys.insert(key.clone()) {
                let first = frame.first_key_line.get(&key).copied().unwrap_or(0);
                return Err(Problem::new(
                    Some(at),
                    format!("duplicate key `{key}` (first at line {first})"),
                    Some("a key may appear once in a mapping: merge the two or delete one"),
                ));
            }
            frame.first_key_line.insert(key.clone(), at.line);
        }
        frame.key = Some((key, at));
        return Ok(None);
    }
    if frame.mapping {
        frame.expecting_key = true;
        let (key, key_at) = frame.key.take().unwrap_or_else(|| ("?".into(), at));
        let path = if frame.path.is_empty() {
            key
        } else {
            format!("{}.{key}", frame.path)
        };
        return Ok(Some((path, Some(key_at))));
    }
    let index = frame.entries;
    frame.entries += 1;
    if frame.entries > limits.entries {
        return Err(too_many(frame, at, limits));
    }
    Ok(Some((format!("{}[{index}]", frame.path), None)))
}

fn too_deep(at: Position, limits: &Limits) -> Problem {
    Problem::new(
        Some(at),
        format!(
            "lists and mappings are nested more than {} deep",
            limits.depth
        ),
        Some("a matrix or knowledge file needs a few levels; is this the right file?"),
    )
}

fn too_many(frame: &Frame, at: Position, limits: &Limits) -> Problem {
    let what = if frame.path.is_empty() {
        "the document".to_string()
    } else {
        format!("`{}`", frame.path)
    };
    Problem::new(
        Some(at),
        format!(
            "{what} has more than {} entries, the limit for one list or mapping",
            limits.entries
        ),
        Some("is this the right file?"),
    )
}

/// A parser error at its line and column, with a hint for the usual causes.
fn syntax_problem(text: &str, error: &saphyr_parser::ScanError) -> Problem {
    let at = Position::of(error.marker());
    let line_text = text.lines().nth(at.line.saturating_sub(1)).unwrap_or("");
    let indentation: &str = &line_text[..line_text.len() - line_text.trim_start().len()];
    let (at, hint) = if let Some(tab) = indentation.find('\t') {
        (
            Position {
                line: at.line,
                column: indentation[..tab].chars().count() + 1,
            },
            "YAML indents with spaces; this line is indented with a tab",
        )
    } else if line_text.contains('\t') {
        (
            at,
            "YAML indents with spaces; replace the tab on this line with spaces",
        )
    } else {
        (
            at,
            "check the indentation, quotes and brackets here (a value with `: ` or `#` needs quotes)",
        )
    };
    Problem::new(
        Some(at),
        format!("invalid YAML: {}", error.info()),
        Some(hint),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locate_text(text: &str) -> Result<Locations, Problem> {
        locate(text, &LIMITS, "m.yaml")
    }

    #[test]
    fn paths_and_positions() {
        let text = "torch: [\"2.7\", \"2.8\"]\ncuda:\n  - \"12.6\"\n  - 12.10\ninclude:\n  - {torch: \"2.7.1\", cuda: \"12.8\"}\n";
        let locations = locate_text(text).unwrap();
        let at = |path: &str| locations.value_at(path).unwrap();
        assert_eq!(
            at("torch[1]"),
            Position {
                line: 1,
                column: 16
            }
        );
        assert_eq!(at("cuda[1]"), Position { line: 4, column: 5 });
        assert_eq!(
            locations.find("cuda[1]").unwrap().scalar.as_deref(),
            Some("12.10")
        );
        assert_eq!(
            at("include[0].cuda"),
            Position {
                line: 6,
                column: 28
            }
        );
        assert_eq!(locations.key_at("include[0].cuda").unwrap().column, 22);
        assert_eq!(
            locations.key_at("cuda").unwrap(),
            Position { line: 2, column: 1 }
        );
        assert_eq!(locations.search("cuda", "12.10").unwrap().line, 4);
        assert_eq!(locations.search("torch", "").unwrap().line, 1);
        // Missing children are found at their parent.
        assert_eq!(at("include[0].os"), at("include[0]"));
        assert_eq!(locations.line_of("include[0]").unwrap(), "m.yaml:6");
    }

    #[test]
    fn duplicate_keys_are_found_where_they_are() {
        let problem = locate_text("a: 1\nb:\n  c: 1\n  c: 2\n").unwrap_err();
        assert_eq!(problem.at, Some(Position { line: 4, column: 3 }));
        assert_eq!(problem.message, "duplicate key `c` (first at line 3)");
    }

    #[test]
    fn tabs_get_a_line_and_a_hint() {
        let problem = locate_text("tags:\n\tfull: x\n").unwrap_err();
        assert_eq!(problem.at.unwrap().line, 2);
        assert!(
            problem.hint.as_deref().unwrap().contains("with a tab"),
            "{problem:?}"
        );
    }

    #[test]
    fn non_utf8_is_located() {
        let problem = decode(b"a: 1\nb: caf\xe9\n").unwrap_err();
        assert_eq!(problem.at, Some(Position { line: 2, column: 7 }));
        assert!(problem.message.contains("0xe9"), "{problem:?}");
    }

    #[test]
    fn limits_hold() {
        let small = Limits {
            bytes: 1000,
            expanded: 200,
            depth: 4,
            entries: 5,
        };
        let deep = locate("[[[[[1]]]]]", &small, "m").unwrap_err();
        assert!(deep.message.contains("nested more than 4"), "{deep:?}");
        let block = locate("- - - - - - 1\n", &small, "m").unwrap_err();
        assert!(block.message.contains("nested more than 4"), "{block:?}");
        // Past the scanner's own bound (255 `[`), the message is the same.
        let deeper = format!("{}{}", "[".repeat(300), "]".repeat(300));
        let problem = locate(&deeper, &LIMITS, "m").unwrap_err();
        assert!(
            problem.message.contains("nested more than 32"),
            "{problem:?}"
        );
        let long = locate("[1, 2, 3, 4, 5, 6]", &small, "m").unwrap_err();
        assert!(long.message.contains("more than 5 entries"), "{long:?}");
        assert_eq!(long.at.unwrap().column, 17);
        let text = format!("a: &a \"{}\"\nb: [*a, *a, *a]\n", "x".repeat(60));
        let laughs = locate(&text, &small, "m").unwrap_err();
        assert!(
            laughs.message.contains("more than 200 characters"),
            "{laughs:?}"
        );
        assert_eq!(laughs.at.unwrap().line, 2);
        assert!(locate(&"x".repeat(1001), &small, "m").is_err());
        // Nested anchors multiply: the expansion is counted, not the text.
        let nested = "a: &a [1, 1]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: &d [*c, *c]\ne: [*d, *d]\n";
        assert!(nested.len() < 100);
        let problem = locate(nested, &small, "m").unwrap_err();
        assert!(problem.at.unwrap().line >= 4, "{problem:?}");
    }
}
