//! TLS on the client and admin listeners (rustls through tonic), and the CLI's side of it.
//!
//! A node reads its certificate chain and key (PEM) at start; a renewed certificate is taken up
//! by restarting the node (one at a time: the others keep serving). Signatures travel in headers
//! and sign only a date, so TLS is what keeps them from being read and replayed on a shared
//! network.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

/// The `[tls]` section of a node's configuration: both paths, or neither (plain HTTP/2).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// The certificate chain clients verify, PEM: the node's certificate first.
    pub cert_file: Option<PathBuf>,
    /// Its private key, PEM.
    pub key_file: Option<PathBuf>,
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("[tls] {what} {}: {e}", path.display()))
}

impl TlsConfig {
    /// The listeners' TLS settings, or `None` when TLS is off; an error names the file at fault.
    pub fn server(&self) -> Result<Option<ServerTlsConfig>, String> {
        match (&self.cert_file, &self.key_file) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => {
                let (cert, key) = (read(cert, "cert_file")?, read(key, "key_file")?);
                if !cert.starts_with(b"-----BEGIN") || !key.starts_with(b"-----BEGIN") {
                    return Err("[tls] cert_file and key_file must be PEM".into());
                }
                Ok(Some(ServerTlsConfig::new().identity(Identity::from_pem(cert, key))))
            }
            _ => Err("[tls] cert_file and key_file go together".into()),
        }
    }
}

/// A lazily connecting channel to `addr`: over TLS, verified against the CA certificate (PEM) at
/// `ca_file`, when one is given.
pub fn channel(addr: &str, ca_file: Option<&Path>) -> Result<Channel, String> {
    let endpoint = match ca_file {
        None => Endpoint::from_shared(format!("http://{addr}")).map_err(|e| format!("bad address {addr:?}: {e}"))?,
        Some(ca_file) => {
            let ca = read(ca_file, "CA file")?;
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_matches(['[', ']']);
            let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)).domain_name(host);
            Endpoint::from_shared(format!("https://{addr}"))
                .and_then(|e| e.tls_config(tls))
                .map_err(|e| format!("{addr}: {e}"))?
        }
    };
    Ok(endpoint.connect_timeout(Duration::from_secs(1)).tcp_nodelay(true).connect_lazy())
}
