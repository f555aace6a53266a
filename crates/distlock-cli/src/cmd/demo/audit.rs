//! The audit, read from the store once every instance has stopped: did the strategy keep the
//! invariants?
//!
//! * stock: no stock below 0; orders == units that left the stock; no unit sold twice
//!   ("oversold" = units sold beyond a product's initial stock); every buyer told "yes" has an
//!   order.
//! * counter: the final value == the requests that reported success ("lost updates" = the
//!   difference).

use anyhow::Result;

use super::load::Load;
use super::store::{StockAudit, Store};
use super::strategy::Scenario;

/// What the audit found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Audit {
    /// Units sold beyond the initial stock (stock scenario).
    pub(crate) oversold: Option<i64>,
    /// Successful "+1"s missing from the counter (counter scenario).
    pub(crate) lost_updates: Option<i64>,
    /// Whether every invariant held.
    pub(crate) correct: bool,
    /// The numbers behind the verdict, in words.
    pub(crate) findings: String,
}

/// Audits the store after a run of `scenario` whose load generator saw `load`.
pub(crate) async fn audit(scenario: Scenario, store: &Store, load: &Load) -> Result<Audit> {
    Ok(match scenario {
        Scenario::Stock => judge_stock(&store.audit_stock().await?, load.succeeded as i64),
        Scenario::Counter | Scenario::Pause => {
            judge_counter(store.audit_counter().await?, load.succeeded as i64)
        }
    })
}

fn judge_stock(found: &StockAudit, succeeded: i64) -> Audit {
    let StockAudit {
        negative,
        units,
        orders,
        oversold,
    } = *found;
    let mut wrong = Vec::new();
    if oversold > 0 {
        wrong.push(format!("{oversold} units oversold"));
    }
    if orders != units {
        wrong.push(format!(
            "{orders} orders for {units} units taken from stock"
        ));
    }
    if negative > 0 {
        wrong.push(format!("{negative} products with stock below 0"));
    }
    if succeeded != orders {
        wrong.push(format!(
            "{succeeded} buyers told yes but {orders} orders recorded"
        ));
    }
    let correct = wrong.is_empty();
    let findings = if correct {
        format!("{orders} orders for {units} units, none oversold, no stock below 0")
    } else {
        wrong.join(", ")
    };
    Audit {
        oversold: Some(oversold),
        lost_updates: None,
        correct,
        findings,
    }
}

fn judge_counter(value: i64, succeeded: i64) -> Audit {
    let lost = succeeded - value;
    let findings = match lost {
        0 => format!("counter = {value} = successful requests"),
        l if l > 0 => {
            format!("{l} updates lost: {succeeded} requests succeeded, counter = {value}")
        }
        _ => format!("counter = {value} exceeds the {succeeded} requests that succeeded"),
    };
    Audit {
        oversold: None,
        lost_updates: Some(lost),
        correct: lost == 0,
        findings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stock_verdicts() {
        let clean = StockAudit {
            negative: 0,
            units: 10,
            orders: 10,
            oversold: 0,
        };
        assert!(judge_stock(&clean, 10).correct);
        let raced = StockAudit {
            negative: 0,
            units: 7,
            orders: 10,
            oversold: 3,
        };
        let audit = judge_stock(&raced, 10);
        assert!(!audit.correct);
        assert_eq!(audit.oversold, Some(3));
        assert!(
            audit.findings.contains("3 units oversold"),
            "{}",
            audit.findings
        );
        assert!(
            !judge_stock(&clean, 9).correct,
            "a yes without an order is wrong"
        );
    }

    #[test]
    fn counter_verdicts() {
        assert!(judge_counter(5000, 5000).correct);
        let audit = judge_counter(114, 5000);
        assert!(!audit.correct);
        assert_eq!(audit.lost_updates, Some(4886));
        assert!(!judge_counter(11, 10).correct);
    }
}
