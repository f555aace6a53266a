// An HTTP service, run as several instances, that sells items from a stock kept in SQLite. Each
// sale takes the item's lock, then writes through a fence: the write is refused if a newer
// holder of the lock has written since (this holder was paused past its lease), so a stale
// instance can never write an old stock count back.
//
//     cargo run -p distlock --features sqlite-fence --example stock_http -- [ADDR] [DIR]
//     curl -X POST http://127.0.0.1:8080/buy/widget      # 200 sold, 409 sold out, 503 retry
//     curl http://127.0.0.1:8080/stock/widget
//
// ADDR defaults to 127.0.0.1:8080 (port 0: any free port; the first line printed says which);
// DIR holds the shop's database and the locks (default: the working directory). Start a second
// instance on another port with the same DIR: they share the stock and the locks. Ctrl-C stops
// an instance. The plain TCP loop stands in for your web framework: `buy` is the handler.

use std::path::PathBuf;
use std::time::Duration;

use distlock::fence::SqlFence;
use sqlx::sqlite::{Sqlite, SqliteConnectOptions, SqlitePool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone)]
struct Shop {
    locks: distlock::Client,
    db: SqlitePool,
    fence: SqlFence<Sqlite>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".into());
    let dir = PathBuf::from(args.next().unwrap_or_else(|| ".".into()));

    let locks = distlock::connect(&format!("sqlite:{}", dir.join("locks.db").display())).await?;
    let options = SqliteConnectOptions::new()
        .filename(dir.join("shop.db"))
        .create_if_missing(true)
        .busy_timeout(Duration::from_secs(10));
    let db = SqlitePool::connect_with(options).await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS stock (item TEXT PRIMARY KEY, quantity INTEGER NOT NULL);
         INSERT OR IGNORE INTO stock VALUES ('widget', 10);",
    )
    .execute(&db)
    .await?;
    let fence = SqlFence::<Sqlite>::install(&db).await?; // creates distlock_fences, once
    let shop = Shop { locks, db, fence };

    let listener = TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = accepted?;
                tokio::spawn(serve(shop.clone(), stream));
            }
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    // Locks of requests cut short are released in the background: let that finish.
    shop.locks.shutdown().await;
    Ok(())
}

/// Sells one `item`: `Ok(Some(left))` if sold, `Ok(None)` if sold out.
async fn buy(shop: &Shop, item: &str) -> Result<Option<i64>, BoxError> {
    let resource = format!("stock:{item}");
    // One sale of an item at a time, across every instance of the service.
    let guard = shop
        .locks
        .lock(&resource)
        .acquire_timeout(Duration::from_secs(10))
        .await?;
    let mut tx = shop.db.begin().await?;
    // The transaction's first statement: fails with ErrorKind::StaleToken if a newer holder has
    // written. The fence row stays locked until the commit, together with the stock.
    shop.fence
        .check(&mut tx, &resource, guard.fencing_token())
        .await?;
    let left: Option<i64> = sqlx::query_scalar("SELECT quantity FROM stock WHERE item = ?")
        .bind(item)
        .fetch_optional(&mut *tx)
        .await?;
    let sold = match left {
        Some(left) if left > 0 => {
            sqlx::query("UPDATE stock SET quantity = quantity - 1 WHERE item = ?")
                .bind(item)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Some(left - 1)
        }
        _ => {
            tx.rollback().await?; // sold out (or no such item)
            None
        }
    };
    guard.release().await?;
    Ok(sold)
}

/// Answers one request on `stream` (HTTP/1.1, one request per connection).
async fn serve(shop: Shop, mut stream: TcpStream) {
    let mut request = Vec::new();
    let mut buf = [0; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let request = String::from_utf8_lossy(&request);
    let mut words = request.split_whitespace();
    let (status, body) = match (words.next(), words.next()) {
        (Some("POST"), Some(path)) if path.starts_with("/buy/") => {
            match buy(&shop, &path["/buy/".len()..]).await {
                Ok(Some(left)) => ("200 OK", format!("sold, {left} left\n")),
                Ok(None) => ("409 Conflict", "sold out\n".to_string()),
                Err(e) => ("503 Service Unavailable", format!("try again: {e}\n")),
            }
        }
        (Some("GET"), Some(path)) if path.starts_with("/stock/") => {
            let left: Result<Option<i64>, _> =
                sqlx::query_scalar("SELECT quantity FROM stock WHERE item = ?")
                    .bind(&path["/stock/".len()..])
                    .fetch_optional(&shop.db)
                    .await;
            match left {
                Ok(Some(left)) => ("200 OK", format!("{left}\n")),
                Ok(None) => ("404 Not Found", "no such item\n".to_string()),
                Err(e) => ("503 Service Unavailable", format!("try again: {e}\n")),
            }
        }
        _ => (
            "404 Not Found",
            "POST /buy/ITEM or GET /stock/ITEM\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
}
