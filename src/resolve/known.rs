//! Mistakes in a matrix that only the knowledge reveals: a value that names no known release (a
//! torch, CUDA, cuDNN, Python or OS nobody published: `torch: ["2.99"]`, `cuda: [12.10]`), an
//! include rule that does not say what to build, and exclude rules that remove every cell. They
//! are typos, not impossible combinations: resolving them would quietly make no image, so each is
//! one error at its `file:line:column` with the closest known values. Pure.

use crate::model::knowledge::Knowledge;
use crate::model::matrix::{CellRule, Matrix, MatrixError};
use crate::model::names::closest;
use crate::model::version::{OsName, TorchText, VersionText};
use crate::model::yaml::Position;
use crate::resolve::cells::{axis_cells, rule_matches};

/// How many close values an error lists.
const SUGGESTIONS: usize = 4;

/// The first mistake of the matrix against the knowledge, if any.
pub(crate) fn check_known(matrix: &Matrix, knowledge: &Knowledge) -> Result<(), MatrixError> {
    let error = |at: Option<Position>, message: String, hint: String| MatrixError::Invalid {
        path: matrix.locations.file.clone(),
        line: at.map(|at| at.line),
        column: at.map(|at| at.column),
        message,
        hint: Some(hint),
    };
    let known = KnownValues::of(knowledge);
    for (key, values) in axis_values(matrix) {
        for (index, value) in values.into_iter().enumerate() {
            if let Some((message, hint)) = known.unknown(key, value) {
                let at = matrix.locations.value_at(&format!("{key}[{index}]"));
                return Err(error(at, message, hint));
            }
        }
    }
    for (list, rules) in [("include", &matrix.include), ("exclude", &matrix.exclude)] {
        for (index, rule) in rules.iter().enumerate() {
            for (key, value) in rule_values(rule) {
                if let Some((message, hint)) = known.unknown(key, value) {
                    let at = matrix.locations.value_at(&format!("{list}[{index}].{key}"));
                    return Err(error(at, format!("{list}[{index}]: {message}"), hint));
                }
            }
        }
    }
    for (index, rule) in matrix.include.iter().enumerate() {
        let missing: Vec<&str> = [
            ("torch", rule.torch.is_none()),
            ("cuda", rule.cuda.is_none()),
            ("os", rule.os.is_none()),
        ]
        .into_iter()
        .filter_map(|(key, absent)| absent.then_some(key))
        .collect();
        // A rule that only adds to the images it matches (`apt`, `pip`, ...) needs no cell keys.
        if !missing.is_empty() && rule.extensions().is_empty() {
            return Err(error(
                matrix.locations.value_at(&format!("include[{index}]")),
                format!(
                    "include[{index}] does not name {}, so it makes no cell",
                    missing.join(" and ")
                ),
                "an include names torch, cuda and os (and optionally cudnn, python, variants, platforms), or adds to the images it matches (pip, apt, steps, env, labels, user, workdir)".into(),
            ));
        }
    }
    check_excludes(matrix).map_err(|(at, message)| {
        error(
            at,
            message,
            "a cell is dropped when every key the rule gives matches it; narrow the rule or remove it"
                .into(),
        )
    })
}

/// Exclude rules may not remove every cell of the axes: one rule that matches them all is a
/// mistake, and so are rules that together leave nothing when no include adds cells.
fn check_excludes(matrix: &Matrix) -> Result<(), (Option<Position>, String)> {
    if matrix.exclude.is_empty() {
        return Ok(());
    }
    let cells = axis_cells(matrix);
    for (index, rule) in matrix.exclude.iter().enumerate() {
        if cells.iter().all(|cell| rule_matches(rule, cell)) {
            return Err((
                matrix.locations.value_at(&format!("exclude[{index}]")),
                format!(
                    "exclude[{index}] matches every cell of the axes (all {}), so the axes make no image",
                    cells.len()
                ),
            ));
        }
    }
    let all_excluded = cells
        .iter()
        .all(|cell| matrix.exclude.iter().any(|rule| rule_matches(rule, cell)));
    if all_excluded && matrix.include.is_empty() {
        return Err((
            matrix.locations.key_at("exclude"),
            format!(
                "the exclude rules together remove every cell of the axes (all {}), and no include adds one",
                cells.len()
            ),
        ));
    }
    Ok(())
}

