//! The steps of a plan as people read them: the run's, then each image's in build order, one
//! line each, as `imagegen plan` and `build --dry-run` print them. The names are the steps' own
//! (`pipeline::steps`), so the table, the JSON and the executor's words agree.

use std::fmt::Write as _;

use crate::pipeline::planned::Plan;

/// The steps of the plan for a terminal: the run's, then each image's in build order, one line
/// each (`imagegen plan` and `build --dry-run`).
pub(crate) fn steps_text(plan: &Plan) -> String {
    let mut out = String::from(
        "steps (in order; an earlier build found by its build key passes over resolve-base and build):\n",
    );
    if !plan.before.is_empty() {
        let before: Vec<String> = plan.before.iter().map(ToString::to_string).collect();
        writeln!(out, "  before the images: {}", before.join(" → ")).ok();
    }
    for image in &plan.images {
        let steps: Vec<String> = image.steps.iter().map(ToString::to_string).collect();
        writeln!(out, "  {}: {}", image.spec.tag, steps.join(" → ")).ok();
    }
    out
}
