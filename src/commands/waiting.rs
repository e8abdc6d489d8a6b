//! The images whose aliases wait for self-test results, as `plan` and `verify` print them.

use std::fmt::Write as _;

use crate::commands::output::{short, table};
use crate::history::manifest::Waiting;

/// The images whose aliases wait for self-test results, and for which GPU models; empty when none.
pub(crate) fn waiting_text(waiting: &[Waiting]) -> String {
    if waiting.is_empty() {
        return String::new();
    }
    let mut rows = vec![["IMAGE", "DIGEST", "WAITING FOR", "ALIASES"]
        .map(String::from)
        .to_vec()];
    for image in waiting {
        let mut wanted = image.missing.join(", ");
        if !image.failed.is_empty() {
            wanted.push_str(&format!(" (failed: {})", image.failed.join(", ")));
        }
        rows.push(vec![
            image.tag.clone(),
            short(&image.digest),
            if wanted.is_empty() {
                "nothing: `imagegen test settle` moves them".into()
            } else {
                wanted
            },
            image.aliases.join(", "),
        ]);
    }
    let mut out =
        String::from("aliases waiting for passing self-test results (matrix.yaml `tests`; `imagegen test` on such a GPU node records one):\n");
    for line in table(&rows).lines() {
        writeln!(out, "  {line}").ok();
    }
    out.push('\n');
    out
}
