//! The page's charts, as inline SVG written with maud (which escapes every label).
//!
//! Hand-written rather than `plotters`: the page needs three simple kinds (columns, horizontal
//! bars, a rug of ticks), and plotters' SVG backend lays text out with font metrics, which
//! means its `ttf` feature (font-kit and the system's fontconfig) or guessed sizes, plus a
//! dependency tree larger than this file. Here the browser sets the text, each bar carries its
//! label and value as data attributes (the page's tests read them), and the output is
//! byte-for-byte deterministic.

use maud::{html, Markup};

/// One column of a column chart (a histogram bin, a tree depth).
pub struct Column {
    /// Shown under the axis (every few columns when they are narrow).
    pub label: String,
    pub value: f64,
    /// Shown on hover.
    pub tip: String,
}

/// One bar of a horizontal bar chart (a feature).
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub tip: String,
}

const COLUMNS_WIDTH: f64 = 520.0;
const COLUMNS_HEIGHT: f64 = 240.0;
const BARS_WIDTH: f64 = 1100.0;
const BAR_ROW: f64 = 20.0;
/// Approximate width of one character of the 12 px labels, to size the label margin.
const CHAR_WIDTH: f64 = 6.8;
const LONGEST_LABEL: usize = 44;

/// Values as the page prints them: integers whole, others to four significant digits.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return if v.is_nan() { "–".into() } else if v > 0.0 { "∞".into() } else { "−∞".into() };
    }
    if v == v.trunc() && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let magnitude = v.abs().log10().floor();
    if !(-3.0..5.0).contains(&magnitude) {
        return format!("{v:.3e}");
    }
    let decimals = (3.0 - magnitude).max(0.0) as usize;
    let text = format!("{v:.decimals$}");
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text }
}

/// Axis ticks from 0: a step of 1, 2 or 5 times a power of ten giving about four intervals,
/// and the top of the axis (a multiple of the step at or above `max`). Whole steps for counts.
fn ticks(max: f64, counts: bool) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 1.0);
    }
    let raw = max / 4.0;
    let power = 10f64.powf(raw.log10().floor());
    let mut step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * power).find(|&s| s >= raw).unwrap_or(10.0 * power);
    if counts {
        step = step.max(1.0).round();
    }
    (step, (max / step).ceil() * step)
}

fn shorten(label: &str) -> String {
    if label.chars().count() <= LONGEST_LABEL {
        return label.to_string();
    }
    let kept: String = label.chars().take(LONGEST_LABEL - 1).collect();
    format!("{kept}…")
}

/// A column chart: `columns` left to right, heights from 0. `counts`: the values are counts
/// (whole ticks).
pub fn columns(columns: &[Column], x_title: &str, y_title: &str, counts: bool) -> Markup {
    let (left, right, top, bottom) = (52.0, 12.0, 12.0, 46.0);
    let (plot_w, plot_h) = (COLUMNS_WIDTH - left - right, COLUMNS_HEIGHT - top - bottom);
    let max = columns.iter().map(|c| c.value).fold(0.0, f64::max);
    let (step, axis_top) = ticks(max, counts);
    let y = |v: f64| top + plot_h * (1.0 - v / axis_top);
    let n = columns.len().max(1) as f64;
    let slot = plot_w / n;
    // About 34 px per label, on every 1st, 2nd, 4th, 5th, 10th… column so that evenly spaced
    // bins get round labels; the rest are labelled on hover only.
    let needed = (34.0 / slot).ceil() as usize;
    let label_every = [1usize, 2, 4, 5, 10, 20, 25, 50].into_iter().find(|&k| k >= needed).unwrap_or(needed.next_multiple_of(100));
    let tick_values: Vec<f64> = (0..=(axis_top / step).round() as usize).map(|k| k as f64 * step).collect();
    html! {
        svg.chart width=(COLUMNS_WIDTH) height=(COLUMNS_HEIGHT) viewBox=(format!("0 0 {COLUMNS_WIDTH} {COLUMNS_HEIGHT}")) role="img" aria-label=(y_title) {
            @for v in &tick_values {
                line.grid x1=(left) x2=(left + plot_w) y1=(y(*v)) y2=(y(*v)) {}
                text.tick x=(left - 6.0) y=(y(*v) + 4.0) text-anchor="end" { (number(*v)) }
            }
            @for (i, c) in columns.iter().enumerate() {
                @let x = left + slot * i as f64;
                rect.bar x=(x + slot * 0.08) y=(y(c.value)) width=((slot * 0.84).max(1.0)) height=(plot_h * c.value / axis_top) data-label=(c.label) data-value=(c.value) {
                    title { (c.tip) }
                }
                @if i % label_every == 0 {
                    text.tick x=(x + slot / 2.0) y=(top + plot_h + 16.0) text-anchor="middle" { (c.label) }
                }
            }
            line.axis x1=(left) x2=(left + plot_w) y1=(top + plot_h) y2=(top + plot_h) {}
            text.title x=(left + plot_w / 2.0) y=(COLUMNS_HEIGHT - 6.0) text-anchor="middle" { (x_title) }
            text.title x=(14) y=(top + plot_h / 2.0) text-anchor="middle" transform=(format!("rotate(-90 14 {})", top + plot_h / 2.0)) { (y_title) }
        }
    }
}

