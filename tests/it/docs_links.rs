//! The documentation's links, checked: every relative link of README.md, every page under
//! `docs/`, BENCHMARKS.md and selftest/README.md names a file or folder of the repository, and
//! every `#anchor` names a heading of the page it points into, by the rule GitHub uses to make
//! heading anchors. Links with a scheme (`https:`, `mailto:`) are counted, not fetched. A run that
//! checked no relative link, or no anchor, fails: a parser that finds nothing proves nothing. The
//! index `docs/README.md` must link every page of `docs/`, so no page drops out of the map.
//!
//! The parser is small and explicit (no Markdown crate in the lock), and reads what these pages
//! use:
//! - **Code is not prose.** Fenced blocks (a line starting, after indentation, with three or
//!   more backticks or tildes, up to a line of at least as many of the same character) and code
//!   spans (a run of N backticks up to the next run of exactly N, within one paragraph) are left
//!   out: `[--only F]` in a command line is not a link.
//! - **Links** are inline, `[text](target)` or `![alt](target)` (the target up to the first
//!   blank outside `<...>`, parentheses balanced, an optional `"title"` after it), and reference
//!   definitions, `[label]: target` at the start of a line. `\[` is no bracket.
//! - **Targets**: `path`, `path#anchor` or `#anchor`; a path is relative to the page's folder (a
//!   leading `/` to the repository root, as GitHub reads it), percent-escapes decoded, and must
//!   stay inside the repository. An anchor is allowed only into a Markdown page.
//! - **Anchors** come from ATX headings (`#` to `######`; setext headings are not read, so a
//!   link to one fails rather than passes) and from `<a id="...">`/`<a name="...">`. The anchor
//!   of a heading is GitHub's (github-slugger, which github.com uses for `user-content-` ids):
//!   the heading's text as rendered (code spans keep their text without the backticks, a link
//!   keeps its text, HTML tags go), lowercased; every character that is not a letter, a digit,
//!   `-`, `_` or a space is removed (so `.`, `,`, `:`, `(`, `` ` ``, `×` and `—` go); each space
//!   becomes `-` (runs are not collapsed: `a — b` is `a--b`). A slug already used on the page
//!   gets `-1`, then `-2`, ... in order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages whose links are checked: README.md, BENCHMARKS.md, selftest/README.md and every
/// `.md` file under `docs/`, relative to `root`, sorted.
fn documentation_pages(root: &Path) -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = ["README.md", "BENCHMARKS.md", "selftest/README.md"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let mut folders = vec![root.join("docs")];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|extension| extension == "md") {
                pages.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    pages.sort();
    pages
}

/// A line of a page with whether it is inside a fenced code block (fence lines count as inside).
fn lines_outside_fences(text: &str) -> Vec<(usize, &str, bool)> {
    let mut fence: Option<(char, usize)> = None;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let run = |marker: char| trimmed.chars().take_while(|c| *c == marker).count();
        match fence {
            Some((marker, length)) => {
                lines.push((index + 1, line, true));
                if run(marker) >= length && trimmed.trim_end().chars().all(|c| c == marker) {
                    fence = None;
                }
            }
            None => {
                let opening = ['`', '~']
                    .into_iter()
                    .map(|marker| (marker, run(marker)))
                    .find(|(_, length)| *length >= 3);
                lines.push((index + 1, line, opening.is_some()));
                fence = opening;
            }
        }
    }
    lines
}

