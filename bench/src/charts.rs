//! SVG charts of benchmark results, drawn with `plotters` (SVG backend only): grouped bars
//! ([`BarChart`]) and line charts with one or several panels ([`LineChart`]).
//!
//! Every chart has a title, labelled axes with units and a legend; axes may be logarithmic.
//! Text is laid out with plotters' built-in font metrics, so no font is needed to draw.

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Width and height of one chart panel, in pixels.
const PANEL: (u32, u32) = (640, 420);

/// Colours of series, in order (colour-blind safe: Okabe–Ito, then greys).
const PALETTE: [RGBColor; 16] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(120, 60, 20),
    RGBColor(0, 0, 0),
    RGBColor(150, 150, 150),
    RGBColor(240, 228, 66),
    // The report's one-thread chart has emm's resources and up to a dozen peers' rows: past
    // ten, colours repeated and two series read as one.
    RGBColor(128, 0, 32),
    RGBColor(0, 0, 128),
    RGBColor(128, 128, 0),
    RGBColor(0, 128, 128),
    RGBColor(117, 112, 179),
    RGBColor(231, 41, 138),
];

/// A legend row's height in pixels (13-point labels).
const LEGEND_ROW_PX: f64 = 17.0;

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Grouped bars: one group per category (a workload), one bar per series (a resource).
#[derive(Debug, Clone)]
pub struct BarChart {
    /// The title.
    pub title: String,
    /// The y axis label, with its unit.
    pub y_label: String,
    /// Whether the y axis is logarithmic.
    pub log_y: bool,
    /// Category names along the x axis.
    pub groups: Vec<String>,
    /// (series name, one value per group; `None` where there is none).
    pub series: Vec<(String, Vec<Option<f64>>)>,
}

/// One panel of a [`LineChart`].
#[derive(Debug, Clone)]
pub struct Panel {
    /// The panel's title.
    pub title: String,
    /// (series name, points).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Where a chart's legend goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Legend {
    /// Top left corner of the plot.
    UpperLeft,
    /// Top right corner.
    UpperRight,
    /// Middle of the right side.
    MiddleRight,
    /// Bottom right corner.
    LowerRight,
}

impl Legend {
    fn position(self) -> SeriesLabelPosition {
        match self {
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
            Legend::UpperRight => SeriesLabelPosition::UpperRight,
            Legend::MiddleRight => SeriesLabelPosition::MiddleRight,
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
        }
    }
}

/// Line charts sharing axes labels: one panel or several side by side.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// Where the legend goes.
    pub legend: Legend,
    /// The x axis label, with its unit.
    pub x_label: String,
    /// The y axis label, with its unit.
    pub y_label: String,
    /// Whether the x axis is logarithmic.
    pub log_x: bool,
    /// Whether the y axis is logarithmic.
    pub log_y: bool,
    /// The panels, left to right.
    pub panels: Vec<Panel>,
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn err(e: impl std::fmt::Display) -> String {
    format!("drawing a chart: {e}")
}

/// The range of `values` padded for an axis: a logarithmic range spans whole decades when
/// `decades`, else the data and a little more.
fn axis_range(values: impl Iterator<Item = f64>, log: bool, decades: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log && !decades {
        (lo / 1.2, hi * 1.2)
    } else if log {
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf(hi.log10().ceil().max(lo.log10().floor() + 1.0)),
        )
    } else {
        (lo.min(0.0), if hi > lo.min(0.0) { hi * 1.08 } else { 1.0 })
    }
}

