//! `--chart FILE.svg`: throughput per strategy as bars, one panel per scenario, each bar green
//! when the audit found the run correct and red when it did not, with the damage written on it.
//!
//! Hand-written SVG: no font files, no drawing library; the viewer renders the text.

use std::fmt::Write as _;

use super::report::{RunReport, Verdict};
use super::strategy::Scenario;

const BAR: f64 = 56.0;
const GAP: f64 = 28.0;
const PLOT_HEIGHT: f64 = 220.0;
const PANEL_HEIGHT: f64 = PLOT_HEIGHT + 150.0;
const LEFT: f64 = 70.0;
const TOP: f64 = 64.0;

/// The SVG document for `runs`.
pub(crate) fn svg(runs: &[RunReport]) -> String {
    let panels: Vec<(Scenario, Vec<&RunReport>)> =
        [Scenario::Stock, Scenario::Counter, Scenario::Pause]
            .into_iter()
            .map(|s| {
                (
                    s,
                    runs.iter().filter(|r| r.scenario == s).collect::<Vec<_>>(),
                )
            })
            .filter(|(_, rs)| !rs.is_empty())
            .collect();
    let most_bars = panels.iter().map(|(_, rs)| rs.len()).max().unwrap_or(1);
    let width = (LEFT + most_bars as f64 * (BAR + GAP) + GAP + 20.0).max(640.0);
    let height = TOP + panels.len() as f64 * PANEL_HEIGHT + 30.0;
    let top_rate = runs
        .iter()
        .filter_map(|r| r.load.as_ref().map(|l| l.throughput()))
        .fold(1.0_f64, f64::max);
    let scale = nice_ceiling(top_rate);

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="22" font-size="16" font-weight="bold">distlock demo: requests per second, by strategy</text>"#
    );
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="40" fill="#555">green: the audit found the run correct; red: it did not (damage on the bar)</text>"##
    );
    for (i, (scenario, rs)) in panels.iter().enumerate() {
        let y0 = TOP + i as f64 * PANEL_HEIGHT;
        panel(&mut out, *scenario, rs, y0, scale, width);
    }
    out.push_str("</svg>\n");
    out
}

fn panel(
    out: &mut String,
    scenario: Scenario,
    runs: &[&RunReport],
    y0: f64,
    scale: f64,
    width: f64,
) {
    // Room above the plot for the panel title and the labels of a full-height bar.
    let base = y0 + 50.0 + PLOT_HEIGHT;
    let what = match scenario {
        Scenario::Stock => "stock: N items, N buyers (bar label: units oversold)",
        Scenario::Counter => "counter: N \"+1\" requests (bar label: updates lost)",
        Scenario::Pause => {
            "pause: the counter, one lock holder stopped past its lease (bar label: updates lost)"
        }
    };
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{:.1}" font-weight="bold">{}</text>"#,
        y0 + 10.0,
        escape(what)
    );
    for tick in 0..=4 {
        let value = scale * f64::from(tick) / 4.0;
        let y = base - PLOT_HEIGHT * f64::from(tick) / 4.0;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{value:.0}</text>"##,
            width - 20.0,
            LEFT - 6.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        out,
        r##"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle" fill="#555">requests / s</text>"##,
        base - PLOT_HEIGHT / 2.0
    );
    for (i, run) in runs.iter().enumerate() {
        let x = LEFT + GAP + i as f64 * (BAR + GAP);
        let rate = run.load.as_ref().map_or(0.0, |l| l.throughput());
        let h = (rate / scale * PLOT_HEIGHT).max(1.0);
        let (fill, mark) = match run.verdict() {
            Verdict::Correct | Verdict::RaceNotSeen => ("#2e7d32", "correct".to_string()),
            Verdict::WrongAsExpected | Verdict::Wrong => ("#c62828", damage(run)),
            Verdict::Failed => ("#757575", "failed".to_string()),
        };
        let _ = writeln!(
            out,
            r#"<rect x="{x:.1}" y="{:.1}" width="{BAR}" height="{h:.1}" fill="{fill}"><title>{}</title></rect>"#,
            base - h,
            escape(&format!(
                "{} {}: {rate:.0} req/s, {mark}",
                scenario.name(),
                run.strategy.label()
            ))
        );
        let cx = x + BAR / 2.0;
        let _ = writeln!(
            out,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{rate:.0}</text>"#,
            base - h - 18.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="{fill}" font-weight="bold">{}</text>"#,
            base - h - 4.0,
            escape(&mark)
        );
        let _ = writeln!(
            out,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="end" transform="rotate(-35 {cx:.1} {:.1})">{}</text>"#,
            base + 14.0,
            base + 14.0,
            escape(&format!("{} ×{}", run.strategy.label(), run.instances))
        );
    }
}

/// "12 oversold" or "340 lost".
fn damage(run: &RunReport) -> String {
    match &run.audit {
        Some(a) => match (a.oversold, a.lost_updates) {
            (Some(o), _) if o > 0 => format!("{o} oversold"),
            (_, Some(l)) if l != 0 => format!("{l} lost"),
            _ => "wrong".to_string(),
        },
        None => "wrong".to_string(),
    }
}

/// The smallest 1, 2 or 5 × 10^k at or above `x`: round numbers for the axis.
fn nice_ceiling(x: f64) -> f64 {
    let magnitude = 10f64.powf(x.max(1.0).log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|v| *v >= x)
        .unwrap_or(10.0 * magnitude)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_ceilings_are_round() {
        assert_eq!(nice_ceiling(730.0), 1000.0);
        assert_eq!(nice_ceiling(1000.0), 1000.0);
        assert_eq!(nice_ceiling(1200.0), 2000.0);
        assert_eq!(nice_ceiling(4100.0), 5000.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape(r#"a<b & "c">"#), "a&lt;b &amp; &quot;c&quot;&gt;");
    }
}