/// `text` with each code span replaced by its content's length in spaces when `keep_code` is
/// false, or by its content when it is true (a heading's rendered text keeps it). A run of
/// backticks with no closing run of the same length is literal.
fn without_code_spans(text: &str, keep_code: bool) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut index = 0;
    while index < chars.len() {
        if chars[index] != '`' {
            out.push(chars[index]);
            index += 1;
            continue;
        }
        let opening = chars[index..].iter().take_while(|c| **c == '`').count();
        let content_start = index + opening;
        let mut search = content_start;
        let mut closing_at = None;
        while search < chars.len() {
            if chars[search] == '`' {
                let run = chars[search..].iter().take_while(|c| **c == '`').count();
                if run == opening {
                    closing_at = Some(search);
                    break;
                }
                search += run;
            } else {
                search += 1;
            }
        }
        match closing_at {
            Some(closing) => {
                let content: String = chars[content_start..closing].iter().collect();
                if keep_code {
                    out.push_str(content.trim());
                } else {
                    out.extend(std::iter::repeat_n(' ', content.chars().count()));
                }
                index = closing + opening;
            }
            None => {
                out.extend(std::iter::repeat_n('`', opening));
                index = content_start;
            }
        }
    }
    out
}

/// The index of the `]` that closes the `[` at `open`, brackets nested, `\` escaping.
fn closing_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut index = open;
    while index < chars.len() {
        match chars[index] {
            '\\' => index += 1,
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(index);
                }
            }
            _ => {}
        }
        index += 1;
    }
    None
}

/// The target of an inline link whose `(` is at `open`: `<...>`, or up to a blank or the `)`
/// that balances it; `None` when the parenthesis never closes.
fn inline_target(chars: &[char], open: usize) -> Option<String> {
    let mut index = open + 1;
    while index < chars.len() && chars[index] == ' ' {
        index += 1;
    }
    if chars.get(index) == Some(&'<') {
        let end = chars[index..].iter().position(|c| *c == '>')? + index;
        return Some(chars[index + 1..end].iter().collect());
    }
    let start = index;
    let mut depth = 0;
    while index < chars.len() {
        match chars[index] {
            '\\' => index += 1,
            '(' => depth += 1,
            ')' if depth == 0 => break,
            ')' => depth -= 1,
            c if c.is_whitespace() => break,
            _ => {}
        }
        index += 1;
    }
    (index < chars.len()).then(|| chars[start..index].iter().collect())
}

/// The inline links of one paragraph (code spans already blanked): (line, target).
fn inline_links(paragraph: &str, first_line: usize) -> Vec<(usize, String)> {
    let chars: Vec<char> = paragraph.chars().collect();
    let line_at = |index: usize| first_line + chars[..index].iter().filter(|c| **c == '\n').count();
    let mut links = Vec::new();
    let mut index = 0;
    while index < chars.len() {
        match chars[index] {
            '\\' => index += 1,
            '[' => {
                if let Some(close) = closing_bracket(&chars, index) {
                    if chars.get(close + 1) == Some(&'(') {
                        if let Some(target) = inline_target(&chars, close + 1) {
                            links.push((line_at(index), target));
                        }
                    }
                }
            }
            _ => {}
        }
        index += 1;
    }
    links
}

/// A reference definition, `[label]: target`, at the start of a line (up to 3 spaces in).
fn reference_definition(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = line.trim_start_matches(' ');
    if indent > 3 || !rest.starts_with('[') {
        return None;
    }
    let chars: Vec<char> = rest.chars().collect();
    let close = closing_bracket(&chars, 0)?;
    let after: String = chars[close + 1..].iter().collect();
    let target = after.strip_prefix(':')?.split_whitespace().next()?;
    Some(
        target
            .trim_start_matches('<')
            .trim_end_matches('>')
            .to_string(),
    )
}

/// Every link of a page as written: (line, target), in order.
fn links_of(text: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    let mut paragraph = String::new();
    let mut paragraph_line = 0;
    let flush = |paragraph: &mut String, first_line: usize, links: &mut Vec<(usize, String)>| {
        if !paragraph.is_empty() {
            links.extend(inline_links(
                &without_code_spans(paragraph, false),
                first_line,
            ));
            paragraph.clear();
        }
    };
    for (number, line, in_fence) in lines_outside_fences(text) {
        if in_fence || line.trim().is_empty() {
            flush(&mut paragraph, paragraph_line, &mut links);
            continue;
        }
        if let Some(target) = reference_definition(line) {
            flush(&mut paragraph, paragraph_line, &mut links);
            links.push((number, target));
            continue;
        }
        if paragraph.is_empty() {
            paragraph_line = number;
        } else {
            paragraph.push('\n');
        }
        paragraph.push_str(line);
    }
    flush(&mut paragraph, paragraph_line, &mut links);
    links
}

