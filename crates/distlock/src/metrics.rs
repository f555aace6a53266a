//! Metrics through the [`metrics`](https://docs.rs/metrics) facade: distlock records, the
//! application chooses the exporter (Prometheus, StatsD, …) by installing a recorder; without
//! one, recording costs next to nothing and nothing is exported.
//!
//! | name | type | unit | what |
//! |---|---|---|---|
//! | `distlock_acquires_total` | counter | acquisitions | acquisitions by `result`: `acquired` (a re-entry counts too), `contended` (`try_acquire` found the lock held: not a failure), `timeout` (a wait reached its deadline), `error` (the call failed) |
//! | `distlock_acquire_errors_total` | counter | errors | acquisitions that failed, by `error`: the [`ErrorKind`](crate::ErrorKind) in `snake_case` ([`ErrorKind::as_str`](crate::ErrorKind::as_str): `connection`, `invalid_name`, …) |
//! | `distlock_wait_seconds` | histogram | seconds | from the call to the grant, acquisitions that got the lock |
//! | `distlock_hold_seconds` | histogram | seconds | from the grant until the holding ended for this client (released or lost) |
//! | `distlock_waiters` | gauge | waiters | acquisitions of this process waiting now |
//! | `distlock_renewals_total` | counter | renewals | lease renewals the store confirmed |
//! | `distlock_renewal_failures_total` | counter | renewals | renewals that failed (a store error; the holding may still be saved by the next) |
//! | `distlock_lost_total` | counter | holdings | holdings lost while held (lease ended, store said no, session ended, forced out) |
//!
//! Every metric carries `backend` (`sqlite`, `redis`, …) and `class`: the lock name mapped to a
//! small set of classes, so that a million `order:<id>` locks make one time series, not a
//! million. The default class is the part of the name before its first `:` or `/` when that
//! part has no digit (`order:42` → `order`, `jobs/nightly` → `jobs`), and `other` for every
//! other name; [`set_class`] replaces the mapping for the whole process (as the recorder is
//! process-wide). Lock names themselves never become labels; every label value is bounded and
//! `snake_case`.
//!
//! Each metric is described (its help text and unit: Prometheus' `# HELP` lines) to the recorder
//! installed when a client connects; [`describe`] does it again for a recorder installed later.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::types::LockName;

type ClassFn = dyn Fn(&str) -> String + Send + Sync;

static CLASSIFIER: RwLock<Option<Arc<ClassFn>>> = RwLock::new(None);

/// Maps lock names to the `class` label of every metric, for the whole process. Keep the
/// number of distinct classes small: each is a time series per metric and backend.
///
/// ```
/// distlock::metrics::set_class(|name| {
///     if name.starts_with("payment:") { "payment".into() } else { "other".into() }
/// });
/// ```
pub fn set_class(classify: impl Fn(&str) -> String + Send + Sync + 'static) {
    *CLASSIFIER.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(classify));
}

/// The class of a lock name: by the function given to [`set_class`], else the default rule.
pub fn class_of(name: &str) -> String {
    let custom = CLASSIFIER.read().unwrap_or_else(|p| p.into_inner()).clone();
    match custom {
        Some(classify) => classify(name),
        None => default_class(name),
    }
}

fn default_class(name: &str) -> String {
    match name.find([':', '/']) {
        Some(end) if end > 0 && !name[..end].bytes().any(|b| b.is_ascii_digit()) => {
            name[..end].to_string()
        }
        _ => "other".to_string(),
    }
}

/// The values of the `result` label of `distlock_acquires_total`.
const ACQUIRED: &str = "acquired";
const CONTENDED: &str = "contended";
const TIMEOUT: &str = "timeout";
const ERROR: &str = "error";

