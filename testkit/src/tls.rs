//! TLS for the tests: a CA with a server and a client certificate, made by the `openssl`
//! command (scripts/setup.sh installs it), and a server that serves TLS with them beside
//! its plain port (which the tests keep for setting up and reading what the gateway did).

use super::*;

/// The certificates of one test, in a temporary directory:
/// - `ca.pem`: the CA that signed the others; `other-ca.pem`: a CA that signed nothing here;
/// - `server.pem`/`server.key`: for `localhost` and `127.0.0.1`;
/// - `named.pem`/`named.key`: for `redis.test` alone (not the address it is reached at);
/// - `client.pem`/`client.key`: a client certificate.
pub struct Pki {
    dir: TempDir,
}

impl Pki {
    /// Makes every certificate; panics with openssl's stderr when it fails.
    pub fn new() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("rl-pki-")
            .tempdir()
            .expect("temp dir");
        let pki = Pki { dir };
        for ca in ["ca", "other-ca"] {
            pki.openssl(&[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=rl-test {ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
            ]);
        }
        pki.leaf("server", "subjectAltName=DNS:localhost,IP:127.0.0.1");
        pki.leaf("named", "subjectAltName=DNS:redis.test");
        pki.leaf("client", "extendedKeyUsage=clientAuth");
        pki
    }

    /// A key and a certificate signed by `ca.pem`, with `extension`.
    fn leaf(&self, name: &str, extension: &str) {
        let ext = format!("{name}.ext");
        std::fs::write(
            self.path(&ext),
            format!("basicConstraints=CA:FALSE\n{extension}\n"),
        )
        .expect("write the extension file");
        self.openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN=rl-test {name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("openssl runs (scripts/setup.sh installs it)");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// A file of the directory, by name (`ca.pem`, `client.key`...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The path as a TOML string's contents.
    pub fn toml_path(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}

/// A server that serves TLS on `tls_port` with `pki`'s certificate `cert` (`server` or
/// `named`), asking clients for a certificate of `ca.pem` when `client_certs` is true.
pub fn tls_server(flavor: Flavor, pki: &Pki, cert: &str, client_certs: bool) -> (Server, u16) {
    let tls_port = free_port();
    let server = ServerConfig::new(flavor)
        .arg("tls-port", &tls_port.to_string())
        .arg("tls-cert-file", &pki.toml_path(&format!("{cert}.pem")))
        .arg("tls-key-file", &pki.toml_path(&format!("{cert}.key")))
        .arg("tls-ca-cert-file", &pki.toml_path("ca.pem"))
        .arg("tls-auth-clients", if client_certs { "yes" } else { "no" })
        .start();
    (server, tls_port)
}