/// A matrix value the knowledge may not know, as the matrix read it (never parsed again here).
#[derive(Clone, Copy)]
enum Value<'m> {
    Torch(&'m TorchText),
    Version(&'m VersionText),
    Os(&'m OsName),
}

impl Value<'_> {
    /// The value as written.
    fn text(&self) -> &str {
        match self {
            Value::Torch(torch) => torch.as_str(),
            Value::Version(version) => version.as_str(),
            Value::Os(os) => os.as_str(),
        }
    }
}

/// The version and OS axes of the matrix, by key, in the order `Matrix::axes` lists them.
fn axis_values(matrix: &Matrix) -> Vec<(&'static str, Vec<Value<'_>>)> {
    fn versions(values: &[VersionText]) -> Vec<Value<'_>> {
        values.iter().map(Value::Version).collect()
    }
    vec![
        ("torch", matrix.torch.iter().map(Value::Torch).collect()),
        ("cuda", versions(&matrix.cuda)),
        ("cudnn", versions(&matrix.cudnn)),
        ("python", versions(&matrix.python)),
        ("os", matrix.os.iter().map(Value::Os).collect()),
    ]
}

/// The version and OS values of a rule, by key.
fn rule_values(rule: &CellRule) -> Vec<(&'static str, Value<'_>)> {
    [
        ("torch", rule.torch.as_ref().map(Value::Torch)),
        ("cuda", rule.cuda.as_ref().map(Value::Version)),
        ("cudnn", rule.cudnn.as_ref().map(Value::Version)),
        ("python", rule.python.as_ref().map(Value::Version)),
        ("os", rule.os.as_ref().map(Value::Os)),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.map(|value| (key, value)))
    .collect()
}

/// Every value the knowledge knows, per key, in the form a matrix writes them.
struct KnownValues<'k> {
    knowledge: &'k Knowledge,
    torch: Vec<String>,
    cuda: Vec<String>,
    cudnn: Vec<String>,
    python: Vec<String>,
    os: Vec<String>,
}

