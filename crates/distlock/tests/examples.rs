//! Runs the getting-started programs in `examples/` to completion, as separate processes against
//! a temporary SQLite store, and checks what they promise: one cron run at a time, no stock
//! oversold by two instances of the service, every worker leading in its own term.
//!
//! Each example's source is compiled into this binary (`include!`), and this binary runs itself
//! as that example when `DISTLOCK_EXAMPLE` names it: the exact code a user copies runs as its
//! own process, without a nested cargo build.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};

mod cron_job {
    include!("../examples/cron_job.rs");
    pub(super) fn run_main() -> std::process::ExitCode {
        main()
    }
}

mod stock_http {
    include!("../examples/stock_http.rs");
    pub(super) fn run_main() -> std::process::ExitCode {
        std::process::Termination::report(main())
    }
}

mod leader_worker {
    include!("../examples/leader_worker.rs");
    pub(super) fn run_main() -> std::process::ExitCode {
        std::process::Termination::report(main())
    }
}

/// Names the example a child process of this binary runs.
const EXAMPLE: &str = "DISTLOCK_EXAMPLE";

/// How long any one step may take before the test gives up on a hung example (generous: these
/// bound a hang, they are not the outcome under test).
const HANG: Duration = Duration::from_secs(120);

fn main() -> ExitCode {
    if let Ok(example) = std::env::var(EXAMPLE) {
        return match example.as_str() {
            "cron_job" => cron_job::run_main(),
            "stock_http" => stock_http::run_main(),
            "leader_worker" => leader_worker::run_main(),
            other => {
                eprintln!("no example {other:?}");
                ExitCode::FAILURE
            }
        };
    }
    let trials = vec![
        Trial::test(
            "cron_job::a_second_run_skips_while_one_runs",
            cron_job_skips,
        ),
        Trial::test(
            "stock_http::two_instances_never_oversell",
            stock_never_oversold,
        ),
        Trial::test("leader_worker::workers_lead_in_turn", workers_lead_in_turn),
    ];
    libtest_mimic::run(&Arguments::from_args(), trials).exit_code()
}