/// A horizontal bar chart, one row per bar in the order given, labels on the left.
pub fn bars(bars: &[Bar], value_title: &str, counts: bool) -> Markup {
    let longest = bars.iter().map(|b| shorten(&b.label).chars().count()).max().unwrap_or(0);
    let left = (longest as f64 * CHAR_WIDTH + 12.0).clamp(60.0, 320.0);
    let (right, top) = (64.0, 20.0);
    let height = top + BAR_ROW * bars.len() as f64 + 8.0;
    let plot_w = BARS_WIDTH - left - right;
    let max = bars.iter().map(|b| b.value).fold(0.0, f64::max);
    let (step, axis_top) = ticks(max, counts);
    let x = |v: f64| left + plot_w * v / axis_top;
    let tick_values: Vec<f64> = (0..=(axis_top / step).round() as usize).map(|k| k as f64 * step).collect();
    html! {
        svg.chart width=(BARS_WIDTH) height=(height) viewBox=(format!("0 0 {BARS_WIDTH} {height}")) role="img" aria-label=(value_title) {
            @for v in &tick_values {
                line.grid x1=(x(*v)) x2=(x(*v)) y1=(top - 4.0) y2=(height - 8.0) {}
                text.tick x=(x(*v)) y=(top - 8.0) text-anchor="middle" { (number(*v)) }
            }
            @for (i, b) in bars.iter().enumerate() {
                @let row_y = top + BAR_ROW * i as f64;
                text.label x=(left - 6.0) y=(row_y + 14.0) text-anchor="end" { (shorten(&b.label)) }
                rect.bar x=(left) y=(row_y + 3.0) width=(plot_w * b.value / axis_top) height=(BAR_ROW - 6.0) data-label=(b.label) data-value=(b.value) {
                    title { (b.tip) }
                }
                text.value x=(x(b.value) + 4.0) y=(row_y + 14.0) { (number(b.value)) }
            }
        }
    }
}

/// A strip with one tick per value, from the smallest to the largest (a lone value in the
/// middle).
pub fn rug(values: &[f32]) -> Markup {
    let (width, height, pad) = (360.0, 22.0, 6.0);
    let (lo, hi) = (values.first().copied().unwrap_or(0.0) as f64, values.last().copied().unwrap_or(0.0) as f64);
    let x = |v: f64| if hi > lo { pad + (width - 2.0 * pad) * (v - lo) / (hi - lo) } else { width / 2.0 };
    html! {
        svg.rug width=(width) height=(height) viewBox=(format!("0 0 {width} {height}")) role="img" aria-label="thresholds" {
            line.axis x1=(pad) x2=(width - pad) y1=(height - 4.0) y2=(height - 4.0) {}
            @for v in values {
                line.mark x1=(x(*v as f64)) x2=(x(*v as f64)) y1=(3) y2=(height - 4.0) data-value=(v) {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_naturally() {
        assert_eq!(number(40.0), "40");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(0.123456), "0.1235");
        assert_eq!(number(1234.5678), "1235");
        assert_eq!(number(12.5), "12.5");
        assert_eq!(number(0.0001234), "1.234e-4");
        assert_eq!(number(f64::NAN), "–");
        assert_eq!(number(f64::NEG_INFINITY), "−∞");
    }

    #[test]
    fn ticks_cover_the_maximum_in_round_steps() {
        assert_eq!(ticks(37.0, true), (10.0, 40.0));
        assert_eq!(ticks(3.0, true), (1.0, 3.0));
        assert_eq!(ticks(0.9, false), (0.5, 1.0));
        assert_eq!(ticks(0.0, true), (1.0, 1.0));
        let (step, top) = ticks(1834.4, false);
        assert_eq!((step, top), (500.0, 2000.0));
    }

    #[test]
    fn every_column_and_bar_is_drawn_with_its_value() {
        let cols: Vec<Column> = (0..50).map(|i| Column { label: i.to_string(), value: i as f64, tip: String::new() }).collect();
        let svg = columns(&cols, "x", "y", true).into_string();
        assert_eq!(svg.matches("<rect class=\"bar\"").count(), 50);
        assert!(svg.contains("data-value=\"49\""));
        let b = bars(&[Bar { label: "a".into(), value: 2.5, tip: String::new() }], "gain", false).into_string();
        assert_eq!(b.matches("<rect class=\"bar\"").count(), 1);
        assert!(b.contains("data-value=\"2.5\""));
        assert_eq!(rug(&[1.0, 2.0, 3.0]).into_string().matches("class=\"mark\"").count(), 3);
    }
}
