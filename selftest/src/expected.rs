//! The expected figures per GPU model: the table `data/gpu-models.json`, embedded in the binary,
//! with each model's datasheet peaks (dense bf16, fp16, tf32 and fp32 TFLOP/s), its NVLink
//! generation, links and bandwidth, its PCIe generation and width, and the document they come
//! from. A GPU is recognised by the exact name CUDA reports for it.
//!
//! This module only holds and looks up data (and the matmul precisions the table's columns
//! name, with their tolerances); the rules that judge figures against it live in `rules.rs`,
//! which imports this module and never the other way round. A model missing from the table is not an error: the checks then warn with their
//! measured figures instead of passing silently.

use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// Matmul precisions the self-test runs through cuBLAS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Bf16,
    Fp16,
    Tf32,
    Fp32,
}

impl Precision {
    pub const ALL: [Precision; 4] = [
        Precision::Bf16,
        Precision::Fp16,
        Precision::Tf32,
        Precision::Fp32,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::Tf32 => "tf32",
            Precision::Fp32 => "fp32",
        }
    }

    pub fn parse(text: &str) -> Option<Precision> {
        Precision::ALL
            .into_iter()
            .find(|precision| precision.name().eq_ignore_ascii_case(text.trim()))
    }

    /// Largest relative error ‖C − C_ref‖/‖C_ref‖ accepted against a float64 reference computed
    /// from the same (already rounded) inputs. bf16 and fp16 lose most in the rounding of the
    /// output (2⁻⁹ and 2⁻¹² relative); tf32 rounds the inputs to 10 mantissa bits; fp32 only
    /// accumulates rounding over the inner dimension.
    pub fn tolerance(self) -> f64 {
        match self {
            Precision::Bf16 => 1e-2,
            Precision::Fp16 => 5e-3,
            Precision::Tf32 => 5e-3,
            Precision::Fp32 => 1e-4,
        }
    }
}

/// The table's text, as committed.
const TABLE_TEXT: &str = include_str!("../data/gpu-models.json");

/// The whole table.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTable {
    /// How the figures were copied (sparsity, both directions); for readers of the file.
    pub about: String,
    pub models: Vec<GpuModel>,
}

/// One GPU model's datasheet figures.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GpuModel {
    /// Short name used in messages ("H200 SXM").
    pub model: String,
    /// Names CUDA reports for this model (`cuDeviceGetName`), e.g. "NVIDIA H200".
    pub names: Vec<String>,
    pub compute_capability: String,
    pub tflops: PrecisionRates,
    /// `None` for models without NVLink.
    pub nvlink: Option<NvlinkFigures>,
    pub pcie: PcieFigures,
    pub source: Source,
}

/// Matrix rates per precision, as the datasheet prints them.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PrecisionRates {
    pub bf16: Option<Rate>,
    pub fp16: Option<Rate>,
    pub tf32: Option<Rate>,
    pub fp32: Option<Rate>,
}

/// One datasheet rate in TFLOP/s.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// The figure as printed.
    pub datasheet: f64,
    /// The datasheet marks it "with sparsity" (2:4 structured sparsity doubles the rate; a
    /// dense product gets half of it).
    pub with_sparsity: bool,
}

impl Rate {
    /// TFLOP/s of a dense product.
    pub fn dense(self) -> f64 {
        if self.with_sparsity {
            self.datasheet / 2.0
        } else {
            self.datasheet
        }
    }
}

/// NVLink as the datasheet gives it.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NvlinkFigures {
    pub generation: u32,
    /// Links per GPU, where the datasheet or whitepaper states it (bridged boards vary).
    pub links: Option<u32>,
    /// Total of both directions per GPU, as printed ("NVLink 900GB/s").
    pub datasheet_gigabytes_per_second: f64,
}

impl NvlinkFigures {
    /// What one direction carries, in bytes per second: half the datasheet's total.
    pub fn bytes_per_second_per_direction(&self) -> f64 {
        self.datasheet_gigabytes_per_second * 1e9 / 2.0
    }

    /// "NVLink 4 x18" or "NVLink 4".
    pub fn label(&self) -> String {
        match self.links {
            Some(links) => format!("NVLink {} x{links}", self.generation),
            None => format!("NVLink {}", self.generation),
        }
    }
}

/// The PCIe interface as the datasheet gives it.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PcieFigures {
    pub generation: u32,
    pub width: u32,
    /// Total of both directions, as printed ("PCIe Gen5: 128GB/s").
    pub datasheet_gigabytes_per_second: f64,
}

/// Where the figures come from.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub document: String,
    pub url: String,
    /// The datasheet's words for the figures used.
    pub quote: String,
}

impl PrecisionRates {
    pub fn rate(&self, precision: Precision) -> Option<Rate> {
        match precision {
            Precision::Bf16 => self.bf16,
            Precision::Fp16 => self.fp16,
            Precision::Tf32 => self.tf32,
            Precision::Fp32 => self.fp32,
        }
    }
}

impl GpuModel {
    /// Dense datasheet TFLOP/s of this precision.
    pub fn dense_tflops(&self, precision: Precision) -> Option<f64> {
        self.tflops.rate(precision).map(Rate::dense)
    }
}

/// Parses a table's text (the embedded one, or a test's).
pub fn parse_table(text: &str) -> Result<ModelTable, String> {
    serde_json::from_str(text).map_err(|error| format!("gpu-models.json: {error}"))
}