/// The text a heading renders: code spans without backticks, links and images as their text,
/// HTML tags left out.
fn rendered_heading(text: &str) -> String {
    let text = without_code_spans(text, true);
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut index = 0;
    while index < chars.len() {
        match chars[index] {
            '!' if chars.get(index + 1) == Some(&'[') => index += 1,
            '[' => {
                if let Some(close) = closing_bracket(&chars, index) {
                    if chars.get(close + 1) == Some(&'(') {
                        let end = chars[close..]
                            .iter()
                            .position(|c| *c == ')')
                            .map(|at| close + at);
                        if let Some(end) = end {
                            out.push_str(&rendered_heading(
                                &chars[index + 1..close].iter().collect::<String>(),
                            ));
                            index = end + 1;
                            continue;
                        }
                    }
                }
                out.push('[');
                index += 1;
            }
            '<' => match chars[index..].iter().position(|c| *c == '>') {
                Some(end)
                    if chars
                        .get(index + 1)
                        .is_some_and(|c| c.is_ascii_alphabetic() || *c == '/') =>
                {
                    index += end + 1;
                }
                _ => {
                    out.push('<');
                    index += 1;
                }
            },
            c => {
                out.push(c);
                index += 1;
            }
        }
    }
    out
}

/// GitHub's slug of a heading's rendered text (before the `-1`, `-2` of repeats).
fn slug(rendered: &str) -> String {
    rendered
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors a page defines: its headings' slugs (repeats numbered as GitHub numbers them) and
/// its `<a id>`/`<a name>` anchors.
fn anchors_of(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut occurrences: BTreeMap<String, usize> = BTreeMap::new();
    for (_, line, in_fence) in lines_outside_fences(text) {
        if in_fence {
            continue;
        }
        let indent = line.len() - line.trim_start_matches(' ').len();
        let rest = line.trim_start_matches(' ');
        let level = rest.chars().take_while(|c| *c == '#').count();
        let after = &rest[level..];
        if indent <= 3
            && (1..=6).contains(&level)
            && (after.is_empty() || after.starts_with([' ', '\t']))
        {
            // A closing run of `#` (after a blank) is not part of the heading.
            let mut heading = after.trim();
            let without_closing = heading.trim_end_matches('#');
            if without_closing.is_empty() || without_closing.ends_with([' ', '\t']) {
                heading = without_closing.trim_end();
            }
            let original = slug(&rendered_heading(heading));
            let mut anchor = original.clone();
            while occurrences.contains_key(&anchor) {
                let count = occurrences.get_mut(&original).unwrap();
                *count += 1;
                anchor = format!("{original}-{count}");
            }
            occurrences.insert(anchor.clone(), 0);
            anchors.insert(anchor);
        }
        let code_free = without_code_spans(line, false);
        for attribute in ["<a id=\"", "<a name=\""] {
            let mut rest = code_free.as_str();
            while let Some(at) = rest.find(attribute) {
                rest = &rest[at + attribute.len()..];
                if let Some(end) = rest.find('"') {
                    anchors.insert(rest[..end].to_string());
                }
            }
        }
    }
    anchors
}

/// `%XX` escapes of a link's path decoded (the rest as written).
fn percent_decoded(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::new();
    let mut index = 0;
    while index < bytes.len() {
        let hex = (bytes[index] == b'%')
            .then(|| path.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match hex {
            Some(byte) => {
                out.push(byte);
                index += 3;
            }
            None => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a target names a scheme (`https:`, `mailto:`) or a host (`//host`): not checked.
fn is_external(target: &str) -> bool {
    if target.starts_with("//") {
        return true;
    }
    match target.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme.chars().next().unwrap().is_ascii_alphabetic()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
                && !scheme.contains('/')
        }
        None => false,
    }
}

/// `page`'s folder joined with `path` (a leading `/` from the root), `.` and `..` resolved;
/// `None` when it leaves the repository.
fn resolved(page: &Path, path: &str) -> Option<PathBuf> {
    let start = if path.starts_with('/') {
        PathBuf::new()
    } else {
        page.parent().unwrap_or(Path::new("")).to_path_buf()
    };
    let mut parts: Vec<std::ffi::OsString> = start
        .components()
        .map(|component| component.as_os_str().to_os_string())
        .collect();
    for component in Path::new(path.trim_start_matches('/')).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_os_string()),
            Component::ParentDir => {
                parts.pop()?;
            }
            _ => {}
        }
    }
    Some(parts.iter().collect())
}

