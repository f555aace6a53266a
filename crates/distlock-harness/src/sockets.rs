//! This process's open TCP connections, from /proc (Linux): how a test tells which connections
//! a client opened (to count them, or to have the server end exactly those sessions).

use std::collections::HashSet;

/// One TCP connection of this process, by its two ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Connection {
    /// This side's port: what the server sees as the client's port.
    pub local_port: u16,
    /// The server's port.
    pub remote_port: u16,
}

/// Every TCP connection this process has open now (IPv4 and IPv6).
pub fn tcp_connections() -> HashSet<Connection> {
    tcp_connections_of("self")
}

/// Every TCP connection process `pid` has open now (a process of the same user).
pub fn tcp_connections_of_pid(pid: u32) -> HashSet<Connection> {
    tcp_connections_of(&pid.to_string())
}

fn tcp_connections_of(process: &str) -> HashSet<Connection> {
    // /proc/net/tcp lists every socket of the network namespace; the process's are those whose
    // inode one of its file descriptors points at.
    let mut inodes = HashSet::new();
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{process}/fd")) {
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                let target = target.to_string_lossy().to_string();
                if let Some(inode) = target
                    .strip_prefix("socket:[")
                    .and_then(|s| s.strip_suffix(']'))
                {
                    inodes.insert(inode.to_string());
                }
            }
        }
    }
    let mut connections = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() <= 9 || !inodes.contains(fields[9]) {
                continue;
            }
            let port = |address: &str| {
                address
                    .rsplit(':')
                    .next()
                    .and_then(|hex| u16::from_str_radix(hex, 16).ok())
            };
            if let (Some(local_port), Some(remote_port)) = (port(fields[1]), port(fields[2])) {
                // Listening sockets have no remote port.
                if remote_port != 0 {
                    connections.insert(Connection {
                        local_port,
                        remote_port,
                    });
                }
            }
        }
    }
    connections
}