/// One example running as a child process, its stdout read line by line.
struct Example {
    name: &'static str,
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Example {
    fn start(name: &'static str, args: &[&str], env: &[(&str, &str)]) -> Example {
        let mut child = Command::new(std::env::current_exe().expect("this test binary"))
            .env(EXAMPLE, name)
            .envs(env.iter().copied())
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the example");
        let stdout = BufReader::new(child.stdout.take().expect("its stdout"));
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Example {
            name,
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line of its output that contains `text`, and returns it.
    fn line_with(&mut self, text: &str) -> Result<String, Failed> {
        loop {
            let line = self.lines.recv_timeout(HANG).map_err(|_| {
                format!(
                    "{} never printed {text:?}; it printed {:?}",
                    self.name, self.seen
                )
            })?;
            self.seen.push(line.clone());
            if line.contains(text) {
                return Ok(line);
            }
        }
    }

    /// Sends it SIGINT, as Ctrl-C would.
    fn interrupt(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0, "kill -INT");
    }

    /// Waits for it to exit: its exit code and everything it printed.
    fn finish(mut self) -> Result<(i32, Vec<String>), Failed> {
        let deadline = std::time::Instant::now() + HANG;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                return Err(
                    format!("{} did not exit; it printed {:?}", self.name, self.seen).into(),
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader thread ends at the pipe's end of file.
        while let Ok(line) = self.lines.recv_timeout(HANG) {
            self.seen.push(line);
        }
        let code = status
            .code()
            .ok_or_else(|| format!("{} ended by a signal: {status}", self.name))?;
        Ok((code, self.seen))
    }
}

/// The number after `prefix` in `line`.
fn number_after(line: &str, prefix: &str) -> Result<u64, Failed> {
    let at = line
        .find(prefix)
        .ok_or_else(|| format!("no {prefix:?} in {line:?}"))?;
    let digits: String = line[at + prefix.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .map_err(|_| format!("no number after {prefix:?} in {line:?}").into())
}

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite:{}", dir.path().join("locks.db").display())
}

/// A run started while another holds the job's lock skips it (75); the interrupted holder
/// releases it (130), and the next run does the job with a larger fencing token (0).
fn cron_job_skips() -> Result<(), Failed> {
    let dir = tempfile::tempdir()?;
    let url = sqlite_url(&dir);
    // A long job, so that it is surely running while the second one starts.
    let mut first = Example::start("cron_job", &[&url], &[("CRON_JOB_SECONDS", "600")]);
    let running = first.line_with("running with fencing token")?;
    let first_token = number_after(&running, "fencing token ")?;

    let second = Example::start("cron_job", &[&url], &[("CRON_JOB_SECONDS", "0")]);
    let (code, printed) = second.finish()?;
    if code != 75 || printed.iter().any(|l| l.contains("running")) {
        return Err(format!("the second run exited {code} and printed {printed:?}").into());
    }

    first.interrupt();
    let (code, printed) = first.finish()?;
    if code != 130 {
        return Err(format!("the interrupted run exited {code}, printed {printed:?}").into());
    }

    let third = Example::start("cron_job", &[&url], &[("CRON_JOB_SECONDS", "0")]);
    let (code, printed) = third.finish()?;
    let ran = printed.iter().find(|l| l.contains("fencing token"));
    let token = ran.map(|l| number_after(l, "fencing token ")).transpose()?;
    if code != 0 || !printed.iter().any(|l| l.ends_with("done")) || token <= Some(first_token) {
        return Err(format!(
            "after the release the next run exited {code} and printed {printed:?} (the first \
             run's token was {first_token})"
        )
        .into());
    }
    Ok(())
}

/// Sends one HTTP/1.1 request to `addr`: the status code and the body.
fn http(addr: &str, method: &str, path: &str) -> Result<(u16, String), Failed> {
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(HANG))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 0\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {response:?}"))?;
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("").trim();
    Ok((status, body.to_string()))
}

/// Two instances of the shop on one database take 25 concurrent orders for the 10 widgets in
/// stock: exactly 10 are sold, each stock level once (10 → 9 … → 0), the other 15 are told
/// "sold out", and the stock ends at 0.
fn stock_never_oversold() -> Result<(), Failed> {
    let dir = tempfile::tempdir()?;
    let dir_arg = dir.path().to_str().expect("a UTF-8 path");
    let mut shops = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..2 {
        let mut shop = Example::start("stock_http", &["127.0.0.1:0", dir_arg], &[]);
        let line = shop.line_with("listening on http://")?;
        addrs.push(line["listening on http://".len()..].to_string());
        shops.push(shop);
    }
    let orders: Vec<_> = (0..25)
        .map(|i| {
            let addr = addrs[i % 2].clone();
            std::thread::spawn(move || {
                http(&addr, "POST", "/buy/widget")
                    .map_err(|e| e.message().unwrap_or("the order failed").to_string())
            })
        })
        .collect();
    let mut left_after_sale = Vec::new();
    let mut sold_out = 0;
    for order in orders {
        match order.join().expect("an order thread")? {
            (200, body) => left_after_sale.push(number_after(&body, "sold, ")?),
            (409, _) => sold_out += 1,
            (status, body) => return Err(format!("an order answered {status}: {body}").into()),
        }
    }
    left_after_sale.sort_unstable();
    if left_after_sale != (0..10).collect::<Vec<u64>>() || sold_out != 15 {
        return Err(format!(
            "stock levels after each sale {left_after_sale:?}, {sold_out} told sold out"
        )
        .into());
    }
    for addr in &addrs {
        let (status, body) = http(addr, "GET", "/stock/widget")?;
        if (status, body.as_str()) != (200, "0") {
            return Err(format!("{addr} says the stock is {status} {body:?}").into());
        }
    }
    for shop in shops {
        shop.interrupt();
        let (code, printed) = shop.finish()?;
        if code != 0 {
            return Err(format!("a shop stopped with {code}, printed {printed:?}").into());
        }
    }
    Ok(())
}

/// Three workers campaign at once: each leads (in its own term), works, resigns and exits 0.
fn workers_lead_in_turn() -> Result<(), Failed> {
    let dir = tempfile::tempdir()?;
    let url = sqlite_url(&dir);
    let workers: Vec<_> = ["w1", "w2", "w3"]
        .iter()
        .map(|name| Example::start("leader_worker", &[name, &url], &[("LEADER_ROUNDS", "2")]))
        .collect();
    let mut terms = Vec::new();
    for worker in workers {
        let (code, printed) = worker.finish()?;
        let led = printed.iter().find(|l| l.contains("leader in term"));
        let rounds = printed.iter().filter(|l| l.contains(": round ")).count();
        let resigned = printed.iter().any(|l| l.ends_with("resigned"));
        if code != 0 || led.is_none() || rounds != 2 || !resigned {
            return Err(format!("a worker exited {code} and printed {printed:?}").into());
        }
        terms.push(number_after(led.expect("checked"), "term ")?);
    }
    terms.sort_unstable();
    terms.dedup();
    if terms.len() != 3 {
        return Err(format!("three leaderships in {terms:?} distinct terms").into());
    }
    Ok(())
}
