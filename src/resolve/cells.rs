//! The cells a matrix asks for: every combination of its axes, minus `exclude` rules, plus
//! `include` rules, each remembering where it came from so a rejection can point at its rule.
//! Pure.

use crate::model::axes::VersionText;
use crate::model::matrix::{CellRule, Matrix};
use crate::model::version::TorchText;
use crate::resolve::image::{Cell, Resolution};

/// The cells the matrix asks for: axes minus excludes, plus includes.
pub(super) fn expand(matrix: &Matrix, resolution: &mut Resolution) -> Vec<Cell> {
    let mut cells: Vec<Cell> = axis_cells(matrix)
        .into_iter()
        .filter(|cell| !matrix.exclude.iter().any(|rule| rule_matches(rule, cell)))
        .collect();
    for (index, rule) in matrix.include.iter().enumerate() {
        let origin = format!("include[{index}]");
        let (Some(torch), Some(cuda), Some(os)) = (&rule.torch, &rule.cuda, &rule.os) else {
            // A rule that only adds to the images it matches (`apt`, `pip`, ...) makes no cells.
            if !rule.extensions().is_empty() {
                continue;
            }
            resolution.warnings.push(format!(
                "{origin} is ignored: an include must name torch, cuda and os"
            ));
            continue;
        };
        for variant in rule
            .variants
            .clone()
            .unwrap_or_else(|| matrix.variants.clone())
        {
            for platform in rule
                .platforms
                .clone()
                .unwrap_or_else(|| matrix.platforms.clone())
            {
                cells.push(Cell {
                    torch: torch.clone(),
                    cuda: cuda.clone(),
                    cudnn: rule.cudnn.clone(),
                    python: rule.python.clone(),
                    os: os.clone(),
                    variant,
                    platform: platform.clone(),
                    origin: origin.clone(),
                    location: matrix.include_locations.get(index).cloned(),
                });
            }
        }
    }
    cells
}

/// Every combination of the axes, before exclude rules (at most [`MAX_CELLS`], which loading
/// checks).
///
/// [`MAX_CELLS`]: crate::model::matrix::MAX_CELLS
pub(super) fn axis_cells(matrix: &Matrix) -> Vec<Cell> {
    let optional = |values: &[VersionText]| -> Vec<Option<VersionText>> {
        if values.is_empty() {
            vec![None]
        } else {
            values.iter().cloned().map(Some).collect()
        }
    };
    let mut cells = Vec::new();
    for torch in &matrix.torch {
        for cuda in &matrix.cuda {
            for cudnn in optional(&matrix.cudnn) {
                for python in optional(&matrix.python) {
                    for os in &matrix.os {
                        for variant in &matrix.variants {
                            for platform in &matrix.platforms {
                                cells.push(Cell {
                                    torch: torch.clone(),
                                    cuda: cuda.clone(),
                                    cudnn: cudnn.clone(),
                                    python: python.clone(),
                                    os: os.clone(),
                                    variant: *variant,
                                    platform: platform.clone(),
                                    origin: "axes".into(),
                                    location: None,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    cells
}

/// Whether an exclude rule covers a cell. Versions match by prefix (`2.7` covers `2.7.1`).
pub(super) fn rule_matches(rule: &CellRule, cell: &Cell) -> bool {
    let version_matches =
        |rule_value: Option<&VersionText>, value: Option<&VersionText>| match (rule_value, value) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(wanted), Some(value)) => {
                let (wanted, value) = (wanted.dotted(), value.dotted());
                value.starts_with(wanted) || wanted.starts_with(value)
            }
        };
    version_matches(
        rule.torch.as_ref().map(TorchText::text),
        Some(cell.torch.text()),
    ) && version_matches(rule.cuda.as_ref(), Some(&cell.cuda))
        && version_matches(rule.cudnn.as_ref(), cell.cudnn.as_ref())
        && version_matches(rule.python.as_ref(), cell.python.as_ref())
        && rule.os.as_ref().is_none_or(|os| os.as_str() == cell.os)
        && rule
            .variants
            .as_ref()
            .is_none_or(|variants| variants.contains(&cell.variant))
        && rule
            .platforms
            .as_ref()
            .is_none_or(|platforms| platforms.iter().any(|p| p.as_str() == cell.platform))
}
