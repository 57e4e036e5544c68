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
        body!(builder.build_cartesian_2d((x0..x1).log_scale(), y0..y1)?);
    } else {
        body!(builder.build_cartesian_2d(x0..x1, y0..y1)?);
    }
    Ok(())
}
