//! [`distlock::Lock::check`] answers, before any acquisition and without asking the store, what
//! the first acquisition of the same lock answers for its settings: a program can refuse a
//! flavour or lease the store cannot serve at startup.

use std::time::Duration;

use distlock::{ErrorKind, Lock};

use crate::flavour::every_lock_kind;
use crate::suite::Ctx;
use crate::{Outcome, check};

pub(super) async fn check_answers_as_acquisition(ctx: Ctx) -> Outcome {
    let client = &ctx.client;
    let mut settings: Vec<(String, Lock)> = Vec::new();
    for kind in every_lock_kind(2) {
        let name = ctx.unique_name(&kind.short_name());
        let lock = match kind {
            distlock::LockKind::Fair => client.fair_lock(&name),
            distlock::LockKind::Read => client.rw_lock(&name).read(),
            distlock::LockKind::Write => client.rw_lock(&name).write(),
            distlock::LockKind::Permit { permits } => client.semaphore(&name, permits),
            _ => client.lock(&name),
        };
        settings.push((format!("{kind}, default lease"), lock.clone()));
        settings.push((format!("{kind}, no watchdog"), lock.clone().no_watchdog()));
    }
    // Leases below every store's floor, below a granularity of a second or a session's
    // expiry, a common one, and past the longest.
    for lease in [1, 200, 5_000, 25 * 3_600_000] {
        let lock = ctx
            .lock(&ctx.unique_name(&format!("lease{lease}")))
            .lease(Duration::from_millis(lease));
        settings.push((format!("a lease of {lease} ms"), lock.clone()));
        settings.push((
            format!("a lease of {lease} ms, no watchdog"),
            lock.no_watchdog(),
        ));
    }
    let name = ctx.unique_name("bad");
    settings.push((
        "max_hold zero".into(),
        ctx.lock(&name).max_hold(Duration::ZERO),
    ));
    settings.push(("zero permits".into(), client.semaphore(&name, 0)));
    settings.push(("an empty name".into(), ctx.lock("")));
    let mut refused = 0;
    for (what, lock) in settings {
        let checked = lock.check().err();
        let taken = match lock.try_acquire().await {
            Ok(Some(guard)) => {
                guard.release().await?;
                None
            }
            Ok(None) => None,
            Err(e) => Some(e),
        };
        let kind = |e: &Option<distlock::Error>| e.as_ref().map(distlock::Error::kind);
        check!(
            kind(&checked) == kind(&taken),
            "{what}: check answered {checked:?}, the first acquisition {taken:?}"
        );
        if let Some(e) = &checked {
            check!(
                e.kind() != ErrorKind::Connection,
                "{what}: check asked the store ({e})"
            );
            refused += 1;
        }
    }
    // At least the settings no store takes (a 1 ms and a 25 h lease, max_hold zero, zero
    // permits, an empty name) were refused, so the comparison compared refusals too.
    check!(refused >= 7, "only {refused} settings were refused");
    Ok(())
}