/// The embedded table. It is validated by the unit tests, so a parse failure here means the
/// binary was built from a broken table: the program stops with the parser's message.
pub fn table() -> &'static ModelTable {
    static TABLE: OnceLock<ModelTable> = OnceLock::new();
    TABLE.get_or_init(|| parse_table(TABLE_TEXT).unwrap_or_else(|message| panic!("{message}")))
}

/// Compares GPU names the way the table is keyed: case and surrounding spaces ignored.
fn same_name(left: &str, right: &str) -> bool {
    left.trim().eq_ignore_ascii_case(right.trim())
}

/// The model of the GPU CUDA names `device_name`, from `table`.
pub fn find_in<'a>(table: &'a ModelTable, device_name: &str) -> Option<&'a GpuModel> {
    table
        .models
        .iter()
        .find(|model| model.names.iter().any(|name| same_name(name, device_name)))
}

/// The model of the GPU CUDA names `device_name`, from the embedded table.
pub fn find(device_name: &str) -> Option<&'static GpuModel> {
    find_in(table(), device_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_table_parses_and_every_entry_is_sourced_and_sane() {
        let table = parse_table(TABLE_TEXT).expect("the embedded table parses");
        assert!(table.models.len() >= 5);
        let mut all_names: Vec<String> = Vec::new();
        let mut nvlink_quotes_checked = 0;
        for model in &table.models {
            assert!(!model.names.is_empty(), "{}", model.model);
            assert!(model.source.url.starts_with("https://"), "{}", model.model);
            assert!(!model.source.document.is_empty() && !model.source.quote.is_empty());
            for precision in Precision::ALL {
                let dense = model
                    .dense_tflops(precision)
                    .unwrap_or_else(|| panic!("{} has no {} rate", model.model, precision.name()));
                assert!(dense > 1.0 && dense < 5000.0, "{} {dense}", model.model);
                // The rate each quote prints must be the figure stored.
                let printed = model.tflops.rate(precision).unwrap().datasheet;
                let printed_text = format!("{printed}");
                let with_separator = if printed >= 1000.0 {
                    format!("{},{:03}", printed as u64 / 1000, printed as u64 % 1000)
                } else {
                    printed_text.clone()
                };
                assert!(
                    model.source.quote.contains(&printed_text)
                        || model.source.quote.contains(&with_separator),
                    "{} {}: {printed} not in the quote",
                    model.model,
                    precision.name()
                );
            }
            // Tensor cores order the precisions: bf16 = fp16 > tf32 > fp32.
            let rate = |precision| model.dense_tflops(precision).unwrap();
            assert_eq!(rate(Precision::Bf16), rate(Precision::Fp16));
            assert!(rate(Precision::Tf32) > rate(Precision::Fp32));
            let ratio = rate(Precision::Bf16) / rate(Precision::Tf32);
            assert!(
                (ratio - 2.0).abs() < 0.01,
                "{} bf16/tf32 {ratio}",
                model.model
            );
            assert!((3..=6).contains(&model.pcie.generation) && model.pcie.width == 16);
            if let Some(nvlink) = model.nvlink {
                assert!(
                    model
                        .source
                        .quote
                        .contains(&format!("{}GB/s", nvlink.datasheet_gigabytes_per_second))
                        || model
                            .source
                            .quote
                            .contains(&format!("{} GB/s", nvlink.datasheet_gigabytes_per_second))
                );
                nvlink_quotes_checked += 1;
            }
            for name in &model.names {
                assert!(
                    !all_names.iter().any(|known| same_name(known, name)),
                    "{name} listed twice"
                );
                all_names.push(name.clone());
            }
        }
        assert!(
            nvlink_quotes_checked > 0,
            "no model with NVLink was checked"
        );
    }

    #[test]
    fn the_h200_reads_as_its_datasheet_says() {
        let model = find("NVIDIA H200").expect("the H200 is in the table");
        assert_eq!(model.model, "H200 SXM");
        assert_eq!(model.dense_tflops(Precision::Bf16), Some(989.5));
        assert_eq!(model.dense_tflops(Precision::Tf32), Some(494.5));
        assert_eq!(model.dense_tflops(Precision::Fp32), Some(67.0));
        let nvlink = model.nvlink.unwrap();
        assert_eq!(nvlink.bytes_per_second_per_direction(), 450e9);
        assert_eq!(nvlink.label(), "NVLink 4 x18");
        assert_eq!(model.pcie.generation, 5);
        // The A100 datasheet prints dense rates.
        let a100 = find("NVIDIA A100-SXM4-80GB").unwrap();
        assert_eq!(a100.dense_tflops(Precision::Bf16), Some(312.0));
    }

    #[test]
    fn names_match_exactly_ignoring_case_and_spaces() {
        assert!(find(" nvidia h200 ").is_some());
        assert!(find("NVIDIA H200 NVL").is_some_and(|model| model.model == "H200 NVL"));
        assert!(find("NVIDIA H20").is_none());
        assert!(find("NVIDIA GeForce RTX 4090").is_none());
        assert!(find("NVIDIA H100 80GB HBM3").is_some_and(|model| model.model == "H100 SXM"));
    }

    #[test]
    fn a_broken_table_is_an_error_naming_the_file() {
        let error = parse_table(r#"{"about": "x", "models": [{"model": "X"}]}"#).unwrap_err();
        assert!(
            error.starts_with("gpu-models.json: missing field"),
            "{error}"
        );
        assert!(parse_table(r#"{"about": "x", "models": [], "extra": 1}"#).is_err());
    }
}