impl<'k> KnownValues<'k> {
    fn of(knowledge: &'k Knowledge) -> KnownValues<'k> {
        let mut torch: Vec<String> = Vec::new();
        let mut cuda: Vec<String> = Vec::new();
        let mut cudnn: Vec<String> = Vec::new();
        let mut python: Vec<String> = Vec::new();
        for series in &knowledge.torch {
            torch.push(series.series.to_string());
            torch.extend(series.releases.iter().map(|r| r.torch.to_string()));
            python.extend(series.python.iter().map(ToString::to_string));
            python.extend(series.python_experimental.iter().map(ToString::to_string));
            for variant in &series.cuda {
                cuda.push(variant.cuda.to_string());
                cudnn.push(variant.cudnn.to_string());
                cudnn.push(variant.cudnn.major().to_string());
            }
        }
        for release in &knowledge.cuda {
            cuda.push(release.version.to_string());
            cuda.push(release.version.dotted().major_minor());
        }
        python.extend(knowledge.os.iter().map(|o| o.python.to_string()));
        let os = knowledge.os.iter().map(|o| o.name.to_string()).collect();
        for list in [&mut torch, &mut cuda, &mut cudnn, &mut python] {
            list.sort();
            list.dedup();
        }
        KnownValues {
            knowledge,
            torch,
            cuda,
            cudnn,
            python,
            os,
        }
    }

    /// `None` when `value` of `key` names something the knowledge knows; else the message and
    /// the hint (the closest known values).
    fn unknown(&self, key: &str, value: Value<'_>) -> Option<(String, String)> {
        let text = value.text();
        let (known, label, candidates) = match (key, value) {
            ("torch", Value::Torch(torch)) => (self.knows_torch(torch), "torch", &self.torch),
            ("cuda", Value::Version(cuda)) => {
                if cuda.dotted().parts().len() == 1 {
                    return Some(self.bare_cuda_major(cuda));
                }
                (self.knows_cuda(cuda), "CUDA", &self.cuda)
            }
            ("cudnn", Value::Version(cudnn)) => (self.knows_cudnn(cudnn), "cuDNN", &self.cudnn),
            ("python", Value::Version(python)) => (
                self.python.iter().any(|p| p == python.as_str()),
                "Python",
                &self.python,
            ),
            ("os", Value::Os(os)) => (self.os.iter().any(|o| o == os.as_str()), "OS", &self.os),
            _ => return None,
        };
        (!known).then(|| self.unknown_message(key, text, label, candidates))
    }

    /// The message and hint for a `value` of `key` the knowledge does not know: the closest of
    /// `candidates`.
    fn unknown_message(
        &self,
        key: &str,
        value: &str,
        label: &str,
        candidates: &[String],
    ) -> (String, String) {
        // Suggest values written like this one: `12.10` → CUDA lines, `12.6.9` → releases.
        let parts = |text: &str| text.split('.').count();
        let alike: Vec<&str> = candidates
            .iter()
            .map(String::as_str)
            .filter(|c| key == "os" || parts(c) == parts(value))
            .collect();
        let pool = if alike.is_empty() {
            candidates.iter().map(String::as_str).collect()
        } else {
            alike
        };
        // Versions are also compared as numbers: the newest known is always named, and a value
        // above it is said to be newer than the knowledge (2.99.0 is no typo of 2.9.0).
        let numbers = |text: &str| -> Option<Vec<u64>> {
            text.split('.').map(|part| part.parse().ok()).collect()
        };
        let newest = (key != "os")
            .then(|| {
                pool.iter()
                    .filter_map(|c| numbers(c).map(|n| (n, *c)))
                    .max()
                    .map(|(_, c)| c)
            })
            .flatten();
        let mut near = closest(value, pool.iter().copied(), SUGGESTIONS);
        if let Some(newest) = newest {
            if !near.contains(&newest) {
                near.truncate(SUGGESTIONS.saturating_sub(1));
                near.push(newest);
            }
        }
        let beyond = match (newest.and_then(numbers), numbers(value)) {
            (Some(newest_numbers), Some(value_numbers)) if value_numbers > newest_numbers => {
                Some(newest.unwrap_or_default())
            }
            _ => None,
        };
        let hint = match beyond {
            Some(newest) => format!(
                "{value} is newer than every {label} release the knowledge knows (the newest is {newest}); a release newer than the knowledge goes in a --knowledge file (see docs/compatibility.md)"
            ),
            None => format!(
                "closest known: {}{}; a release newer than the knowledge goes in a --knowledge file (see docs/compatibility.md)",
                near.join(", "),
                newest
                    .map(|newest| format!(" (the newest is {newest})"))
                    .unwrap_or_default()
            ),
        };
        (
            format!("{label} {value} is not in the compatibility knowledge"),
            hint,
        )
    }

    /// `cuda: [13]`: a bare major would resolve to the newest release of the major while the tag
    /// reads `cuda13`; the message lists the `major.minor` lines it could mean.
    fn bare_cuda_major(&self, major: &VersionText) -> (String, String) {
        // The `major.minor` lines the knowledge knows, as it read them, in numeric order.
        let mut lines: Vec<VersionText> =
            self.knowledge
                .torch
                .iter()
                .flat_map(|series| &series.cuda)
                .map(|variant| variant.cuda.clone())
                .chain(
                    self.knowledge.cuda.iter().flat_map(|release| {
                        [release.version.clone(), release.version.major_minor()]
                    }),
                )
                .filter(|line| line.dotted().parts().len() == 2 && line.major() == major.major())
                .collect();
        lines.sort_by(|a, b| a.dotted().cmp(b.dotted()).then_with(|| a.cmp(b)));
        lines.dedup();
        let lines: Vec<&str> = lines.iter().map(VersionText::as_str).collect();
        let message = format!(
            "CUDA {major} is a bare major: a CUDA version must name its minor (major.minor, or a full release)"
        );
        let hint = if lines.is_empty() {
            format!(
                "the knowledge knows no CUDA {major}.x release; known lines: {}",
                closest(
                    major.as_str(),
                    self.cuda.iter().map(String::as_str),
                    SUGGESTIONS
                )
                .join(", ")
            )
        } else {
            format!("CUDA {major} could mean: {}", lines.join(", "))
        };
        (message, hint)
    }

    /// A series the knowledge lists, or a release of one.
    fn knows_torch(&self, torch: &TorchText) -> bool {
        let torch = torch.torch();
        if torch.is_series {
            self.knowledge.torch_series(torch).is_some()
        } else {
            self.knowledge.torch_release(torch).is_some()
        }
    }

    fn knows_cuda(&self, wanted: &VersionText) -> bool {
        self.knowledge.cuda_release_for(wanted).is_some()
            || (wanted.dotted().parts().len() == 2
                && self.cuda.iter().any(|c| c == wanted.as_str()))
    }

    fn knows_cudnn(&self, wanted: &VersionText) -> bool {
        self.knowledge
            .torch
            .iter()
            .flat_map(|series| &series.cuda)
            .any(|variant| variant.cudnn.dotted().starts_with(wanted.dotted()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "registry: ghcr.io\nrepository: acme/pytorch\ntorch: [\"2.12\", \"2.13\"]\ncuda: [\"12.6\", \"13.0\"]\nos: [ubuntu24.04]\n";

    fn check(text: &str) -> Result<(), String> {
        let matrix = Matrix::parse(text, "matrix.yaml").map_err(|e| e.to_string())?;
        check_known(&matrix, &Knowledge::test_fixture()).map_err(|e| e.to_string())
    }

    #[test]
    fn known_values_pass() {
        check(MINIMAL).unwrap();
        check(&MINIMAL.replace("[\"12.6\", \"13.0\"]", "[\"12.6.3\", 13.0]")).unwrap();
        check(&format!("{MINIMAL}cudnn: [\"9\"]\npython: [\"3.12\"]\n")).unwrap();
        // A known release that no torch publishes wheels for is an impossible cell, not a typo.
        check(&MINIMAL.replace("[\"12.6\", \"13.0\"]", "[\"12.3\"]")).unwrap();
    }

    #[test]
    fn unknown_values_are_errors_at_their_place_with_the_closest_known() {
        let error =
            check(&MINIMAL.replace("[\"2.12\", \"2.13\"]", "[\"2.12\", \"2.99\"]")).unwrap_err();
        assert!(
            error.starts_with("matrix.yaml:3:17: torch 2.99 is not in the compatibility knowledge"),
            "{error}"
        );
        assert!(
            error.contains("\nhint: 2.99 is newer than every torch release the knowledge knows (the newest is 2.13)"),
            "{error}"
        );
        let error =
            check(&MINIMAL.replace("[\"2.12\", \"2.13\"]", "[\"2.12\", \"2.19\"]")).unwrap_err();
        assert!(error.contains("\nhint: 2.19 is newer"), "{error}");
        let error =
            check(&MINIMAL.replace("[\"2.12\", \"2.13\"]", "[\"2.12\", \"2.0.9\"]")).unwrap_err();
        assert!(
            error.contains("\nhint: closest known: 2.0.0, ")
                && error.contains("(the newest is 2.13.0)"),
            "{error}"
        );
        let error = check(&MINIMAL.replace("[\"12.6\", \"13.0\"]", "[12.10]")).unwrap_err();
        assert!(
            error.starts_with("matrix.yaml:4:8: CUDA 12.10 is not in the compatibility knowledge"),
            "12.10 stays 12.10: {error}"
        );
        assert!(error.contains("closest known: 12.1, "), "{error}");
        let error = check(&MINIMAL.replace("[ubuntu24.04]", "[ubuntu24.10]")).unwrap_err();
        assert!(
            error.starts_with("matrix.yaml:5:6: OS ubuntu24.10 is not in"),
            "{error}"
        );
        assert!(error.contains("closest known: ubuntu24.04"), "{error}");
        let error = check(&MINIMAL.replace("\"2.13\"]", "\"2.13.7\"]")).unwrap_err();
        assert!(
            error.contains("torch 2.13.7 is not in the compatibility knowledge"),
            "{error}"
        );
        let error = check(&format!("{MINIMAL}python: [\"3.99\"]\n")).unwrap_err();
        assert!(
            error.starts_with("matrix.yaml:6:10: Python 3.99"),
            "{error}"
        );
        let error = check(&format!(
            "{MINIMAL}include:\n  - {{torch: \"2.13\", cuda: \"12.66\", os: ubuntu24.04}}\n"
        ))
        .unwrap_err();
        assert!(
            error.starts_with("matrix.yaml:7:27: include[0]: CUDA 12.66"),
            "{error}"
        );
    }

    #[test]
    fn a_bare_cuda_major_is_refused_with_the_lines_it_could_mean() {
        let error = check(&MINIMAL.replace("[\"12.6\", \"13.0\"]", "[\"12.6\", 13]")).unwrap_err();
        assert!(
            error.starts_with("matrix.yaml:4:16: CUDA 13 is a bare major"),
            "{error}"
        );
        let lines = error.split("could mean: ").nth(1).expect("a list").trim();
        let listed: Vec<&str> = lines.split(", ").collect();
        assert!(listed.contains(&"13.0"), "{error}");
        assert!(listed.iter().all(|l| l.starts_with("13.")), "{error}");
        let error = check(&format!(
            "{MINIMAL}include:\n  - {{torch: \"2.13\", cuda: \"12\", os: ubuntu24.04}}\n"
        ))
        .unwrap_err();
        assert!(
            error.starts_with("matrix.yaml:7:27: include[0]: CUDA 12 is a bare major"),
            "{error}"
        );
        assert!(
            error.contains("CUDA 12 could mean: 12.1, 12.2, "),
            "{error}"
        );
    }

    #[test]
    fn excludes_that_remove_everything_are_errors() {
        let error = check(&format!("{MINIMAL}exclude:\n  - {{os: ubuntu24.04}}\n")).unwrap_err();
        assert!(
            error.starts_with("matrix.yaml:7:5: exclude[0] matches every cell of the axes (all 8)"),
            "{error}"
        );
        let together =
            format!("{MINIMAL}exclude:\n  - {{cuda: \"12.6\"}}\n  - {{cuda: \"13.0\"}}\n");
        let error = check(&together).unwrap_err();
        assert!(
            error.starts_with("matrix.yaml:6:1: the exclude rules together"),
            "{error}"
        );
        check(&format!(
            "{together}include:\n  - {{torch: \"2.13\", cuda: \"12.8\", os: ubuntu24.04}}\n"
        ))
        .unwrap();
        check(&format!("{MINIMAL}exclude:\n  - {{cuda: \"12.6\"}}\n")).unwrap();
        let error = check(&format!(
            "{MINIMAL}include:\n  - {{torch: \"2.13\", cuda: \"12.8\"}}\n"
        ))
        .unwrap_err();
        assert!(
            error.starts_with("matrix.yaml:7:5: include[0] does not name os"),
            "{error}"
        );
    }
}
