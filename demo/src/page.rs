//! `report.html` of the demo: one self-contained page (inline SVG charts drawn by `plotters`, inline CSS, no
//! script, no link to anything), so that it opens from a file on a machine without network.

use std::fmt::Write;

use plotters::coord::Shift;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordi32;
use plotters::prelude::*;

/// Tenants shown in the consumption chart: more labels than this no longer fit under 1,100 pixels.
pub const TENANTS_CHARTED: usize = 20;
/// Overshoots shown in the chart and the table.
pub const OVERSHOOTS_SHOWN: usize = 10;
/// Top of the consumption chart: a bar above it is cut there and labelled with its value, so that one tenant
/// far over its limit does not flatten every other bar.
const PERCENT_SHOWN_MAX: f64 = 250.0;
/// Chart size in pixels: the page is laid out for a 1,280-pixel-wide window.
const CHART_WIDTH_PX: u32 = 1_100;
const CHART_HEIGHT_PX: u32 = 380;
/// Height of one bar of a horizontal bar chart, in pixels.
const BAR_HEIGHT_PX: u32 = 32;
/// The light mesh lines: a hint, not a grid to read.
const LIGHT_MESH: RGBColor = RGBColor(242, 242, 242);

/// One (tenant, metric) billing row with a limit: consumption against the effective limit.
#[derive(Debug, Clone)]
pub struct Usage {
    pub tenant: String,
    pub metric: String,
    pub consumption: i64,
    pub effective_limit: i64,
}

/// Decisions recorded on one day of the month.
#[derive(Debug, Clone)]
pub struct DayDecisions {
    /// `YYYY-MM-DD`.
    pub day: String,
    pub allowed: u64,
    pub denied: u64,
}

/// Adjustments of one kind in the ledger.
#[derive(Debug, Clone)]
pub struct KindTotal {
    pub kind: String,
    pub adjustments: u64,
    pub amount: i64,
}

/// One overshoot: a window of a HARD policy over its effective limit (the sum of its adjustments).
#[derive(Debug, Clone)]
pub struct Overshoot {
    pub tenant: String,
    pub subject: Option<String>,
    pub metric: String,
    pub policy_id: String,
    pub window: String,
    pub amount: i64,
}

/// A step of the demo and what it did, in one line.
#[derive(Debug, Clone)]
pub struct Step {
    /// Its name (`stream`, `hook`, `reconcile`, ...).
    pub name: String,
    /// What it did, in one line.
    pub summary: String,
    /// How long it took.
    pub seconds: f64,
}

/// Everything the page shows.
#[derive(Debug, Clone)]
pub struct Page {
    pub month: String,
    pub steps: Vec<Step>,
    pub usage: Vec<Usage>,
    pub decisions: Vec<DayDecisions>,
    pub adjustments: Vec<KindTotal>,
    pub overshoots: Vec<Overshoot>,
    /// `audit why` of a denied request, in words.
    pub audit_why: String,
    /// The billing export's header and rows, as CSV cells.
    pub billing: Vec<Vec<String>>,
    /// The alerts written: tenant, metric, kind, policy, window, threshold, what was found, who wrote it.
    pub alerts: Vec<Vec<String>>,
    /// Commands to paste against the demo's ledger.
    pub commands: Vec<String>,
}

type ChartResult = Result<(), Box<dyn std::error::Error>>;

/// Width of one category (a tenant, a day, a bar) on an axis, in chart units: categories sit at multiples of it,
/// on an integer axis so that plotters puts one label exactly under each (its f64 axes pick their own ticks).
const SLOT: i32 = 100;

/// The axis of `n` categories, labelled at `every` one of them.
fn slots(n: usize, every: usize) -> WithKeyPoints<RangedCoordi32> {
    let n = n.max(1) as i32;
    let points = (0..n).step_by(every.max(1)).map(|i| i * SLOT).collect();
    (-SLOT / 2..n * SLOT - SLOT / 2).with_key_points(points)
}

/// The category at an axis position.
fn slot_index(x: &i32) -> usize {
    ((x + SLOT / 2).max(0) / SLOT) as usize
}

