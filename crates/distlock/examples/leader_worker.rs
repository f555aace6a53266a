// A worker run as several instances, of which only the elected leader works; the others wait
// to take over. Here the leader does a few rounds of work and then resigns, so that the next
// campaigner takes over at once (a real worker would lead until it stops or loses the lease).
//
//     cargo run -p distlock --example leader_worker -- NAME [URL]   (default: sqlite:workers.db)
//
// Start it two or three times with different NAMEs. LEADER_ROUNDS sets the rounds (default 5).
// Exit status: 0 led and resigned; 1 the leadership was lost or the store failed.

use std::time::Duration;

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let mut args = std::env::args().skip(1);
    let name = args
        .next()
        .unwrap_or_else(|| format!("worker-{}", std::process::id()));
    let url = args.next().unwrap_or_else(|| "sqlite:workers.db".into());
    let rounds = std::env::var("LEADER_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok());

    let client = distlock::connect(&url).await?;
    let election = client.election("billing-worker");
    println!("{name}: campaigning");
    // Waits until this instance is leader; proclaims its name for observers to see.
    let leadership = election.campaign(name.as_str()).await?;
    let term = leadership.term();
    println!("{name}: leader in term {term}");
    // Race the work against the loss of the leadership (the lease could not be renewed): a
    // deposed leader must stop at once, since another instance is about to lead.
    tokio::select! {
        () = work(&name, term.get(), rounds.unwrap_or(5)) => {}
        lost = leadership.lost() => return Err(lost),
    }
    if !leadership.resign().await? {
        let lost = "the leadership was lost before the resign";
        return Err(distlock::Error::new(distlock::ErrorKind::LeaseLost, lost));
    }
    println!("{name}: resigned");
    client.shutdown().await;
    Ok(())
}

/// The leader's work. `term` is larger for every new leader: send it with writes so that the
/// resource can refuse a deposed leader's late ones (see `distlock::fence`).
async fn work(name: &str, term: u64, rounds: u32) {
    for round in 1..=rounds {
        println!("{name}: round {round} of term {term}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
