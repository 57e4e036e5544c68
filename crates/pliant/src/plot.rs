//! Charts for the commands that have data people would rather look at than read: PNG or SVG by
//! file extension.
//!
//! Text is rendered with plotters' pure-Rust `ab_glyph` backend and DejaVu Sans embedded in the
//! binary (`assets/fonts/`, Bitstream Vera licence beside it), so no C font stack is linked and
//! charts look the same on every machine, with or without system fonts.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, bail};
use plotters::coord::Shift;
use plotters::prelude::*;

/// One line of a chart.
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
    /// Draw as dots instead of a line.
    pub dots: bool,
}

impl Series {
    /// A line.
    pub fn line(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            label: label.into(),
            points,
            dots: false,
        }
    }

    pub fn dots(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            label: label.into(),
            points,
            dots: true,
        }
    }
}

/// A line chart.
pub struct Chart<'a> {
    /// Title.
    pub title: &'a str,
    /// X axis label.
    pub x_label: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// The lines.
    pub series: Vec<Series>,
}

/// DejaVu Sans 2.37, unmodified (Debian's fonts-dejavu-core); licence in LICENSE-DejaVu.txt.
static FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");

fn ensure_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if !ok {
        bail!("the embedded chart font could not be loaded");
    }
    Ok(())
}

/// Draws `charts` stacked vertically into `path` (`.png` or `.svg`).
pub fn draw(path: &Path, charts: &[Chart<'_>]) -> Result<()> {
    ensure_font()?;
    let size = (1000, 420 * charts.len() as u32);
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            render(&root, charts)?;
            root.present().context("writing SVG")?;
        }
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            render(&root, charts)?;
            root.present().context("writing PNG")?;
        }
        _ => bail!("{}: charts are .png or .svg", path.display()),
    }
    Ok(())
}

fn render<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, charts: &[Chart<'_>]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let panels = root.split_evenly((charts.len(), 1));
    for (area, chart) in panels.iter().zip(charts) {
        render_one(area, chart).map_err(|e| anyhow!("drawing {}: {e}", chart.title))?;
    }
    Ok(())
}

fn bounds(chart: &Chart<'_>) -> ((f64, f64), (f64, f64)) {
    let pts = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| !p.0.is_nan() && !p.1.is_nan());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0.0f64, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return ((0.0, 1.0), (0.0, 1.0));
    }
    if x0 == x1 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    ((x0, x1), (y0, y1 * 1.05))
}

fn render_one<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart<'_>,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let ((x0, x1), (y0, y1)) = bounds(chart);
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(chart.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    let colors = [
        &BLUE,
        &RED,
        &GREEN,
        &MAGENTA,
        &CYAN,
        &BLACK,
        &RGBColor(255, 140, 0),
    ];
    macro_rules! body {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_desc(chart.x_label)
                .y_desc(chart.y_label)
                .x_label_formatter(&|x| tick(*x))
                .label_style(("sans-serif", 14))
                .draw()?;
            for (i, s) in chart.series.iter().enumerate() {
                let c = colors[i % colors.len()];
                if s.dots {
                    let r = if s.points.len() <= 10 { 7 } else { 2 };
                    ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, r, c.filled())))?
                        .label(s.label.clone())
                        .legend(move |(x, y)| Circle::new((x + 9, y), 4, c.filled()));
                    continue;
                }
                // A NaN point separates runs (box plots draw many shapes per series).
                let mut runs = s.points.split(|p| p.0.is_nan() || p.1.is_nan());
                if let Some(first) = runs.next() {
                    ctx.draw_series(LineSeries::new(first.iter().copied(), c.stroke_width(2)))?
                        .label(s.label.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c));
                }
                for run in runs {
                    ctx.draw_series(LineSeries::new(run.iter().copied(), c.stroke_width(2)))?;
                }
                if s.points.len() <= 40 && !s.points.iter().any(|p| p.0.is_nan()) {
                    ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
                }
            }
            if chart.series.len() > 1 {
                ctx.configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .label_font(("sans-serif", 14))
                    .draw()?;
            }
        }};
    }
    if chart.log_x && x0 > 0.0 {
        // The log axis's own ticks (every 1..9 × 10^k) overprinted one another past 10^7 bytes;
        // the sizes simulated, thinned to fit, are the ticks a reader wants.
        let ticks = log_ticks(chart, x0, x1);
        body!(builder.build_cartesian_2d((x0..x1).log_scale().with_key_points(ticks), y0..y1)?);
    } else {
        body!(builder.build_cartesian_2d(x0..x1, y0..y1)?);
    }
    Ok(())
}

/// The x values of a log axis's data, each at least 1/8 of the axis from the one before.
fn log_ticks(chart: &Chart<'_>, x0: f64, x1: f64) -> Vec<f64> {
    let mut xs: Vec<f64> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    xs.sort_by(f64::total_cmp);
    let gap = (x1 / x0).ln() / 8.0;
    let mut ticks: Vec<f64> = Vec::new();
    for x in xs {
        if ticks.last().is_none_or(|&t| (x / t).ln() >= gap) {
            ticks.push(x);
        }
    }
    ticks
}

/// A tick label a few characters wide: `16Mi` for a whole number of binary units (sizes are
/// given in them), `250K` for decimal ones (as `Capacity` names sizes, less its `B`), else three
/// significant digits with a unit.
fn tick(x: f64) -> String {
    if x.fract() == 0.0 && (1000.0..1e18).contains(&x) {
        let shown = pliant_cache::Capacity::Bytes(x as u64).to_string();
        let shown = shown.trim_end_matches('B');
        if shown.ends_with(|c: char| c.is_ascii_alphabetic()) {
            return shown.to_string();
        }
    }
    for (unit, name) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")] {
        if x.abs() >= unit {
            return format!("{}{name}", significant(x / unit));
        }
    }
    significant(x)
}

/// Three significant digits, without trailing zeros.
fn significant(x: f64) -> String {
    let digits = if x == 0.0 {
        0
    } else {
        (2 - x.abs().log10().floor() as i32).max(0) as usize
    };
    let s = format!("{x:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::{Chart, Series, log_ticks, tick};

    /// `pliant sim --size 1MiB,4MiB,16MiB,64MiB --plot`: "30000000.040000000.0…" overprinted.
    #[test]
    fn sim_plot_x_labels_are_short_and_do_not_crowd() {
        assert_eq!(tick(16_777_216.0), "16Mi");
        assert_eq!(tick(1000.0), "1K");
        assert_eq!(tick(1_504_318_813.0), "1.5G");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(12.5), "12.5");
        let points = [1u64 << 20, 1 << 21, 1 << 22, 1 << 24, 1 << 26]
            .iter()
            .map(|&x| (x as f64, 0.5))
            .collect();
        let chart = Chart {
            title: "t",
            x_label: "cache size (bytes)",
            y_label: "miss ratio",
            log_x: true,
            series: vec![Series::line("lru", points)],
        };
        let ticks = log_ticks(&chart, (1u64 << 20) as f64, (1u64 << 26) as f64);
        // 64× over the axis: ticks at least 64^(1/8) ≈ 1.68× apart; these are 2× or more.
        assert_eq!(ticks.len(), 5, "{ticks:?}");
        let dense: Vec<(f64, f64)> = (0..100).map(|i| (1000.0 + f64::from(i), 0.5)).collect();
        let chart = Chart {
            series: vec![Series::line("lru", dense)],
            ..chart
        };
        let n = log_ticks(&chart, 1000.0, 1099.0).len();
        assert!((5..=9).contains(&n), "{n} ticks of 100 points");
    }
}
