//! A throwaway certificate authority for TLS tests, made with the `openssl` command: a CA, a
//! server certificate for `localhost` and 127.0.0.1, and a client certificate, all signed by it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Failure;

/// The files [`make`] wrote.
pub struct TestCerts {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// Writes a CA and a server and a client certificate signed by it into `dir`.
pub fn make(dir: &Path) -> Result<TestCerts, Failure> {
    let p = |f: &str| dir.join(f);
    openssl(
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ],
        &[("-keyout", p("ca.key")), ("-out", p("ca.crt"))],
        &["-subj", "/CN=distlock-test-ca"],
    )?;
    std::fs::write(
        p("server.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )?;
    std::fs::write(p("client.cnf"), "extendedKeyUsage=clientAuth\n")?;
    for who in ["server", "client"] {
        openssl(
            &["req", "-newkey", "rsa:2048", "-nodes"],
            &[
                ("-keyout", p(&format!("{who}.key"))),
                ("-out", p(&format!("{who}.csr"))),
            ],
            &["-subj", &format!("/CN=distlock-test-{who}")],
        )?;
        openssl(
            &["x509", "-req", "-days", "2", "-CAcreateserial"],
            &[
                ("-in", p(&format!("{who}.csr"))),
                ("-CA", p("ca.crt")),
                ("-CAkey", p("ca.key")),
                ("-out", p(&format!("{who}.crt"))),
                ("-extfile", p(&format!("{who}.cnf"))),
            ],
            &[],
        )?;
    }
    Ok(TestCerts {
        ca: p("ca.crt"),
        server_cert: p("server.crt"),
        server_key: p("server.key"),
        client_cert: p("client.crt"),
        client_key: p("client.key"),
    })
}

fn openssl(args: &[&str], files: &[(&str, PathBuf)], tail: &[&str]) -> Result<(), Failure> {
    let mut command = Command::new("openssl");
    command.args(args);
    for (flag, path) in files {
        command.arg(flag).arg(path);
    }
    command.args(tail);
    crate::servers::run(&mut command, &format!("openssl {}", args.join(" ")))?;
    Ok(())
}

impl TestCerts {
    /// The server's certificate, key and the CA, each after its flag in `flags` (a server's
    /// own names for them: `--cert-file`, `--key-file`, `--trusted-ca-file`).
    pub fn server_args(&self, flags: [&str; 3]) -> Vec<std::ffi::OsString> {
        let files = [&self.server_cert, &self.server_key, &self.ca];
        flags
            .into_iter()
            .zip(files)
            .flat_map(|(flag, file)| [flag.into(), file.into()])
            .collect()
    }
}
