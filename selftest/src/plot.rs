//! The `--plot FILE.svg` chart: host↔device bandwidth against transfer size, pinned and
//! pageable, in hand-written SVG (no font or graphics library, so it builds for glibc 2.17).
//!
//! Pure: series in, SVG text out; writing the file is the caller's business.

use std::fmt::Write as _;

/// One line on the chart: a legend label and (transfer size in bytes, bytes per second) points.
pub struct Series {
    pub label: String,
    pub points: Vec<(u64, f64)>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
/// Colours by series pair: a GPU's pinned and pageable lines of one direction share a colour
/// (pinned solid, pageable dashed), so eight pairs stay distinct.
const COLOURS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
/// Pinned series are solid, pageable ones dashed (by label).
fn dash_for(label: &str) -> &'static str {
    if label.contains("pageable") {
        " stroke-dasharray=\"6 4\""
    } else {
        ""
    }
}

/// The colour of series `index`: pageable lines take the colour of the pinned line with the
/// same label otherwise, so that each pair reads as one measurement.
fn colour_for(series: &[Series], index: usize) -> &'static str {
    let pair_key = |label: &str| label.replace("pageable", "").replace("pinned", "");
    let key = pair_key(&series[index].label);
    let mut pairs: Vec<String> = Vec::new();
    for line in series {
        let line_key = pair_key(&line.label);
        if !pairs.contains(&line_key) {
            pairs.push(line_key);
        }
    }
    let position = pairs
        .iter()
        .position(|known| *known == key)
        .unwrap_or(index);
    COLOURS[position % COLOURS.len()]
}

/// Escapes text for an SVG text node or attribute.
fn escape_xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A human label for a transfer size: "1 MiB", "256 MiB", "1 GiB", "4 KiB".
pub fn size_label(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, scale) in UNITS {
        if bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{} {unit}", bytes / scale);
        }
    }
    format!("{bytes} B")
}

/// A round step for the bandwidth axis so that it has about five gridlines.
fn axis_step(maximum: f64) -> f64 {
    let raw = (maximum / 5.0).max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|factor| factor * magnitude)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// Renders the chart. Sizes go on a log₂ axis, bandwidth in GB/s on a linear axis from zero.