/// What a check of the pages found.
#[derive(Debug, Default)]
struct Report {
    /// `page:line: target: what is wrong`, one per broken link.
    problems: Vec<String>,
    /// Relative links checked (file and anchor).
    links: usize,
    /// Of them, links with an anchor.
    anchors: usize,
    /// Links with a scheme or a host, counted and not checked.
    external: usize,
    /// For each page, the pages (relative to the root) its links name.
    targets: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

/// Checks every link of `pages` (relative to `root`).
fn check(root: &Path, pages: &[PathBuf]) -> Report {
    let mut report = Report::default();
    let mut anchor_cache: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut anchors_of_page = |page: &Path| -> BTreeSet<String> {
        anchor_cache
            .entry(page.to_path_buf())
            .or_insert_with(|| {
                anchors_of(&std::fs::read_to_string(root.join(page)).unwrap_or_default())
            })
            .clone()
    };
    for page in pages {
        let text = std::fs::read_to_string(root.join(page))
            .unwrap_or_else(|error| panic!("{}: {error}", page.display()));
        for (line, target) in links_of(&text) {
            let at = format!("{}:{line}: {target}", page.display());
            if is_external(&target) {
                report.external += 1;
                continue;
            }
            report.links += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let linked = if path.is_empty() {
                page.clone()
            } else {
                match resolved(page, &percent_decoded(path)) {
                    Some(linked) => linked,
                    None => {
                        report
                            .problems
                            .push(format!("{at}: leads outside the repository"));
                        continue;
                    }
                }
            };
            if !root.join(&linked).exists() {
                report
                    .problems
                    .push(format!("{at}: no file or folder {}", linked.display()));
                continue;
            }
            report
                .targets
                .entry(page.clone())
                .or_default()
                .insert(linked.clone());
            let Some(anchor) = anchor else {
                continue;
            };
            report.anchors += 1;
            if linked.extension().is_none_or(|extension| extension != "md") {
                report.problems.push(format!(
                    "{at}: an anchor into {}, which is not a Markdown page",
                    linked.display()
                ));
                continue;
            }
            let anchors = anchors_of_page(&linked);
            if !anchors.contains(anchor) {
                let word = anchor
                    .split('-')
                    .find(|word| word.len() > 3)
                    .unwrap_or(anchor);
                let near: Vec<&String> = anchors
                    .iter()
                    .filter(|known| known.contains(word))
                    .take(5)
                    .collect();
                report.problems.push(format!(
                    "{at}: no heading of {} makes the anchor #{anchor} (anchors with {word:?}: {near:?})",
                    linked.display()
                ));
            }
        }
    }
    report
}

/// Everything wrong with a report: its broken links, and a check that checked nothing.
fn failures(report: &Report) -> Vec<String> {
    let mut failures = report.problems.clone();
    if report.links == 0 {
        failures.push("no relative link was checked: the parser found none".to_string());
    }
    if report.anchors == 0 {
        failures.push("no anchor was checked: the parser found none".to_string());
    }
    failures
}

#[test]
fn every_relative_link_and_anchor_of_the_documentation_is_true() {
    let root = repository_root();
    let pages = documentation_pages(&root);
    assert!(
        pages.iter().any(|page| page.starts_with("docs")),
        "no page under docs/: {pages:?}"
    );
    let report = check(&root, &pages);
    eprintln!(
        "{} pages: {} relative links checked ({} with an anchor), {} external links not fetched",
        pages.len(),
        report.links,
        report.anchors,
        report.external
    );
    let failures = failures(&report);
    assert!(
        failures.is_empty(),
        "broken documentation links:\n{}",
        failures.join("\n")
    );

    // The index links every page of docs/.
    let index = PathBuf::from("docs/README.md");
    let listed = report.targets.get(&index).cloned().unwrap_or_default();
    let unlisted: Vec<&PathBuf> = pages
        .iter()
        .filter(|page| page.starts_with("docs") && **page != index && !listed.contains(*page))
        .collect();
    assert!(
        unlisted.is_empty(),
        "docs/README.md does not link {unlisted:?}"
    );
}

#[test]
fn the_anchor_rule_is_githubs() {
    // Headings of these pages whose anchors were linked on github.com, and the rule's edges.
    let page = "# imagegen\n\
        ### Offline, on a fresh machine: a built, tested, pushed and recorded image\n\
        ### The manifest (`imagegen-manifest.json`, schema version 1)\n\
        ## `gpu-selftest` against PyTorch on 2×H200\n\
        ## Alias moves — one transaction\n\
        ## Notes\n\
        ## Notes\n\
        ## Notes-1\n\
        ## snake_case and [a link](other.md) and <code>html</code> ##\n\
        ```sh\n\
        # not a heading\n\
        ```\n\
        #not a heading either\n\
        <a id=\"explicit\"></a>\n";
    let anchors = anchors_of(page);
    let expected: BTreeSet<String> = [
        "imagegen",
        "offline-on-a-fresh-machine-a-built-tested-pushed-and-recorded-image",
        "the-manifest-imagegen-manifestjson-schema-version-1",
        "gpu-selftest-against-pytorch-on-2h200",
        "alias-moves--one-transaction",
        "notes",
        "notes-1",
        "notes-1-1",
        "snake_case-and-a-link-and-html",
        "explicit",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(anchors, expected);
}

#[test]
fn a_broken_file_link_or_anchor_fails_the_check_and_so_does_a_page_without_links() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(
        root.join("README.md"),
        "# Title\n\n## A section\n\n\
         [good](docs/page.md#a-heading), [self](#a-section), [folder](docs/), [web](https://example.com/x#y)\n\
         [missing file](docs/gone.md) and [missing anchor](docs/page.md#no-such-heading)\n\
         `[not a link](docs/gone.md)` and\n\n```\n[nor this](gone.md)\n```\n\n\
         [up](../outside.md)\n\n[ref]: docs/also-gone.md\n",
    )
    .unwrap();
    std::fs::write(root.join("docs/page.md"), "# Page\n\n## A heading\n").unwrap();
    let pages = vec![PathBuf::from("README.md"), PathBuf::from("docs/page.md")];
    let report = check(root, &pages);
    assert_eq!(
        report.problems,
        [
            "README.md:6: docs/gone.md: no file or folder docs/gone.md",
            "README.md:6: docs/page.md#no-such-heading: no heading of docs/page.md makes the anchor \
             #no-such-heading (anchors with \"such\": [])",
            "README.md:13: ../outside.md: leads outside the repository",
            "README.md:15: docs/also-gone.md: no file or folder docs/also-gone.md",
        ],
        "{report:#?}"
    );
    assert_eq!(
        (report.links, report.anchors, report.external),
        (7, 3, 1),
        "{report:#?}"
    );

    // A page without a link: the check fails instead of passing on nothing.
    let empty = check(root, &[PathBuf::from("docs/page.md")]);
    assert_eq!(
        failures(&empty),
        [
            "no relative link was checked: the parser found none",
            "no anchor was checked: the parser found none",
        ]
    );
}