/// The page as HTML.
pub fn render(page: &Page) -> anyhow::Result<String> {
    let mut html = String::new();
    let title = format!("quota-ledger demo: {}", escape(&page.month));
    write!(html, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>")?;
    write!(html, "<style>{STYLE}</style></head><body>\n<h1>{title}</h1>\n")?;
    html.push_str(&steps_table(&page.steps));
    section(&mut html, "Consumption against the effective limit", USAGE_NOTE, &usage_chart(&page.usage)?);
    section(&mut html, "Decisions per day", DECISIONS_NOTE, &decisions_chart(&page.decisions)?);
    section(&mut html, "Adjustments by kind", ADJUSTMENTS_NOTE, &adjustments_chart(&page.adjustments)?);
    let overshoots = format!("{}{}", overshoots_chart(&page.overshoots)?, overshoots_table(&page.overshoots));
    section(&mut html, "Largest overshoots", OVERSHOOTS_NOTE, &overshoots);
    section(&mut html, "Why was a request denied? (audit why)", "", &format!("<pre>{}</pre>", escape(&page.audit_why)));
    section(&mut html, "Billing export", BILLING_NOTE, &billing_table(&page.billing));
    let columns = ["tenant", "metric", "kind", "policy", "window", "threshold", "found", "written by"];
    let alerts = table(&columns, &page.alerts, 5);
    section(&mut html, "Alerts (quota.alerts)", ALERTS_NOTE, &alerts);
    let commands: Vec<String> = page.commands.iter().map(|c| escape(c)).collect();
    section(&mut html, "Try it yourself", "", &format!("<pre>{}</pre>", commands.join("\n")));
    html.push_str("</body></html>\n");
    Ok(html)
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px auto;max-width:1140px;color:#222}\
h1{font-size:24px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;font-size:13px}td,th{padding:2px 10px;border-bottom:1px solid #eee;text-align:left}\
td.n{text-align:right;white-space:nowrap}pre{background:#f6f6f6;padding:8px;font-size:12px;overflow-x:auto}p.note{color:#555}";
const USAGE_NOTE: &str = "Each (tenant, metric) with a TENANT-scope MONTH policy, as a percentage of its effective \
limit (limit plus grants): above 100 % a HARD policy overshot (an enforcement miss, not billed) and a SOFT one is \
billed as overage. The tenants with the highest use are shown.";
const DECISIONS_NOTE: &str = "Every DecisionEvent of the month: those producers sent through Kafka and those the \
enforcement hook made through the library.";
const ADJUSTMENTS_NOTE: &str = "What reconciliation recorded, all runs together (number of adjustments; amounts in \
the table below the chart).";
const OVERSHOOTS_NOTE: &str = "Windows of HARD policies whose consumption passed the effective limit.";
const ALERTS_NOTE: &str = "What the enforcement hook wrote to the ledger and its outbox published to quota.alerts as \
an allowed request brought a window to 80, 90 or 100 % of its effective limit, and what the nightly reconcile found \
in the ledger: thresholds that usage sent through Kafka reached, reservations held past an hour, a subject's share, \
a new version's deny rate. Once per window, policy and threshold. Here, the first checks of the month's last day find \
the busiest tenants past their thresholds.";
/// Alerts listed on the page at most.
pub const ALERTS_SHOWN: usize = 40;
const BILLING_NOTE: &str = "The closed month, as finance receives it (the same rows are in the CSV and Parquet files).";

fn section(html: &mut String, title: &str, note: &str, body: &str) {
    html.push_str(&format!("<h2>{}</h2>\n", escape(title)));
    if !note.is_empty() {
        html.push_str(&format!("<p class=\"note\">{}</p>\n", escape(note)));
    }
    html.push_str(body);
    html.push('\n');
}

/// Text for HTML: `&`, `<`, `>` and quotes escaped.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn table(header: &[&str], rows: &[Vec<String>], numeric_from: usize) -> String {
    let mut html = String::from("<table><tr>");
    for h in header {
        html.push_str(&format!("<th>{}</th>", escape(h)));
    }
    html.push_str("</tr>\n");
    for row in rows {
        html.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = if i >= numeric_from { " class=\"n\"" } else { "" };
            html.push_str(&format!("<td{class}>{}</td>", escape(cell)));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    html
}

fn steps_table(steps: &[Step]) -> String {
    let rows: Vec<Vec<String>> =
        steps.iter().map(|s| vec![s.name.clone(), s.summary.clone(), format!("{:.1} s", s.seconds)]).collect();
    table(&["step", "what happened", "time"], &rows, 2)
}

fn overshoots_table(overshoots: &[Overshoot]) -> String {
    let rows: Vec<Vec<String>> = overshoots
        .iter()
        .map(|o| {
            vec![
                o.tenant.clone(),
                o.subject.clone().unwrap_or_default(),
                o.metric.clone(),
                o.policy_id.clone(),
                o.window.clone(),
                o.amount.to_string(),
            ]
        })
        .collect();
    table(&["tenant", "subject", "metric", "policy", "window", "overshoot"], &rows, 5)
}

fn billing_table(billing: &[Vec<String>]) -> String {
    let Some((header, rows)) = billing.split_first() else { return String::new() };
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(&header, rows, 3)
}

/// Draws a chart into an SVG string.
fn svg(height_px: u32, draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> ChartResult) -> anyhow::Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (CHART_WIDTH_PX, height_px)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("cannot draw a chart: {e}"))?;
        draw(&root).map_err(|e| anyhow::anyhow!("cannot draw a chart: {e}"))?;
        root.present().map_err(|e| anyhow::anyhow!("cannot draw a chart: {e}"))?;
    }
    Ok(out)
}

/// Colours of the metrics, in the order they are first met; and of allowed / denied.
const SERIES: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44), RGBColor(148, 103, 189)];
const ALLOWED: RGBColor = RGBColor(44, 160, 44);
const DENIED: RGBColor = RGBColor(214, 39, 40);

