// scratch: cut status/release/extend calls on a 1-connection MySQL client; does the pool survive?
use std::task::Poll;
use std::time::Duration;

async fn poll_then_drop<F: std::future::Future>(
    fut: F,
    polls: u64,
    budget: Duration,
) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    for _ in 0..polls {
        let step = std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Some(out)),
            Poll::Pending => Poll::Ready(None),
        })
        .await;
        if step.is_some() {
            return step;
        }
        tokio::task::yield_now().await;
    }
    if !budget.is_zero() {
        tokio::time::sleep(budget).await;
    }
    None
}

#[tokio::main]
async fn main() {
    let url = std::env::args().nth(1).unwrap();
    let client = distlock::connect(&url).await.unwrap();
    let other = distlock::connect(&url).await.unwrap();
    let mut cut = 0;
    for round in 0..300u64 {
        let name = format!("scratch-cut-{round}-{}", std::process::id());
        let polls = 1 + round % 6;
        let budget = Duration::from_micros((round * 37) % 1500);
        // cut a status call
        if poll_then_drop(client.status(&name), polls, budget)
            .await
            .is_none()
        {
            cut += 1;
        }
        let started = std::time::Instant::now();
        let g = match tokio::time::timeout(Duration::from_secs(5), client.lock(&name).acquire())
            .await
        {
            Ok(g) => g.unwrap(),
            Err(_) => {
                println!(
                    "round {round}: acquire hung 5s after a cut status ({polls} polls, {budget:?})"
                );
                return;
            }
        };
        // cut a release
        if poll_then_drop(g.release(), polls, budget).await.is_none() {
            cut += 1;
        }
        client.flush().await;
        match other
            .lock(&name)
            .acquire_timeout(Duration::from_secs(5))
            .await
        {
            Ok(g) => {
                g.release().await.unwrap();
            }
            Err(e) => {
                println!(
                    "round {round}: other could not take: {e} ({:?})",
                    started.elapsed()
                );
                return;
            }
        }
    }
    println!("ok, {cut} cut");
}
