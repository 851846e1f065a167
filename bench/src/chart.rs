//! PNG chart of a benchmark result: throughput and p99 latency against
//! concurrency (W1) and against ledger size (W4).

use std::sync::OnceLock;

use anyhow::anyhow;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value as Json;

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 800;
const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

const BLUE_C: RGBColor = RGBColor(31, 119, 180);
const ORANGE_C: RGBColor = RGBColor(255, 127, 14);
const GREEN_C: RGBColor = RGBColor(44, 160, 44);
const RED_C: RGBColor = RGBColor(214, 39, 40);
const PURPLE_C: RGBColor = RGBColor(148, 103, 189);
const GREY_C: RGBColor = RGBColor(90, 90, 90);

/// Draws throughput and p99 latency against concurrency (W1) and against
/// ledger size (W4) into one PNG.
pub(crate) fn render(results: &serde_json::Value, path: &std::path::Path) -> anyhow::Result<()> {
    render_with(results, path, font_available())
}

/// Registers DejaVu Sans as plotters' "sans-serif" family, once per process.
/// Returns whether text can be drawn.
fn font_available() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        let Ok(bytes) = std::fs::read(FONT_PATH) else {
            return false;
        };
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
    })
}

fn render_with(results: &Json, path: &std::path::Path, text: bool) -> anyhow::Result<()> {
    let panels = panels(results);
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow!("filling chart background: {e}"))?;
    let areas = root.split_evenly((2, 2));
    for (area, panel) in areas.iter().zip(&panels) {
        draw_panel(area, panel, text)
            .map_err(|e| anyhow!("drawing panel {:?}: {e}", panel.title))?;
    }
    root.present()
        .map_err(|e| anyhow!("writing chart {}: {e}", path.display()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum XScale {
    /// Concurrency: ticks at the measured client counts.
    Clients,
    /// Ledger size: ticks at the measured row counts, shown as 10k/1M.
    Rows,
}

#[derive(Debug)]
struct Series {
    label: &'static str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

#[derive(Debug)]
struct Reference {
    label: &'static str,
    color: RGBColor,
    value: f64,
}

#[derive(Debug)]
struct Panel {
    title: &'static str,
    workload: &'static str,
    x_desc: &'static str,
    y_desc: &'static str,
    x_scale: XScale,
    /// Every measured x value of the workload, ascending; shared by its panels.
    x_ticks: Vec<f64>,
    series: Vec<Series>,
    references: Vec<Reference>,
}

impl Panel {
    fn y_max(&self) -> f64 {
        self.series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(self.references.iter().map(|r| r.value))
            .fold(0.0, f64::max)
    }

    fn has_series_data(&self) -> bool {
        self.series.iter().any(|s| !s.points.is_empty())
    }

    fn has_anything(&self) -> bool {
        self.has_series_data() || !self.references.is_empty()
    }
}

/// A finite number at `key`, or `None` when missing, null or not a number.
fn num(v: &Json, key: &str) -> Option<f64> {
    v.get(key).and_then(Json::as_f64).filter(|x| x.is_finite())
}

/// `(x, y)` pairs from an array of objects, keeping rows where both exist and
/// `x` is positive (the x axes are logarithmic) and `y` is not negative.
fn pairs(rows: &[Json], x_key: &str, y_key: &str) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| Some((num(r, x_key)?, num(r, y_key)?)))
        .filter(|&(x, y)| x > 0.0 && y >= 0.0)
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

/// The distinct positive values at `key`, ascending.
fn xs(rows: &[Json], key: &str) -> Vec<f64> {
    let mut xs: Vec<f64> = rows
        .iter()
        .filter_map(|r| num(r, key))
        .filter(|&x| x > 0.0)
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    xs
}

fn array(v: Option<&Json>) -> &[Json] {
    v.and_then(Json::as_array).map_or(&[], Vec::as_slice)
}

fn panels(results: &Json) -> [Panel; 4] {
    let w1 = array(results.pointer("/w1/closed"));
    let w4 = array(results.get("w4"));
    let baseline = |key: &str, label: &'static str| -> Vec<Reference> {
        results
            .pointer("/baselines/before/L_submit")
            .and_then(|b| num(b, key))
            .filter(|&value| value >= 0.0)
            .map(|value| Reference {
                label,
                color: RED_C,
                value,
            })
            .into_iter()
            .collect()
    };
    let w1_x = xs(w1, "clients");
    let w4_x = xs(w4, "rows");

    [
        Panel {
            title: "W1 submit throughput vs concurrency",
            x_desc: "clients (log scale)",
            y_desc: "req/s",
            workload: "W1",
            x_scale: XScale::Clients,
            x_ticks: w1_x.clone(),
            series: vec![Series {
                label: "ledger submit req/s",
                color: BLUE_C,
                points: pairs(w1, "clients", "rps"),
            }],
            references: baseline("tps", "pgbench L_submit"),
        },
        Panel {
            title: "W1 submit p99 latency vs concurrency",
            x_desc: "clients (log scale)",
            y_desc: "p99 ms",
            workload: "W1",
            x_scale: XScale::Clients,
            x_ticks: w1_x,
            series: vec![Series {
                label: "submit p99 ms",
                color: ORANGE_C,
                points: pairs(w1, "clients", "p99_ms"),
            }],
            references: baseline("p99_ms", "pgbench L_submit p99"),
        },
        Panel {
            title: "W4 throughput vs preloaded terminal rows",
            x_desc: "preloaded terminal rows (log scale)",
            y_desc: "per second",
            workload: "W4",
            x_scale: XScale::Rows,
            x_ticks: w4_x.clone(),
            series: vec![
                Series {
                    label: "submit req/s",
                    color: BLUE_C,
                    points: pairs(w4, "rows", "submit_rps"),
                },
                Series {
                    label: "end-to-end applied/s",
                    color: GREEN_C,
                    points: pairs(w4, "rows", "e2e_applied_per_s"),
                },
            ],
            references: Vec::new(),
        },
        Panel {
            title: "W4 submit p99 latency vs preloaded terminal rows",
            x_desc: "preloaded terminal rows (log scale)",
            y_desc: "p99 ms",
            workload: "W4",
            x_scale: XScale::Rows,
            x_ticks: w4_x,
            series: vec![Series {
                label: "submit p99 ms",
                color: PURPLE_C,
                points: pairs(w4, "rows", "submit_p99_ms"),
            }],
            references: Vec::new(),
        },
    ]
}

fn format_count(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    if (scaled - scaled.round()).abs() < 1e-9 {
        format!("{scaled:.0}{suffix}")
    } else {
        format!("{scaled:.1}{suffix}")
    }
}

fn format_x(scale: XScale, v: f64) -> String {
    match scale {
        XScale::Clients if (v - v.round()).abs() < 1e-9 => format!("{v:.0}"),
        XScale::Clients => format!("{v:.2}"),
        XScale::Rows => format_count(v),
    }
}

/// Axis tick: whole numbers without decimals, others with at most two.
fn format_tick(v: f64) -> String {
    if v.abs() >= 10_000.0 {
        format_count(v)
    } else if (v - v.round()).abs() < 1e-6 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Data label: three significant figures or so.
fn format_value(v: f64) -> String {
    let a = v.abs();
    if a >= 10_000.0 {
        format_count(v)
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

type PanelResult = Result<(), Box<dyn std::error::Error>>;

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    panel: &Panel,
    text: bool,
) -> PanelResult {
    let (x_lo, x_hi, ticks) = match (panel.x_ticks.first(), panel.x_ticks.last()) {
        (Some(&lo), Some(&hi)) => (lo / 1.6, hi * 1.6, panel.x_ticks.clone()),
        _ => match panel.x_scale {
            XScale::Clients => (1.0 / 1.6, 64.0 * 1.6, vec![1.0, 4.0, 16.0, 64.0]),
            XScale::Rows => (1e4 / 1.6, 1e6 * 1.6, vec![1e4, 1e5, 1e6]),
        },
    };
    let y_max = panel.y_max();
    let legend_rows =
        panel.series.iter().filter(|s| !s.points.is_empty()).count() + panel.references.len();
    // Headroom above the data for the legend box and the value labels.
    let headroom = 1.2 + 0.12 * f64::from(u8::try_from(legend_rows).unwrap_or(u8::MAX));
    let y_hi = if y_max > 0.0 { y_max * headroom } else { 1.0 };

    let mut builder = ChartBuilder::on(area);
    builder.margin(12);
    if text {
        builder
            .caption(panel.title, ("sans-serif", 20).into_font())
            .x_label_area_size(48)
            .y_label_area_size(64);
    } else {
        builder.margin_top(24);
    }
    let mut chart =
        builder.build_cartesian_2d((x_lo..x_hi).log_scale().with_key_points(ticks), 0.0..y_hi)?;

    let scale = panel.x_scale;
    let x_fmt = move |v: &f64| format_x(scale, *v);
    let blank = !panel.has_anything();
    let y_fmt = |v: &f64| {
        if blank {
            String::new()
        } else {
            format_tick(*v)
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .y_labels(8)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt);
    if text {
        mesh.x_desc(panel.x_desc)
            .y_desc(panel.y_desc)
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15));
    }
    mesh.draw()?;

    if !text {
        let frame = [
            (x_lo, 0.0),
            (x_hi, 0.0),
            (x_hi, y_hi),
            (x_lo, y_hi),
            (x_lo, 0.0),
        ];
        chart.draw_series(std::iter::once(PathElement::new(
            frame,
            GREY_C.stroke_width(1),
        )))?;
    }

    for s in panel.series.iter().filter(|s| !s.points.is_empty()) {
        let style = s.color.stroke_width(2);
        let series = chart.draw_series(LineSeries::new(s.points.iter().copied(), style))?;
        if text {
            series
                .label(s.label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 22, y)], style));
        }
    }

    for r in &panel.references {
        let style = r.color.stroke_width(2);
        let series = chart.draw_series(DashedLineSeries::new(
            [(x_lo, r.value), (x_hi, r.value)],
            10,
            6,
            style,
        ))?;
        if text {
            series
                .label(r.label)
                .legend(move |(x, y)| DashedPathElement::new([(x, y), (x + 22, y)], 6, 4, style));
        }
    }

    for s in &panel.series {
        chart.draw_series(
            s.points
                .iter()
                .map(|&p| Circle::new(p, 4, s.color.filled())),
        )?;
        if text {
            let font = ("sans-serif", 13)
                .into_font()
                .color(&s.color)
                .pos(Pos::new(HPos::Center, VPos::Bottom));
            chart.draw_series(s.points.iter().map(|&p| {
                EmptyElement::at(p) + Text::new(format_value(p.1), (0, -7), font.clone())
            }))?;
        }
    }

    if text {
        if !panel.has_series_data() {
            let (w, h) = area.dim_in_pixel();
            let style = ("sans-serif", 18)
                .into_font()
                .color(&GREY_C)
                .pos(Pos::new(HPos::Center, VPos::Center));
            let cx = i32::try_from(w / 2).unwrap_or(0);
            let cy = i32::try_from(h / 2).unwrap_or(0);
            let note = format!("no {} data in this run", panel.workload);
            area.draw_text(&note, &style, (cx, cy))?;
        }
        if panel.has_anything() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.4))
                .label_font(("sans-serif", 14))
                .draw()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Json {
        json!({
            "w1": {"closed": [
                {"clients": 1, "rps": 812.0, "p50_ms": 1.1, "p99_ms": 2.3, "p999_ms": 4.0},
                {"clients": 4, "rps": 2100.0, "p50_ms": 1.6, "p99_ms": 4.1, "p999_ms": 7.0},
                {"clients": 16, "rps": 3300.0, "p50_ms": 4.2, "p99_ms": 11.5, "p999_ms": 20.0},
                {"clients": 64, "rps": 3450.0, "p50_ms": 17.0, "p99_ms": 48.0, "p999_ms": 90.0}
            ]},
            "baselines": {"before": {
                "L_submit": {"tps": 2400.0, "p99_ms": 30.0},
                "L_raw": {"tps": 2600.0}
            }},
            "w4": [
                {"rows": 10000, "submit_rps": 2000.0, "submit_p99_ms": 40.0,
                 "e2e_applied_per_s": 900.0},
                {"rows": 100000, "submit_rps": 1900.0, "submit_p99_ms": 44.0,
                 "e2e_applied_per_s": 870.0},
                {"rows": 1000000, "submit_rps": 1750.0, "submit_p99_ms": 52.0,
                 "e2e_applied_per_s": 820.0}
            ]
        })
    }

    fn out(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("ledger-bench-chart-{}-{name}", std::process::id()))
    }

    /// Checks the file is a 1200x800 PNG, then removes it.
    fn assert_png(path: &std::path::Path) {
        let bytes = std::fs::read(path).unwrap();
        std::fs::remove_file(path).unwrap();
        assert!(
            bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
            "not a PNG: {}",
            path.display()
        );
        assert_eq!(bytes[16..24], [0, 0, 4, 176, 0, 0, 3, 32], "not 1200x800");
    }

    #[test]
    fn full_results_render() {
        let path = out("full.png");
        render(&sample(), &path).unwrap();
        assert_png(&path);
    }

    #[test]
    fn partial_results_render() {
        let mut v = sample();
        v.as_object_mut().unwrap().remove("w4");
        v["w1"]["closed"][2]["rps"] = Json::Null;
        v["w1"]["closed"][3] = json!({"clients": 64});
        v["baselines"]["before"]["L_submit"]["p99_ms"] = Json::Null;
        let path = out("partial.png");
        render(&v, &path).unwrap();
        assert_png(&path);

        v.as_object_mut().unwrap().remove("w1");
        let path = out("baseline-only.png");
        render(&v, &path).unwrap();
        assert_png(&path);
    }

    #[test]
    fn odd_shapes_render() {
        for (i, v) in [
            json!(null),
            json!({}),
            json!({"w1": {"closed": "nope"}, "w4": {"rows": 1}}),
            json!({"w1": {"closed": [{"clients": 0, "rps": 5.0}, {"clients": -3, "rps": 1.0}]}}),
            json!({"w4": [{"rows": 1000, "submit_rps": 0.0, "submit_p99_ms": 0.0}]}),
            json!({"w1": {"closed": [{"clients": 1e308, "rps": 1e308, "p99_ms": 1e-300}]}}),
            json!({"w4": [{"rows": 5e-324, "submit_rps": 1.0}, {"rows": "10", "submit_rps": 2}]}),
        ]
        .iter()
        .enumerate()
        {
            let path = out(&format!("odd-{i}.png"));
            render(v, &path).unwrap();
            assert_png(&path);
        }
    }

    #[test]
    fn renders_without_text() {
        let path = out("no-text.png");
        render_with(&sample(), &path, false).unwrap();
        assert_png(&path);
        let empty = out("no-text-empty.png");
        render_with(&json!({}), &empty, false).unwrap();
        assert_png(&empty);
    }
}