/// Describes every metric distlock records (help text and unit) to the process' recorder, for
/// exporters that show them (Prometheus' `# HELP`). [`connect`](crate::connect) calls it; call it
/// again after installing a recorder once clients already exist.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "distlock_acquires_total",
        Unit::Count,
        "Lock acquisitions by result: acquired, contended (try_acquire found it held), timeout, \
         error"
    );
    describe_counter!(
        "distlock_acquire_errors_total",
        Unit::Count,
        "Lock acquisitions that failed, by error kind"
    );
    describe_histogram!(
        "distlock_wait_seconds",
        Unit::Seconds,
        "Time from an acquisition's call to its grant"
    );
    describe_histogram!(
        "distlock_hold_seconds",
        Unit::Seconds,
        "Time from a grant until the holding was released or lost"
    );
    describe_gauge!(
        "distlock_waiters",
        Unit::Count,
        "Acquisitions of this process waiting now"
    );
    describe_counter!(
        "distlock_renewals_total",
        Unit::Count,
        "Lease renewals the store confirmed"
    );
    describe_counter!(
        "distlock_renewal_failures_total",
        Unit::Count,
        "Lease renewals that failed (the next may still save the holding)"
    );
    describe_counter!(
        "distlock_lost_total",
        Unit::Count,
        "Holdings lost while held (lease ended, taken away, session ended)"
    );
}

/// The labels of one lock's metrics.
#[derive(Clone, Debug)]
pub(crate) struct Labels {
    backend: &'static str,
    /// Shared, so that each metric's labels clone a pointer rather than copy the string (each
    /// acquisition records several metrics, installed recorder or not).
    class: metrics::SharedString,
}

impl Labels {
    pub(crate) fn of(backend: &'static str, name: &LockName) -> Self {
        Labels {
            backend,
            class: metrics::SharedString::from_shared(class_of(name.as_str()).into()),
        }
    }

    fn result(&self, result: &'static str) {
        metrics::counter!("distlock_acquires_total", "backend" => self.backend, "class" => self.class.clone(), "result" => result).increment(1);
    }

    pub(crate) fn acquired(&self, waited: Duration) {
        self.result(ACQUIRED);
        metrics::histogram!("distlock_wait_seconds", "backend" => self.backend, "class" => self.class.clone()).record(waited.as_secs_f64());
    }

    /// `try_acquire` found the lock held: ordinary use, not a timeout.
    pub(crate) fn contended(&self) {
        self.result(CONTENDED);
    }

    pub(crate) fn timed_out(&self) {
        self.result(TIMEOUT);
    }

    pub(crate) fn failed(&self, error: &crate::error::Error) {
        self.result(ERROR);
        metrics::counter!("distlock_acquire_errors_total", "backend" => self.backend, "class" => self.class.clone(), "error" => error.kind().as_str()).increment(1);
    }

    pub(crate) fn renewed(&self) {
        metrics::counter!("distlock_renewals_total", "backend" => self.backend, "class" => self.class.clone()).increment(1);
    }

    pub(crate) fn renewal_failed(&self) {
        metrics::counter!("distlock_renewal_failures_total", "backend" => self.backend, "class" => self.class.clone()).increment(1);
    }

    pub(crate) fn lost(&self) {
        metrics::counter!("distlock_lost_total", "backend" => self.backend, "class" => self.class.clone()).increment(1);
    }

    pub(crate) fn held(&self, held: Duration) {
        metrics::histogram!("distlock_hold_seconds", "backend" => self.backend, "class" => self.class.clone()).record(held.as_secs_f64());
    }

    /// Counts one waiter in `distlock_waiters` until the returned value is dropped.
    pub(crate) fn waiting(&self) -> Waiting {
        let gauge = metrics::gauge!("distlock_waiters", "backend" => self.backend, "class" => self.class.clone());
        gauge.increment(1.0);
        Waiting(gauge)
    }
}

/// One waiter counted in `distlock_waiters` (also when its acquisition is cancelled).
pub(crate) struct Waiting(metrics::Gauge);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_classes_are_bounded() {
        assert_eq!(default_class("order:42"), "order");
        assert_eq!(default_class("jobs/nightly/3"), "jobs");
        assert_eq!(default_class("user42:lock"), "other");
        assert_eq!(default_class("report-daily"), "other");
        assert_eq!(default_class(":x"), "other");
    }
}
