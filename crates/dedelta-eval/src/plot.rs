//! PNG plots (plotters, bitmap backend, text through ab_glyph).
//!
//! Text needs a TrueType font, read at run time from a Debian font package (DejaVu or
//! Liberation); without one the plots are skipped with a note. Choice: ab_glyph with a font
//! file rather than plotters' default `ttf` feature, which needs the system's fontconfig
//! libraries at build time.

use crate::runner::{ConfigResult, VersionRow};
use crate::EvalReport;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// Font files tried, in order.
pub const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

const FONT: &str = "sans-serif";
const W: u32 = 1100;

/// Registers the first font found, once per process; the path, or `None`.
fn font() -> Option<&'static str> {
    static FONT_PATH: OnceLock<Option<&'static str>> = OnceLock::new();
    *FONT_PATH.get_or_init(|| {
        for path in FONT_CANDIDATES {
            if let Ok(bytes) = std::fs::read(path) {
                // Leaked once per process: plotters keeps fonts for the process lifetime.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_ok() {
                    return Some(*path);
                }
            }
        }
        None
    })
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

const COLORS: [RGBColor; 16] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 0),
    RGBColor(120, 0, 120),
    RGBColor(0, 90, 60),
    RGBColor(200, 160, 0),
    RGBColor(90, 90, 200),
    RGBColor(160, 40, 90),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

/// Horizontal bars with a label after each bar.
fn bars(
    path: &Path,
    title: &str,
    x_desc: &str,
    items: &[(String, f64, String, RGBColor)],
) -> DrawResult {
    let n = items.len().max(1);
    let h = 120 + 34 * n as u32;
    let root = BitMapBackend::new(path, (W, h)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = items.iter().map(|i| i.1).fold(0.0, f64::max).max(1e-9);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(10)
        .build_cartesian_2d(0.0..max * 1.75, -0.6..(n as f64 - 0.4))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc(x_desc)
        .label_style((FONT, 14))
        .draw()?;
    for (i, (name, value, extra, c)) in items.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y - 0.35), (*value, y + 0.35)],
            c.filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("{name}  {extra}"),
            (*value + max * 0.01, y + 0.25),
            (FONT, 14),
        )))?;
    }
    root.present()?;
    Ok(())
}

fn lines(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> DrawResult {
    let root = BitMapBackend::new(path, (W, 650)).into_drawing_area();
    root.fill(&WHITE)?;
    let max_x = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let max_y = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(1e-9, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_x, 0.0..max_y * 1.08)?;
    // Versions are integers: ask for a label per version (plotters then picks a step of 1,
    // or 2, 5, ... on long series) and print only whole numbers.
    let version_label = |x: &f64| {
        if (x - x.round()).abs() < 1e-6 {
            format!("{}", x.round() as i64)
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_desc("version")
        .x_labels((max_x as usize + 1).min(25))
        .x_label_formatter(&version_label)
        .y_desc(y_desc)
        .label_style((FONT, 14))
        .draw()?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn series_by_config(
    results: &[ConfigResult],
    rows: &[VersionRow],
    value: impl Fn(&VersionRow) -> Option<f64>,
) -> Vec<(String, Vec<(f64, f64)>)> {
    results
        .iter()
        .map(|r| {
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|row| row.config == r.name)
                .filter_map(|row| value(row).map(|v| (row.version as f64, v)))
                .collect();
            (r.name.clone(), pts)
        })
        .filter(|s| !s.1.is_empty())
        .collect()
}

/// Draws `stored.png`, `cumulative.png`, `throughput.png` and `restore_speed_factor.png`
/// into `out`; returns notes for plots not drawn.
pub fn draw_all(out: &Path, report: &EvalReport) -> Vec<String> {
    if font().is_none() {
        return vec![format!(
            "plots: skipped, no font found (tried {}; apt-get install fonts-dejavu-core)",
            FONT_CANDIDATES.join(", ")
        )];
    }
    let mut notes = Vec::new();
    let results = &report.results;
    let stored: Vec<_> = results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            (
                r.name.clone(),
                mb(r.stored_bytes),
                format!("{:.1} MB, x{:.1}", mb(r.stored_bytes), r.total_factor),
                if r.kind == "peer" {
                    RGBColor(127, 127, 127)
                } else {
                    color(i)
                },
            )
        })
        .collect();
    let throughput: Vec<_> = results
        .iter()
        .map(|r| {
            (
                r.name.clone(),
                r.backup_mb_s,
                format!(
                    "backup {:.1} MB/s, restore {}",
                    r.backup_mb_s,
                    r.restore_mb_s
                        .map_or("n/a".to_string(), |v| format!("{v:.1} MB/s"))
                ),
                if r.kind == "peer" {
                    RGBColor(127, 127, 127)
                } else {
                    color(0)
                },
            )
        })
        .collect();
    let cumulative = series_by_config(results, &report.rows, |r| {
        Some(mb(r.cumulative_stored_bytes))
    });
    let dedelta: Vec<ConfigResult> = results
        .iter()
        .filter(|r| r.kind == "dedelta")
        .cloned()
        .collect();
    let rsf = series_by_config(&dedelta, &report.rows, |r| r.restore_speed_factor);
    let jobs: Vec<(&str, DrawResult)> = vec![
        (
            "stored.png",
            bars(
                &out.join("stored.png"),
                "Stored size (MB, less is better)",
                "MB stored",
                &stored,
            ),
        ),
        (
            "cumulative.png",
            lines(
                &out.join("cumulative.png"),
                "Cumulative stored size over versions",
                "MB stored",
                &cumulative,
            ),
        ),
        (
            "throughput.png",
            bars(
                &out.join("throughput.png"),
                "Backup throughput (MB/s of logical data; restore in the label)",
                "MB/s",
                &throughput,
            ),
        ),
        (
            "restore_speed_factor.png",
            lines(
                &out.join("restore_speed_factor.png"),
                "Restore speed factor per version (MB restored per container read, LRU restore cache)",
                "MB / container",
                &rsf,
            ),
        ),
    ];
    for (name, r) in jobs {
        if let Err(e) = r {
            notes.push(format!("plot {name}: not drawn ({e})"));
        }
    }
    notes
}
