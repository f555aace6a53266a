//! A stand-in for an S3-compatible server that accepts `If-None-Match` and `If-Match` and
//! ignores them, as some do: every PUT replaces the object. No real server here behaves so,
//! which is why this one exists; it speaks just enough HTTP/1.1 for object_store's S3 client
//! (path-style requests, unsigned answers).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

type Objects = Arc<Mutex<HashMap<String, (Vec<u8>, u64)>>>;

/// Starts the stand-in on a free port of 127.0.0.1 and answers its `s3://` URL.
pub async fn start() -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let objects: Objects = Arc::default();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(serve(conn, objects.clone()));
        }
    });
    Ok(format!(
        "s3://standin:standin-secret@bucket?endpoint=http://127.0.0.1:{port}&region=us-east-1"
    ))
}

async fn serve(conn: TcpStream, objects: Objects) -> std::io::Result<()> {
    let mut conn = BufReader::new(conn);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if conn.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut lines = head.lines();
        let request = lines.next().unwrap_or_default().to_string();
        let mut parts = request.split(' ');
        let method = parts.next().unwrap_or_default().to_string();
        let key = parts
            .next()
            .unwrap_or_default()
            .split('?')
            .next()
            .unwrap_or_default()
            .to_string();
        let length: usize = lines
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        conn.read_exact(&mut body).await?;
        let answer = {
            let mut objects = objects.lock().unwrap();
            match method.as_str() {
                "PUT" => {
                    // The point of the stand-in: the conditions are not looked at.
                    let version = objects.values().map(|(_, v)| *v).max().unwrap_or(0) + 1;
                    objects.insert(key, (body, version));
                    format!("HTTP/1.1 200 OK\r\nETag: \"v{version}\"\r\nContent-Length: 0\r\n\r\n")
                        .into_bytes()
                }
                "GET" | "HEAD" => match objects.get(&key) {
                    Some((bytes, version)) => {
                        let mut out = format!(
                            "HTTP/1.1 200 OK\r\nETag: \"v{version}\"\r\nLast-Modified: Mon, 07 \
                             Dec 2026 00:00:00 GMT\r\nContent-Length: {}\r\n\r\n",
                            bytes.len()
                        )
                        .into_bytes();
                        if method == "GET" {
                            out.extend_from_slice(bytes);
                        }
                        out
                    }
                    None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
                },
                "DELETE" => {
                    objects.remove(&key);
                    b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()
                }
                _ => b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n".to_vec(),
            }
        };
        conn.get_mut().write_all(&answer).await?;
    }
}