/// A short number for tick labels: 1500 → 1.5k, 2e6 → 2M.
pub fn short(v: f64) -> String {
    let a = v.abs();
    let (x, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = if x.fract().abs() < 1e-9 || x.abs() >= 10.0 {
        format!("{x:.0}")
    } else {
        // Two decimals at most, trailing zeros dropped: 0.25, 0.3, 1.5.
        let t = format!("{x:.2}");
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    format!("{s}{suffix}")
}

impl BarChart {
    /// The chart as an SVG document.
    ///
    /// # Errors
    ///
    /// A description when plotters cannot lay it out.
    pub fn to_svg(&self) -> Result<String, String> {
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (900, self.height())).into_drawing_area();
            root.fill(&WHITE).map_err(err)?;
            self.draw(&root)?;
            root.present().map_err(err)?;
        }
        Ok(svg)
    }

    /// Taller with many series, so that the legend leaves the bars most of the plot.
    fn height(&self) -> u32 {
        480 + 17 * self.series.len().saturating_sub(6) as u32
    }

    fn draw(&self, root: &Area<'_>) -> Result<(), String> {
        let values = self
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().flatten().copied());
        let (lo, hi) = axis_range(values, self.log_y, true);
        // Room above the tallest bar for the legend, which grows a row a series: the share of
        // the plot it takes is kept free at the top of the axis.
        let plot_px = f64::from(self.height()) - 110.0;
        let legend = ((LEGEND_ROW_PX * self.series.len() as f64 + 24.0) / plot_px).clamp(0.25, 0.7);
        let hi = if self.log_y {
            lo * (hi / lo).powf(1.0 / (1.0 - legend))
        } else {
            lo + (hi - lo) / (1.0 - legend)
        };
        let n_groups = self.groups.len().max(1);
        let n_series = self.series.len().max(1);
        let groups = self.groups.clone();
        let x_fmt = move |x: &f64| {
            let k = x.floor();
            if (x - k - 0.5).abs() < 1e-6 && k >= 0.0 {
                groups.get(k as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let mut builder = ChartBuilder::on(root);
        builder
            .caption(&self.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64);
        let width = 0.8 / n_series as f64;
        let rects = |floor: f64| {
            let mut out = Vec::new();
            for (s, (_, vals)) in self.series.iter().enumerate() {
                for (g, v) in vals.iter().enumerate() {
                    if let Some(v) = v.filter(|v| *v > floor) {
                        let x0 = g as f64 + 0.1 + s as f64 * width;
                        out.push((s, [(x0, floor), (x0 + width, v)]));
                    }
                }
            }
            out
        };
        let x = 0f64..n_groups as f64;
        if self.log_y {
            let chart = builder.build_cartesian_2d(x, (lo..hi).log_scale());
            self.draw_bars(chart.map_err(err)?, n_groups, &x_fmt, rects(lo))
        } else {
            let chart = builder.build_cartesian_2d(x, lo..hi);
            self.draw_bars(chart.map_err(err)?, n_groups, &x_fmt, rects(lo))
        }
    }

    /// The mesh, the bars of every series and the legend, on a linear or a logarithmic y axis.
    fn draw_bars<'a, X, Y>(
        &self,
        mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
        n_groups: usize,
        x_fmt: &dyn Fn(&f64) -> String,
        rects: Vec<(usize, [(f64, f64); 2])>,
    ) -> Result<(), String>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
        Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(2 * n_groups + 1)
            .x_label_formatter(x_fmt)
            .y_label_formatter(&|y| short(*y))
            .y_desc(&self.y_label)
            .draw()
            .map_err(err)?;
        for (s, (name, _)) in self.series.iter().enumerate() {
            let c = colour(s);
            let mine: Vec<_> = rects.iter().filter(|(k, _)| *k == s).collect();
            chart
                .draw_series(mine.iter().map(|(_, r)| Rectangle::new(*r, c.filled())))
                .map_err(err)?
                .label(format!("{name}   "))
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(err)
    }
}

impl LineChart {
    /// The chart as an SVG document, panels side by side.
    ///
    /// # Errors
    ///
    /// A description when plotters cannot lay it out.
    pub fn to_svg(&self) -> Result<String, String> {
        let n = self.panels.len().max(1);
        let mut svg = String::new();
        {
            let size = (PANEL.0 * n as u32, PANEL.1);
            let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
            root.fill(&WHITE).map_err(err)?;
            let areas = root.split_evenly((1, n));
            for (panel, area) in self.panels.iter().zip(areas.iter()) {
                self.draw_panel(panel, area)?;
            }
            root.present().map_err(err)?;
        }
        Ok(svg)
    }

    fn draw_panel(&self, panel: &Panel, area: &Area<'_>) -> Result<(), String> {
        let xs = panel.series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
        let ys = panel.series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1));
        let (x0, x1) = axis_range(xs, self.log_x, false);
        let (y0, y1) = axis_range(ys, self.log_y, true);
        // Room above the data for the legend.
        let y1 = if self.log_y {
            y1 * 10.0
        } else {
            y0 + (y1 - y0) * 1.45
        };
        let mut builder = ChartBuilder::on(area);
        builder
            .caption(&panel.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64);
        macro_rules! finish {
            ($x:expr, $y:expr) => {{
                let mut chart = builder.build_cartesian_2d($x, $y).map_err(err)?;
                chart
                    .configure_mesh()
                    .x_desc(&self.x_label)
                    .y_desc(&self.y_label)
                    .x_label_formatter(&|x| short(*x))
                    .y_label_formatter(&|y| short(*y))
                    .draw()
                    .map_err(err)?;
                for (i, (name, points)) in panel.series.iter().enumerate() {
                    let c = colour(i);
                    let pts: Vec<(f64, f64)> = points
                        .iter()
                        .copied()
                        .filter(|&(x, y)| (!self.log_x || x > 0.0) && (!self.log_y || y > 0.0))
                        .collect();
                    chart
                        .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                        .map_err(err)?
                        .label(format!("{name}   "))
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                        });
                    if pts.len() <= 40 {
                        chart
                            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                            .map_err(err)?;
                    }
                }
                chart
                    .configure_series_labels()
                    .position(self.legend.position())
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .label_font(("sans-serif", 12))
                    .draw()
                    .map_err(err)?;
            }};
        }
        match (self.log_x, self.log_y) {
            (false, false) => finish!(x0..x1, y0..y1),
            (true, false) => finish!((x0..x1).log_scale(), y0..y1),
            (false, true) => finish!(x0..x1, (y0..y1).log_scale()),
            (true, true) => finish!((x0..x1).log_scale(), (y0..y1).log_scale()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_series_get_distinct_colours_and_a_taller_chart() {
        let series: Vec<(String, Vec<Option<f64>>)> = (0..14)
            .map(|k| {
                (
                    format!("s{k}"),
                    vec![Some(30.0 * (k + 1) as f64), Some(5e4)],
                )
            })
            .collect();
        let chart = BarChart {
            title: "t".into(),
            y_label: "ns".into(),
            log_y: true,
            groups: vec!["W1".into(), "W2".into()],
            series,
        };
        assert!(chart.height() > 480);
        let colours: std::collections::HashSet<_> = (0..14).map(colour).collect();
        assert_eq!(colours.len(), 14, "a colour repeats among 14 series");
        let svg = chart.to_svg().unwrap();
        if let Ok(path) = std::env::var("EMM_CHART_PREVIEW") {
            std::fs::write(path, &svg).unwrap();
        }
    }

    #[test]
    fn charts_carry_their_labels_and_legends() {
        let bars = BarChart {
            title: "ns per op".into(),
            y_label: "ns per operation".into(),
            log_y: true,
            groups: vec!["W1".into(), "W2".into()],
            series: vec![
                ("pool".into(), vec![Some(40.0), Some(35.0)]),
                ("rmm".into(), vec![Some(900.0), None]),
            ],
        }
        .to_svg()
        .unwrap();
        for text in ["ns per operation", "W1", "W2", "pool", "rmm", "<rect"] {
            assert!(bars.contains(text), "{text} missing");
        }
        let lines = LineChart {
            legend: Legend::UpperLeft,
            x_label: "threads".into(),
            y_label: "operations per second".into(),
            log_x: true,
            log_y: false,
            panels: vec![Panel {
                title: "W1".into(),
                series: vec![("sharded".into(), vec![(1.0, 1e6), (2.0, 2e6), (4.0, 3.5e6)])],
            }],
        }
        .to_svg()
        .unwrap();
        for text in ["threads", "operations per second", "sharded", "<polyline"] {
            assert!(lines.contains(text), "{text} missing");
        }
        assert_eq!(short(1500.0), "1.5k");
        assert_eq!(short(2e6), "2M");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(
            axis_range([3.0, 450.0].into_iter(), true, true),
            (1.0, 1000.0)
        );
    }
}
