//! What a run shows: the table, a verdict line per run, or one JSON object per run.

use std::fmt::Write as _;

use serde::Serialize;

use super::audit::Audit;
use super::load::Load;
use super::strategy::{Method, Scenario, Strategy};

/// One run: a scenario under a strategy with some number of instances.
#[derive(Debug)]
pub(crate) struct RunReport {
    pub(crate) scenario: Scenario,
    pub(crate) strategy: Strategy,
    pub(crate) instances: u32,
    /// Requests fired (N).
    pub(crate) requests: u64,
    /// `None` when the instances never served (they failed to start).
    pub(crate) load: Option<Load>,
    /// `None` when the run never got as far as the audit.
    pub(crate) audit: Option<Audit>,
    /// Instances that failed, requests that failed, an audit that could not be read.
    pub(crate) problems: Vec<String>,
}

/// How a run ended, for its verdict and the exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every invariant held.
    Correct,
    /// Broken, as this strategy is expected to be (`none`, `local-mutex` with K > 1).
    WrongAsExpected,
    /// An unprotected strategy happened to be correct: the race did not show this time.
    RaceNotSeen,
    /// A strategy that must be correct broke an invariant.
    Wrong,
    /// Instances or requests failed, or the audit could not be read.
    Failed,
}

impl Verdict {
    /// Whether this verdict makes `distlock demo` exit non-zero.
    pub(crate) fn is_failure(self) -> bool {
        matches!(self, Verdict::Wrong | Verdict::Failed)
    }
}

impl RunReport {
    pub(crate) fn must_be_correct(&self) -> bool {
        self.strategy.must_be_correct(self.scenario, self.instances)
    }

    pub(crate) fn verdict(&self) -> Verdict {
        if !self.problems.is_empty() {
            return Verdict::Failed;
        }
        match (&self.audit, self.must_be_correct()) {
            (None, _) => Verdict::Failed,
            (Some(a), _) if a.correct && self.must_be_correct() => Verdict::Correct,
            (Some(a), _) if a.correct => Verdict::RaceNotSeen,
            (Some(_), true) => Verdict::Wrong,
            (Some(_), false) => Verdict::WrongAsExpected,
        }
    }

    fn throughput(&self) -> Option<f64> {
        self.load.as_ref().map(Load::throughput)
    }

    /// The JSON object of `--json`.
    pub(crate) fn json(&self) -> String {
        let load = self.load.as_ref();
        let row = JsonRun {
            scenario: self.scenario.name(),
            strategy: self.strategy.label(),
            instances: self.instances,
            requests: self.requests,
            succeeded: load.map(|l| l.succeeded),
            refused: load.map(|l| l.refused),
            busy: load.map(|l| l.busy),
            oversold: self.audit.as_ref().and_then(|a| a.oversold),
            lost_updates: self.audit.as_ref().and_then(|a| a.lost_updates),
            seconds: load.map(|l| round3(l.wall.as_secs_f64())),
            p50_ms: load.map(|l| round3(l.percentile(50.0).as_secs_f64() * 1e3)),
            p99_ms: load.map(|l| round3(l.percentile(99.0).as_secs_f64() * 1e3)),
            throughput: self.throughput().map(|t| t.round()),
            failed: load.map(|l| l.failed),
            correct: self.audit.as_ref().map(|a| a.correct),
            must_be_correct: self.must_be_correct(),
            verdict: verdict_word(self.verdict()),
            problems: &self.problems,
        };
        serde_json::to_string(&row).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The verdict line under the table.
    pub(crate) fn verdict_line(&self) -> String {
        let who = format!(
            "{:<8} {:<20} ({} instance{})",
            self.scenario.name(),
            self.strategy.label(),
            self.instances,
            if self.instances == 1 { "" } else { "s" }
        );
        let findings = self.audit.as_ref().map_or("", |a| a.findings.as_str());
        let mut line = match self.verdict() {
            Verdict::Correct => format!("{who}: correct: {findings}"),
            Verdict::WrongAsExpected => {
                format!(
                    "{who}: WRONG: {findings} (as expected: {})",
                    self.why_unsafe()
                )
            }
            Verdict::RaceNotSeen => format!(
                "{who}: correct this time: {findings}; the race did not show (try --pause 2ms)"
            ),
            Verdict::Wrong => {
                format!("{who}: WRONG!!! {findings}; this strategy must be correct: this is a bug")
            }
            Verdict::Failed if findings.is_empty() => format!("{who}: FAILED"),
            Verdict::Failed => format!("{who}: FAILED (the audit found: {findings})"),
        };
        for problem in &self.problems {
            let _ = write!(line, "\n    {}", problem.replace('\n', "\n    "));
        }
        line
    }

    fn why_unsafe(&self) -> &'static str {
        match self.strategy.method {
            Method::LocalMutex => "each process's mutex excludes only its own requests",
            Method::Lock if self.scenario == Scenario::Pause => {
                "the paused holder's lease ran out, another took the lock, and nothing refused \
                 the late write"
            }
            _ => "nothing keeps two requests' read-check-write apart",
        }
    }
}