pub fn render_bandwidth_svg(title: &str, series: &[Series]) -> String {
    let all_points: Vec<(u64, f64)> = series
        .iter()
        .flat_map(|line| line.points.iter().copied())
        .filter(|(size, rate)| *size > 0 && rate.is_finite())
        .collect();
    let smallest = all_points.iter().map(|p| p.0).min().unwrap_or(1 << 20) as f64;
    let largest = all_points.iter().map(|p| p.0).max().unwrap_or(1 << 30) as f64;
    let (log_low, log_high) = if largest > smallest {
        (smallest.log2(), largest.log2())
    } else {
        (smallest.log2() - 1.0, smallest.log2() + 1.0)
    };
    let peak_gigabytes = all_points
        .iter()
        .map(|p| p.1 / 1e9)
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let step = axis_step(peak_gigabytes);
    let axis_top = (peak_gigabytes / step).ceil() * step;
    let plot_width = WIDTH - LEFT - RIGHT;
    let plot_height = HEIGHT - TOP - BOTTOM;
    let x_of = |size: f64| LEFT + (size.log2() - log_low) / (log_high - log_low) * plot_width;
    let y_of = |gigabytes: f64| TOP + plot_height - gigabytes / axis_top * plot_height;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(svg, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>",
        LEFT + plot_width / 2.0,
        escape_xml(title)
    );
    // Horizontal gridlines and bandwidth labels.
    let mut gigabytes = 0.0;
    while gigabytes <= axis_top + step / 2.0 {
        let y = y_of(gigabytes);
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>",
            LEFT + plot_width
        );
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 6.0,
            y + 4.0,
            gigabytes
        );
        gigabytes += step;
    }
    // Vertical gridlines at every power of two that carries a point.
    let mut sizes: Vec<u64> = all_points.iter().map(|p| p.0).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for size in &sizes {
        let x = x_of(*size as f64);
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/>",
            TOP + plot_height
        );
        let _ = writeln!(
            svg,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            TOP + plot_height + 16.0,
            size_label(*size)
        );
    }
    let _ = writeln!(
        svg,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_width}\" height=\"{plot_height}\" fill=\"none\" stroke=\"#333\"/>"
    );
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">transfer size</text>",
        LEFT + plot_width / 2.0,
        HEIGHT - 18.0
    );
    let _ = writeln!(
        svg,
        "<text x=\"18\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {:.1})\">bandwidth (GB/s)</text>",
        TOP + plot_height / 2.0,
        TOP + plot_height / 2.0
    );
    for (index, line) in series.iter().enumerate() {
        let colour = colour_for(series, index);
        let mut points: Vec<(u64, f64)> = line
            .points
            .iter()
            .copied()
            .filter(|(size, rate)| *size > 0 && rate.is_finite())
            .collect();
        points.sort_by_key(|point| point.0);
        let coordinates: Vec<String> = points
            .iter()
            .map(|(size, rate)| format!("{:.1},{:.1}", x_of(*size as f64), y_of(rate / 1e9)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{} points=\"{}\"/>",
            dash_for(&line.label),
            coordinates.join(" ")
        );
        for coordinate in &coordinates {
            let (x, y) = coordinate.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(
                svg,
                "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{colour}\"/>"
            );
        }
        let legend_y = TOP + 10.0 + index as f64 * 20.0;
        let legend_x = LEFT + plot_width + 14.0;
        let _ = writeln!(
            svg,
            "<line x1=\"{legend_x:.1}\" y1=\"{legend_y:.1}\" x2=\"{:.1}\" y2=\"{legend_y:.1}\" stroke=\"{colour}\" stroke-width=\"2\"{}/>",
            legend_x + 24.0,
            dash_for(&line.label)
        );
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            legend_x + 30.0,
            legend_y + 4.0,
            escape_xml(&line.label)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Series> {
        let sizes = [1u64 << 20, 16 << 20, 256 << 20, 1 << 30];
        vec![
            Series {
                label: "GPU 0 H2D pinned".to_string(),
                points: sizes.iter().map(|s| (*s, 54.6e9)).collect(),
            },
            Series {
                label: "GPU 0 H2D pageable".to_string(),
                points: sizes.iter().map(|s| (*s, 7.6e9)).collect(),
            },
        ]
    }

    #[test]
    fn svg_is_well_formed_and_has_one_line_per_series() {
        let svg = render_bandwidth_svg("bandwidth <GPU 0>", &sample());
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 8);
        assert!(svg.contains("bandwidth &lt;GPU 0&gt;"));
        assert!(svg.contains(">1 MiB</text>") && svg.contains(">1 GiB</text>"));
        assert!(svg.contains("GPU 0 H2D pageable</text>"));
        // Pageable lines are dashed, pinned lines solid.
        assert_eq!(svg.matches("stroke-dasharray").count(), 2);
    }

    #[test]
    fn points_land_inside_the_plot_area() {
        let svg = render_bandwidth_svg("t", &sample());
        let circles: Vec<&str> = svg
            .lines()
            .filter(|line| line.starts_with("<circle"))
            .collect();
        assert!(!circles.is_empty(), "{svg}");
        for circle in circles {
            let field = |name: &str| -> f64 {
                let start = circle.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                circle[start..].split('"').next().unwrap().parse().unwrap()
            };
            let (x, y) = (field("cx"), field("cy"));
            assert!((LEFT..=WIDTH - RIGHT).contains(&x), "{circle}");
            assert!((TOP..=HEIGHT - BOTTOM).contains(&y), "{circle}");
        }
        // The 54.6 GB/s points (the first series) sit higher, at smaller y, than the 7.6 GB/s ones.
        let heights: Vec<f64> = svg
            .lines()
            .filter(|line| line.starts_with("<circle"))
            .map(|line| {
                let start = line.find("cy=\"").unwrap() + 4;
                line[start..].split('"').next().unwrap().parse().unwrap()
            })
            .collect();
        assert!(heights[0] < heights[4]);
    }

    #[test]
    fn pinned_and_pageable_of_one_direction_share_a_colour() {
        let series = sample();
        assert_eq!(colour_for(&series, 0), colour_for(&series, 1));
        let mut more = sample();
        more.push(Series {
            label: "GPU 1 H2D pinned".to_string(),
            points: vec![(1 << 20, 40e9)],
        });
        assert_ne!(colour_for(&more, 2), colour_for(&more, 0));
    }

    #[test]
    fn labels_and_steps() {
        assert_eq!(size_label(1 << 20), "1 MiB");
        assert_eq!(size_label(256 << 20), "256 MiB");
        assert_eq!(size_label(1 << 30), "1 GiB");
        assert_eq!(size_label(1000), "1000 B");
        assert_eq!(axis_step(55.0), 20.0);
        assert_eq!(axis_step(10.0), 2.0);
    }

    #[test]
    fn empty_input_still_renders_a_frame() {
        let svg = render_bandwidth_svg("empty", &[]);
        assert!(svg.contains("<rect x="));
        assert_eq!(svg.matches("<polyline").count(), 0);
    }
}