fn percent(u: &Usage) -> f64 {
    if u.effective_limit <= 0 { 0.0 } else { u.consumption as f64 * 100.0 / u.effective_limit as f64 }
}

/// The tenants with the highest use of any limit, most used first.
fn charted_tenants(usage: &[Usage]) -> Vec<String> {
    let mut peak: Vec<(String, f64)> = Vec::new();
    for u in usage {
        match peak.iter_mut().find(|(t, _)| *t == u.tenant) {
            Some((_, p)) => *p = p.max(percent(u)),
            None => peak.push((u.tenant.clone(), percent(u))),
        }
    }
    peak.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    peak.into_iter().take(TENANTS_CHARTED).map(|(t, _)| t).collect()
}

fn usage_chart(usage: &[Usage]) -> anyhow::Result<String> {
    let tenants = charted_tenants(usage);
    let mut metrics: Vec<&str> = Vec::new();
    for u in usage {
        if !metrics.contains(&u.metric.as_str()) {
            metrics.push(&u.metric);
        }
    }
    let shown: Vec<&Usage> = usage.iter().filter(|u| tenants.contains(&u.tenant)).collect();
    let top = shown.iter().map(|u| percent(u)).fold(120.0f64, f64::max).min(PERCENT_SHOWN_MAX) * 1.08;
    svg(CHART_HEIGHT_PX, |root| {
        let n = tenants.len().max(1) as i32;
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(slots(tenants.len(), 1), 0.0..top)?;
        let label = |x: &i32| tenants.get(slot_index(x)).cloned().unwrap_or_default();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&label)
            .y_desc("% of effective limit")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .light_line_style(LIGHT_MESH)
            .label_style(("sans-serif", 12))
            .draw()?;
        let width = SLOT * 8 / 10 / metrics.len().max(1) as i32;
        for (m, metric) in metrics.iter().enumerate() {
            let color = SERIES[m % SERIES.len()];
            let bars = shown.iter().filter(|u| u.metric == *metric).filter_map(|u| {
                let i = tenants.iter().position(|t| *t == u.tenant)? as i32;
                let left = i * SLOT - SLOT * 4 / 10 + m as i32 * width;
                Some(Rectangle::new(
                    [(left, 0.0), (left + width * 9 / 10, percent(u).min(PERCENT_SHOWN_MAX))],
                    color.filled(),
                ))
            });
            chart
                .draw_series(bars)?
                .label(*metric)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
        }
        // Bars cut at the top of the chart say how far they go.
        let cut = shown.iter().filter(|u| percent(u) > PERCENT_SHOWN_MAX).filter_map(|u| {
            let i = tenants.iter().position(|t| *t == u.tenant)? as i32;
            let m = metrics.iter().position(|m| *m == u.metric)? as i32;
            let at = (i * SLOT - SLOT * 4 / 10 + m * width, PERCENT_SHOWN_MAX * 1.06);
            Some(Text::new(format!("{:.0} %", percent(u)), at, ("sans-serif", 11)))
        });
        chart.draw_series(cut)?;
        chart
            .draw_series(LineSeries::new([(-SLOT / 2, 100.0), (n * SLOT - SLOT / 2, 100.0)], DENIED.stroke_width(2)))?
            .label("effective limit (100 %)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], DENIED.stroke_width(2)));
        legend(&mut chart)
    })
}

fn legend<'a, X: Ranged, Y: Ranged>(chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>) -> ChartResult {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 13))
        .draw()?;
    Ok(())
}