#[derive(Serialize)]
struct JsonRun<'a> {
    scenario: &'static str,
    strategy: String,
    instances: u32,
    requests: u64,
    succeeded: Option<u64>,
    /// Writes the store refused for a stale fencing token (lock+fence).
    refused: Option<u64>,
    /// Requests answered 423: their key's lock was held past `--lock-wait`.
    busy: Option<u64>,
    oversold: Option<i64>,
    lost_updates: Option<i64>,
    seconds: Option<f64>,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    throughput: Option<f64>,
    failed: Option<u64>,
    correct: Option<bool>,
    must_be_correct: bool,
    verdict: &'static str,
    problems: &'a [String],
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Correct => "correct",
        Verdict::WrongAsExpected => "wrong-as-expected",
        Verdict::RaceNotSeen => "race-not-seen",
        Verdict::Wrong => "WRONG",
        Verdict::Failed => "FAILED",
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The table of all runs, aligned, in Markdown form so that it can be pasted as it is.
pub(crate) fn table(runs: &[RunReport]) -> String {
    let header = [
        "scenario",
        "strategy",
        "instances",
        "requests",
        "succeeded",
        "oversold / lost updates",
        "wall time",
        "throughput",
        "p50",
        "p99",
    ];
    let rows: Vec<Vec<String>> = runs.iter().map(row).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let numeric = |i: usize| i >= 2;
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if numeric(i) {
                let _ = write!(s, " {cell:>w$} |");
            } else {
                let _ = write!(s, " {cell:<w$} |");
            }
        }
        s
    };
    let mut out = line(&header.map(String::from));
    out.push('\n');
    out.push('|');
    for (i, w) in widths.iter().enumerate() {
        let dashes = "-".repeat(*w);
        if numeric(i) {
            let _ = write!(out, "-{dashes}:|");
        } else {
            let _ = write!(out, "-{dashes}-|");
        }
    }
    for r in &rows {
        out.push('\n');
        out.push_str(&line(r));
    }
    out
}

fn row(run: &RunReport) -> Vec<String> {
    let dash = || "-".to_string();
    let broken = match &run.audit {
        Some(a) => match (a.oversold, a.lost_updates) {
            (Some(o), _) => format!("{o} oversold"),
            (_, Some(l)) => format!("{l} lost"),
            _ => dash(),
        },
        None => dash(),
    };
    let (succeeded, wall, rate, p50, p99) = match &run.load {
        Some(l) => (
            l.succeeded.to_string(),
            format!("{:.2} s", l.wall.as_secs_f64()),
            format!("{:.0} req/s", l.throughput()),
            format!("{:.1} ms", l.percentile(50.0).as_secs_f64() * 1e3),
            format!("{:.1} ms", l.percentile(99.0).as_secs_f64() * 1e3),
        ),
        None => (dash(), dash(), dash(), dash(), dash()),
    };
    vec![
        run.scenario.name().to_string(),
        run.strategy.label(),
        run.instances.to_string(),
        run.requests.to_string(),
        succeeded,
        broken,
        wall,
        rate,
        p50,
        p99,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(method: Method, instances: u32, audit: Audit) -> RunReport {
        RunReport {
            scenario: Scenario::Counter,
            strategy: Strategy { method, lock: None },
            instances,
            requests: 10,
            load: Some(Load {
                requests: 10,
                succeeded: 10,
                ..Load::default()
            }),
            audit: Some(audit),
            problems: Vec::new(),
        }
    }

    fn counter(lost: i64) -> Audit {
        Audit {
            oversold: None,
            lost_updates: Some(lost),
            correct: lost == 0,
            findings: String::new(),
        }
    }

    #[test]
    fn verdicts_depend_on_what_the_strategy_promises() {
        assert_eq!(
            run(Method::None, 3, counter(4)).verdict(),
            Verdict::WrongAsExpected
        );
        assert_eq!(
            run(Method::None, 3, counter(0)).verdict(),
            Verdict::RaceNotSeen
        );
        assert_eq!(
            run(Method::LocalMutex, 3, counter(4)).verdict(),
            Verdict::WrongAsExpected
        );
        assert_eq!(
            run(Method::LocalMutex, 1, counter(4)).verdict(),
            Verdict::Wrong
        );
        assert_eq!(
            run(Method::Atomic, 3, counter(0)).verdict(),
            Verdict::Correct
        );
        let mut failed = run(Method::Atomic, 3, counter(0));
        failed.problems.push("instance 2 exited".into());
        assert_eq!(failed.verdict(), Verdict::Failed);
        assert!(Verdict::Wrong.is_failure() && Verdict::Failed.is_failure());
        assert!(!Verdict::WrongAsExpected.is_failure());
    }

    #[test]
    fn json_has_the_documented_keys() {
        let line = run(Method::Atomic, 3, counter(0)).json();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        for key in [
            "scenario",
            "strategy",
            "instances",
            "requests",
            "succeeded",
            "oversold",
            "lost_updates",
            "seconds",
            "p50_ms",
            "p99_ms",
        ] {
            assert!(v.get(key).is_some(), "{key} missing from {line}");
        }
        assert_eq!(v["lost_updates"], 0);
        assert!(v["oversold"].is_null());
    }

    #[test]
    fn table_lines_up() {
        let t = table(&[
            run(Method::None, 3, counter(7)),
            run(Method::Atomic, 3, counter(0)),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(
            lines
                .iter()
                .all(|l| l.chars().count() == lines[0].chars().count()),
            "{t}"
        );
        assert!(lines[2].contains("7 lost"), "{t}");
    }
}
