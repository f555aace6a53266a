//! Bad input is a typed error, never a panic or a silently wrong lock; awkward but valid names
//! are stored exactly.

use std::time::Duration;

use distlock::ErrorKind;

use crate::suite::Ctx;
use crate::{Failure, Outcome, check, check_kind};

pub(super) async fn is_typed(ctx: Ctx) -> Outcome {
    let long = "x".repeat(513);
    for name in ["", long.as_str(), "a\nb", "tab\there", "nul\0", "del\u{7f}"] {
        let lock = ctx.lock(name);
        for outcome in [
            lock.try_acquire().await.map(|_| ()),
            lock.acquire_timeout(Duration::from_millis(50))
                .await
                .map(|_| ()),
            lock.acquire().await.map(|_| ()),
        ] {
            check_kind(&outcome, ErrorKind::InvalidName, &format!("name {name:?}"))?;
        }
    }
    let name = ctx.unique_name("lease");
    for lease in [
        Duration::ZERO,
        Duration::from_millis(9),
        Duration::from_secs(24 * 3600 + 1),
    ] {
        let outcome = ctx.lock(&name).lease(lease).try_acquire().await;
        check_kind(
            &outcome,
            ErrorKind::InvalidLease,
            &format!("lease {lease:?}"),
        )?;
    }
    let outcome = ctx.client.semaphore(&name, 0).try_acquire().await;
    check!(
        matches!(&outcome, Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported)),
        "a semaphore of 0 permits gave {outcome:?}"
    );
    let outcome = ctx.lock(&name).release().await;
    check_kind(&outcome, ErrorKind::NotHeld, "release without a hold")?;
    Ok(())
}

pub(super) async fn awkward_names_round_trip(ctx: Ctx) -> Outcome {
    let base = ctx.unique_name("awkward");
    // 512 bytes exactly, ending in a multi-byte character.
    let mut longest = base.clone();
    while longest.len() + "é".len() <= 512 {
        longest.push(if longest.len().is_multiple_of(2) {
            'a'
        } else {
            '%'
        });
    }
    while longest.len() < 512 {
        longest.push('z');
    }
    let names = [
        format!("{base}/it's \"quoted\""),
        format!("{base}/back\\slash"),
        format!("{base}/100%_done"),
        format!("{base}/注文 ü ✓ 🚀"),
        format!("{base}/trailing space "),
        longest,
    ];
    for name in &names {
        let guard = ctx.lock(name).acquire().await?;
        let again = ctx.contender(name).try_acquire().await?;
        check!(again.is_none(), "{name:?} is not held after acquiring it");
        // A name differing only where SQL LIKE or a glob would match must be a different lock.
        let lookalike = name.replace(['%', ' '], "_").replace('\\', "/");
        if lookalike != *name {
            let other = ctx.lock(&lookalike).try_acquire().await?;
            check!(other.is_some(), "{lookalike:?} is held because {name:?} is");
        }
        if !guard.release().await? {
            return Err(Failure(format!("{name:?} was not held at release")));
        }
    }
    Ok(())
}

/// Every flavour the backend says it supports works; every other one answers `Unsupported`
/// (never a silently different lock), as does resizing a semaphore where there are none.
pub(super) async fn unsupported_flavours_are_typed(ctx: Ctx) -> Outcome {
    use distlock::LockKind;
    let name = ctx.unique_name("flavours");
    let c = &ctx.client;
    let flavours = [
        (LockKind::Mutex, c.lock(&name)),
        (LockKind::Fair, c.fair_lock(&name)),
        (LockKind::Read, c.rw_lock(&name).read()),
        (LockKind::Write, c.rw_lock(&name).write()),
        (LockKind::Permit { permits: 2 }, c.semaphore(&name, 2)),
    ];
    // Changing a semaphore's size works only where semaphores do.
    let resized = c.set_semaphore_permits(&name, 2).await;
    if c.supports(LockKind::Permit { permits: 2 }) {
        check!(resized.is_ok(), "resizing a semaphore gave {resized:?}");
    } else {
        check!(
            matches!(&resized, Err(e) if e.kind() == ErrorKind::Unsupported),
            "resizing a semaphore, which {} lacks, answered {resized:?}",
            c.backend_name()
        );
    }
    for (kind, lock) in flavours {
        let outcome = lock.try_acquire().await;
        if c.supports(kind) {
            let guard = outcome?;
            check!(guard.is_some(), "{kind:?} on a fresh name was not taken");
            if let Some(g) = guard {
                check!(g.release().await?, "{kind:?} lost its lock");
            }
        } else {
            check!(
                matches!(&outcome, Err(e) if e.kind() == ErrorKind::Unsupported),
                "{kind:?}, which {} lacks, answered {outcome:?}",
                c.backend_name()
            );
        }
    }
    Ok(())
}