fn decisions_chart(days: &[DayDecisions]) -> anyhow::Result<String> {
    let top = days.iter().map(|d| d.allowed.max(d.denied)).max().unwrap_or(0).max(1) as f64 * 1.15;
    svg(CHART_HEIGHT_PX, |root| {
        // A label every few days: 31 dates do not fit side by side.
        let every = days.len().div_ceil(10);
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(slots(days.len(), every), 0.0..top)?;
        let label = |x: &i32| days.get(slot_index(x)).map(|d| d.day.clone()).unwrap_or_default();
        chart
            .configure_mesh()
            .x_label_formatter(&label)
            .y_desc("decisions")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .light_line_style(LIGHT_MESH)
            .label_style(("sans-serif", 12))
            .draw()?;
        for (name, color, value) in [
            ("allowed", ALLOWED, (|d: &DayDecisions| d.allowed) as fn(&DayDecisions) -> u64),
            ("denied", DENIED, |d: &DayDecisions| d.denied),
        ] {
            let points = days.iter().enumerate().map(move |(i, d)| (i as i32 * SLOT, value(d) as f64));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
        }
        legend(&mut chart)
    })
}

/// How a bar chart's value axis grows.
#[derive(Debug, Clone, Copy)]
enum Scale {
    Linear,
    /// For values of different units side by side (bytes beside requests).
    Log,
}

/// Horizontal bars, one per label, in the order given from the top, each with its value at its end.
fn horizontal_bars(bars: &[(String, f64)], x_desc: &str, color: RGBColor, scale: Scale) -> anyhow::Result<String> {
    let top = bars.iter().map(|b| b.1).fold(1.0f64, f64::max);
    let left_px = bars.iter().map(|b| b.0.chars().count()).max().unwrap_or(4) as u32 * 7 + 16;
    let height_px = 70 + BAR_HEIGHT_PX * bars.len().max(1) as u32;
    let bars = Bars { bars, x_desc, color, left_px: left_px.min(CHART_WIDTH_PX / 2) };
    svg(height_px, |root| match scale {
        Scale::Linear => bars.draw(root, 0.0..top * 1.15, 0.0),
        Scale::Log => bars.draw(root, (1.0..top * 3.0).log_scale(), 1.0),
    })
}

struct Bars<'a> {
    bars: &'a [(String, f64)],
    x_desc: &'a str,
    color: RGBColor,
    left_px: u32,
}

impl Bars<'_> {
    /// Draws on the value axis `x`, bars starting at `base`.
    fn draw<X>(&self, root: &DrawingArea<SVGBackend, Shift>, x: X, base: f64) -> ChartResult
    where
        X: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
    {
        let n = self.bars.len().max(1);
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(self.left_px)
            .build_cartesian_2d(x, slots(n, 1))?;
        // The first bar at the top.
        let label = |y: &i32| n.checked_sub(1 + slot_index(y)).and_then(|i| self.bars.get(i)).map(|b| b.0.clone());
        let label = |y: &i32| label(y).unwrap_or_default();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_label_formatter(&label)
            .x_desc(self.x_desc)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .light_line_style(LIGHT_MESH)
            .label_style(("sans-serif", 12))
            .draw()?;
        let y = |i: usize| (n - 1 - i) as i32 * SLOT;
        chart.draw_series(self.bars.iter().enumerate().map(|(i, (_, value))| {
            Rectangle::new(
                [(base, y(i) - SLOT * 35 / 100), (value.max(base), y(i) + SLOT * 35 / 100)],
                self.color.filled(),
            )
        }))?;
        chart.draw_series(self.bars.iter().enumerate().map(|(i, (_, value))| {
            Text::new(format!(" {value:.0}"), (value.max(base), y(i) - SLOT / 8), ("sans-serif", 12))
        }))?;
        Ok(())
    }
}

fn adjustments_chart(kinds: &[KindTotal]) -> anyhow::Result<String> {
    let bars: Vec<(String, f64)> = kinds.iter().map(|k| (k.kind.clone(), k.adjustments as f64)).collect();
    let chart = horizontal_bars(&bars, "adjustments", SERIES[0], Scale::Linear)?;
    let rows: Vec<Vec<String>> =
        kinds.iter().map(|k| vec![k.kind.clone(), k.adjustments.to_string(), k.amount.to_string()]).collect();
    Ok(format!("{chart}{}", table(&["kind", "adjustments", "amount"], &rows, 1)))
}

fn overshoots_chart(overshoots: &[Overshoot]) -> anyhow::Result<String> {
    let bars: Vec<(String, f64)> = overshoots
        .iter()
        .map(|o| {
            let subject = o.subject.as_deref().map(|s| format!("/{s}")).unwrap_or_default();
            (format!("{}{subject} {} ({})", o.tenant, o.metric, o.window), o.amount as f64)
        })
        .collect();
    horizontal_bars(&bars, "overshoot, in the metric's unit (log scale)", DENIED, Scale::Log)
}
