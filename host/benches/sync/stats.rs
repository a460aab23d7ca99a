//! Medians, percentiles and the ratio tables the benchmark prints.

use std::time::Duration;

/// The summary of one series of samples (milliseconds, or plain ratios).
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

/// The value at quantile `q` (0..=1) of sorted `v`, linearly interpolated.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

pub fn summarize(values: &[f64]) -> Summary {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    Summary {
        median: quantile(&v, 0.5),
        p10: quantile(&v, 0.1),
        p90: quantile(&v, 0.9),
        min: v.first().copied().unwrap_or(f64::NAN),
        max: v.last().copied().unwrap_or(f64::NAN),
        n: v.len(),
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Per-round ratios `a[i] / b[i]` (the two were measured in the same round).
pub fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

/// `median [p10–p90]` with a precision that suits the magnitude.
pub fn fmt_summary(s: &Summary) -> String {
    format!("{} [{}–{}]", fmt_num(s.median), fmt_num(s.p10), fmt_num(s.p90))
}

pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}
