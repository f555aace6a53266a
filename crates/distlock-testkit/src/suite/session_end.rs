//! Sessions the server ends ([`crate::Suite::end_sessions`]: `pg_terminate_backend`, `KILL`), as
//! a network reset or an administrator would. The connections to end are found from this
//! process's side ([`crate::sockets`]): those a fresh client opened, so the shared server's
//! other clients are never touched.

use std::collections::HashSet;
use std::time::Duration;

use crate::sockets::tcp_connections;
use crate::suite::Ctx;
use crate::suite::waiting::Waiting;
use crate::{Failure, Outcome, check, check_above, within};

/// A holder whose session the server ends: its `lost()` fires, and another client gets the lock
/// at once (the server freed it with the session; no lease to wait for), with a larger token.
/// The case ends every connection the holder's client opened, its holding's among them.
pub(super) async fn holder_session_ended(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("holder");
    let before = tcp_connections();
    let holder_client = ctx.connect().await?;
    let held = (ctx.flavour.make)(&holder_client, &name).acquire().await?;
    let first = held.fencing_token();
    end_connections_since(&ctx, &before).await?;
    let ended = "the holder's lost() firing once the server ended its session";
    within(Duration::from_secs(10), held.lost(), ended).await?;
    check!(held.is_lost(), "lost() fired but is_lost() is false");
    let next = ctx.contender_takes(&name, Duration::from_secs(2)).await;
    let next = next.map_err(|Failure(e)| {
        Failure(format!(
            "the lock of an ended session was not free at once: {e}"
        ))
    })?;
    let whose = "the token after the ended holder's";
    check_above(whose, next.fencing_token(), first)?;
    let stale = held.release().await;
    check!(
        !matches!(stale, Ok(true)),
        "the ended holder's release claimed the new holder's lock"
    );
    check!(next.release().await?, "the new holder could not release");
    Ok(())
}

/// A waiter whose connections the server ends while it waits keeps waiting, and gets the lock
/// when the holder releases.
///
/// Why this is right: a waiter holds nothing on the server. Its connections only carry its tries
/// (and, on PostgreSQL, the client's shared `LISTEN`), so losing them loses no lock and no place
/// in a queue; the pool opens new ones. Failing the wait would hand the caller a fault that cost
/// it nothing, and its only sensible answer would be to wait again.
///
/// A try in flight at the moment its connection ends is tried again on a fresh connection by
/// the backend (a dead session connection holds nothing), so no error reaches the waiter.
pub(super) async fn waiter_session_ended(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("waiter");
    let held = ctx.lock(&name).acquire().await?;
    let held_token = held.fencing_token();
    let before = tcp_connections();
    let waiter_client = ctx.connect().await?;
    let waiter = Waiting::start(
        (ctx.flavour.contender)(&waiter_client, &name),
        Duration::from_secs(30),
    );
    // Long enough for a few tries and, where there is one, the listening connection.
    tokio::time::sleep(Duration::from_secs(1)).await;
    check!(!waiter.is_finished(), "the waiter got a held lock");
    end_connections_since(&ctx, &before).await?;
    // Tries go on while the holder holds: the waiter must neither fail nor get in.
    tokio::time::sleep(Duration::from_secs(1)).await;
    if waiter.is_finished() {
        let answer = waiter.answer().await?;
        return Err(Failure(format!(
            "the waiter's wait ended when the server ended its connections: {:?}",
            answer.map(|g| g.fencing_token())
        )));
    }
    check!(held.release().await?, "the holder could not release");
    let next = waiter
        .gets_in(Duration::from_secs(10), held_token, "after the release")
        .await?;
    check!(next.release().await?, "the waiter could not release");
    Ok(())
}

/// Has the server end the sessions of every connection this process opened since `before`.
async fn end_connections_since(ctx: &Ctx, before: &HashSet<crate::sockets::Connection>) -> Outcome {
    let ports: Vec<u16> = tcp_connections()
        .difference(before)
        .map(|c| c.local_port)
        .collect();
    let ended = ctx.end_sessions(&ctx.url, ports.clone()).await?;
    check!(
        ended > 0,
        "the server found no session of the client's connections (local ports {ports:?})"
    );
    Ok(())
}
