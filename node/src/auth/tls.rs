//! TLS on the client and admin listeners (rustls through tonic), the CLI's side of it, and
//! mutual TLS between members on the raft port.
//!
//! A node reads its certificate chain and key (PEM) at start; a renewed certificate is taken up
//! by restarting the node (one at a time: the others keep serving). Signatures travel in headers
//! and sign only a date, so TLS is what keeps them from being read and replayed on a shared
//! network.
//!
//! With `peer_ca_file`, the raft port is on mutual TLS between members (`auth::member_tls`): a
//! member is whoever holds a certificate the cluster's CA signed that names its member id, and
//! for the address it is dialled at.

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
    /// The CA (PEM) that signs the members' certificates: puts the raft port on mutual TLS. Needs
    /// `cert_file` and `key_file`, which this node then also presents to the members it dials.
    pub peer_ca_file: Option<PathBuf>,
}

/// The host part of `host:port` (brackets of an IPv6 address removed).
pub fn host_of(addr: &str) -> &str {
    addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_matches(['[', ']'])
}

/// Why TLS settings, or a channel to a TLS listener, cannot be used; each names the file or key
/// at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("[tls] {what} {}: {source}", path.display())]
    Read { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("[tls] cert_file and key_file must be PEM")]
    NotPem,
    #[error("[tls] cert_file and key_file go together")]
    HalfIdentity,
    #[error("[tls] peer_ca_file needs cert_file and key_file: the certificate this node presents to the other members")]
    PeerCaWithoutIdentity,
    #[error("[tls] peer_ca_file must be a PEM certificate")]
    PeerCaNotPem,
    /// An address no endpoint can be made of (nothing was dialled).
    #[error("bad address {addr:?}: {source}")]
    BadAddress { addr: String, source: tonic::transport::Error },
    /// The TLS settings a channel to `addr` needs were refused.
    #[error("{addr}: {source}")]
    Endpoint { addr: String, source: tonic::transport::Error },
}

pub(super) fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { what, path: path.to_path_buf(), source })
}

impl TlsConfig {
    /// The listeners' TLS settings, or `None` when TLS is off; an error names the file at fault.
    pub fn server(&self) -> Result<Option<ServerTlsConfig>, TlsError> {
        Ok(self.identity()?.map(|identity| ServerTlsConfig::new().identity(identity)))
    }

    /// The same identity for a listener tonic does not serve (the Remoting port): `None` when TLS
    /// is off.
    pub fn acceptor(&self) -> Result<Option<tokio_rustls::TlsAcceptor>, TlsError> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) else {
            return match (&self.cert_file, &self.key_file) {
                (None, None) => Ok(None),
                _ => Err(TlsError::HalfIdentity),
            };
        };
        let (cert, key) = (read(cert, "cert_file")?, read(key, "key_file")?);
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&cert).collect::<Result<_, _>>().map_err(|_| TlsError::NotPem)?;
        let key = PrivateKeyDer::from_pem_slice(&key).map_err(|_| TlsError::NotPem)?;
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
            .map_err(|_| TlsError::NotPem)?;
        Ok(Some(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(server))))
    }

    fn identity(&self) -> Result<Option<Identity>, TlsError> {
        match (&self.cert_file, &self.key_file) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => {
                let (cert, key) = (read(cert, "cert_file")?, read(key, "key_file")?);
                if !cert.starts_with(b"-----BEGIN") || !key.starts_with(b"-----BEGIN") {
                    return Err(TlsError::NotPem);
                }
                Ok(Some(Identity::from_pem(cert, key)))
            }
            _ => Err(TlsError::HalfIdentity),
        }
    }
}

/// A lazily connecting channel to `addr`: over TLS, verified against the CA certificate (PEM) at
/// `ca_file`, when one is given.
pub fn channel(addr: &str, ca_file: Option<&Path>) -> Result<Channel, TlsError> {
    let endpoint = match ca_file {
        None => Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|source| TlsError::BadAddress { addr: addr.to_string(), source })?,
        Some(ca_file) => {
            let ca = read(ca_file, "CA file")?;
            let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)).domain_name(host_of(addr));
            Endpoint::from_shared(format!("https://{addr}"))
                .and_then(|e| e.tls_config(tls))
                .map_err(|source| TlsError::Endpoint { addr: addr.to_string(), source })?
        }
    };
    let endpoint = endpoint.connect_timeout(Duration::from_secs(1)).tcp_nodelay(true);
    if crate::simulation::active() {
        #[cfg(feature = "sim")]
        return Ok(endpoint.connect_with_connector_lazy(crate::simulation::connector()));
    }
    Ok(endpoint.connect_lazy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_refused_rather_than_ignored() {
        assert!(toml::from_str::<TlsConfig>("peer_ca = \"ca.pem\"").is_err());
        let parsed: TlsConfig = toml::from_str("peer_ca_file = \"ca.pem\"").unwrap();
        assert_eq!(parsed.peer_ca_file.as_deref(), Some(Path::new("ca.pem")));
    }

    #[test]
    fn the_host_of_an_address_is_what_a_member_s_certificate_must_name() {
        assert_eq!(host_of("127.0.0.1:9081"), "127.0.0.1");
        assert_eq!(host_of("node-2.rockraft:9081"), "node-2.rockraft");
        assert_eq!(host_of("[::1]:9081"), "::1");
    }
}
