//! Output formatting shared by the commands: aligned tables for people. Below every command, so
//! nothing imports upward.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::model::digest::Digest;

/// Set once standard output's reader went away; later output is dropped.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to standard output. A reader that went away (`imagegen resolve | head -1`) is not
/// an error: as with `ls | head`, the rest of the output is dropped, and the command still
/// finishes its work and exits with its own code. Other write errors (a full disk) are errors.
pub(crate) fn emit(text: impl AsRef<str>) -> std::io::Result<()> {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_ref().as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        other => other,
    }
}

/// Writes a line to standard error for people (progress, notes); a closed standard error is
/// ignored, as there is nowhere left to report it.
pub(crate) fn note(text: impl AsRef<str>) {
    let _ = writeln!(std::io::stderr().lock(), "{}", text.as_ref());
}

/// A cell's text on one line: a line break (a multi-line label value) is written `\n`, a tab
/// `\t`, so one row stays one line.
pub(crate) fn one_line_cell(cell: &str) -> String {
    cell.replace('\r', "\\r")
        .replace('\n', "\\n")
        .replace('\t', "\\t")
}

/// Left-aligned columns separated by two spaces; the last column is not padded. Line breaks in
/// cells are escaped ([`one_line_cell`]).
pub(crate) fn table(rows: &[Vec<String>]) -> String {
    let escaped: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| one_line_cell(cell)).collect())
        .collect();
    let rows = escaped.as_slice();
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (index, cell) in row.iter().enumerate() {
            if index + 1 == row.len() {
                line.push_str(cell);
            } else {
                write!(line, "{cell:<width$}  ", width = widths[index]).ok();
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The first 19 characters of a digest (`sha256:` and 12 hex digits), or `(new build)`.
pub(crate) fn short(digest: &Option<Digest>) -> String {
    digest
        .as_ref()
        .map(|d| d.short().to_string())
        .unwrap_or_else(|| "(new build)".into())
}

/// `1 image`, `2 images`, `0 images`, `3 aliases`: a count with its noun.
pub(crate) fn count(number: usize, noun: &str) -> String {
    match (number, noun.ends_with('s')) {
        (1, _) => format!("1 {noun}"),
        (_, true) => format!("{number} {noun}es"),
        (_, false) => format!("{number} {noun}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::{count, table};

    #[test]
    fn counts_agree_with_their_number() {
        assert_eq!(count(1, "image"), "1 image");
        assert_eq!(count(0, "image"), "0 images");
        assert_eq!(count(2, "alias"), "2 aliases");
    }

    #[test]
    fn a_multi_line_cell_stays_on_its_row() {
        let rows = vec![
            vec!["KEY".to_string(), "VALUE".into()],
            vec!["labels".to_string(), "line one\nline two".into()],
        ];
        let text = table(&rows);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("line one\\nline two"), "{text}");
    }
}
