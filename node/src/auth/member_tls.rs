//! Mutual TLS between members on the raft port, done here rather than by tonic so that the
//! listener can (a) name the member each connection comes from, (b) close that connection when
//! the member is removed, (c) bound the handshake, and (d) take up renewed certificate files
//! without a restart.
//!
//! A member's certificate names it with one URI SAN, `rockraft://<cluster>/node/<id>` (the
//! cluster being the node's `group` setting): the operator who runs the CA decides who is which
//! member. A certificate the CA signed for anything else (another service of the same
//! organisation, another cluster) names no member and is refused at the handshake.
//!
//! Certificate, key and CA files are looked at again at most once a second, when a connection is
//! made; a changed set is loaded for the connections made after it, and a set that does not load
//! (a key half written, say) is reported and the one before it kept.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::codegen::http::Uri;
use tonic::transport::server::Connected;

use crate::auth::tls::{TlsConfig, TlsError, read};

/// Why mutual TLS between members cannot be set up; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum MemberTlsError {
    #[error(transparent)]
    Files(#[from] TlsError),
    /// rustls refused the certificates or key (a key that does not match the certificate, say).
    #[error("[tls] {0}")]
    Refused(String),
    /// This node's own certificate names another member.
    #[error("[tls] cert_file {}: the certificate names member {named}, but this node's node_id is {id}", path.display())]
    OtherMember { path: PathBuf, named: u64, id: u64 },
    /// This node's own certificate names no member.
    #[error("[tls] cert_file {}: {why}", path.display())]
    NotAMember { path: PathBuf, why: Unnamed },
}

/// The scheme of the URI SAN that names a member.
const SCHEME: &str = "rockraft://";

/// How often the files are looked at again for a renewal.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// The URI SAN a certificate for member `id` of `cluster` carries.
pub fn member_uri(cluster: &str, id: u64) -> String {
    format!("{SCHEME}{cluster}/node/{id}")
}

/// Why a certificate names no member of this cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unnamed {
    #[error("the certificate could not be read")]
    Unreadable,
    #[error("the certificate names no member ({SCHEME}<cluster>/node/<id> URI SAN)")]
    NoMemberUri,
    #[error("the certificate names {0} members: a member certificate names one")]
    Several(usize),
    #[error("the certificate names a member of cluster {0:?}, not of this one")]
    OtherCluster(String),
}

/// Who a peer's certificate says it is: the member id it names, and its subject (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub member: Result<u64, Unnamed>,
    pub subject: String,
}

/// The member of `cluster` the certificate (DER) names.
pub fn named_member(der: &[u8], cluster: &str) -> Named {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Named { member: Err(Unnamed::Unreadable), subject: String::new() };
    };
    let subject = cert.subject().to_string();
    let uris: Vec<&str> = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::URI(uri) if uri.starts_with(SCHEME) => Some(*uri),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let member = match uris.as_slice() {
        [] => Err(Unnamed::NoMemberUri),
        [uri] => parse_member_uri(uri, cluster),
        many => Err(Unnamed::Several(many.len())),
    };
    Named { member, subject }
}

fn parse_member_uri(uri: &str, cluster: &str) -> Result<u64, Unnamed> {
    let rest = uri.strip_prefix(SCHEME).ok_or(Unnamed::NoMemberUri)?;
    let (named_cluster, id) = rest.split_once("/node/").ok_or(Unnamed::NoMemberUri)?;
    if named_cluster != cluster {
        return Err(Unnamed::OtherCluster(named_cluster.to_string()));
    }
    // Digits only: "+1" or " 1" would parse, and a name must have one spelling.
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Unnamed::NoMemberUri);
    }
    id.parse().map_err(|_| Unnamed::NoMemberUri)
}

/// The files mutual TLS is made of, and the member the certificate must name.
#[derive(Debug, Clone)]
struct Files {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    cluster: String,
    id: u64,
}

type Stamps = [Option<SystemTime>; 3];

impl Files {
    fn stamps(&self) -> Stamps {
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        [modified(&self.cert), modified(&self.key), modified(&self.ca)]
    }

    /// Server and client settings from the files as they are now.
    fn load(&self) -> Result<Configs, MemberTlsError> {
        let chain_pem = read(&self.cert, "cert_file")?;
        let key_pem = read(&self.key, "key_file")?;
        let ca_pem = read(&self.ca, "peer_ca_file")?;
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&chain_pem).collect::<Result<_, _>>().map_err(|_| TlsError::NotPem)?;
        // This node's own certificate must name it, as loaded at start and as renewed: a typo
        // would otherwise surface as every other member refusing it.
        let own = chain.first().ok_or(TlsError::NotPem)?;
        match named_member(own, &self.cluster).member {
            Ok(named) if named == self.id => {}
            Ok(named) => return Err(MemberTlsError::OtherMember { path: self.cert.clone(), named, id: self.id }),
            Err(why) => return Err(MemberTlsError::NotAMember { path: self.cert.clone(), why }),
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| TlsError::NotPem)?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(&ca_pem) {
            roots.add(ca.map_err(|_| TlsError::PeerCaNotPem)?).map_err(|_| TlsError::PeerCaNotPem)?;
        }
        if roots.is_empty() {
            return Err(TlsError::PeerCaNotPem.into());
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let refused = |e: rustls::Error| MemberTlsError::Refused(e.to_string());
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), provider.clone())
                .build()
                .map_err(|e| MemberTlsError::Refused(e.to_string()))?;
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(refused)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(refused)?;
        server.alpn_protocols = vec![b"h2".to_vec()];
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(refused)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(refused)?;
        client.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Configs { server: Arc::new(server), client: Arc::new(client) })
    }
}

#[derive(Clone)]
struct Configs {
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

struct Loaded {
    configs: Configs,
    stamps: Stamps,
    checked: Instant,
}

/// Mutual TLS between members: this node's certificate, the cluster's CA, and the cluster's name
/// the members' certificates must carry. Cheap to clone.
#[derive(Clone)]
pub struct MemberTls {
    files: Arc<Files>,
    loaded: Arc<Mutex<Loaded>>,
}

impl std::fmt::Debug for MemberTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemberTls({:?}, cluster {:?})", self.files.cert, self.files.cluster)
    }
}

impl MemberTls {
    /// Mutual TLS between members of cluster `cluster` for member `id` (its certificate must
    /// name it) as `[tls]` sets it up, or `None` without `peer_ca_file`; an error names the file
    /// or key at fault.
    pub fn from_config(config: &TlsConfig, cluster: &str, id: u64) -> Result<Option<MemberTls>, MemberTlsError> {
        let Some(ca_file) = &config.peer_ca_file else { return Ok(None) };
        let (Some(cert), Some(key)) = (&config.cert_file, &config.key_file) else {
            return Err(match config.cert_file.is_some() || config.key_file.is_some() {
                true => TlsError::HalfIdentity.into(),
                false => TlsError::PeerCaWithoutIdentity.into(),
            });
        };
        if !read(ca_file, "peer_ca_file")?.starts_with(b"-----BEGIN CERTIFICATE") {
            return Err(TlsError::PeerCaNotPem.into());
        }
        MemberTls::load(cert, key, ca_file, cluster, id).map(Some)
    }

    /// Loads the files for member `id`; an error names the one at fault.
    pub fn load(cert: &Path, key: &Path, ca: &Path, cluster: &str, id: u64) -> Result<MemberTls, MemberTlsError> {
        let files = Files {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            ca: ca.to_path_buf(),
            cluster: cluster.to_string(),
            id,
        };
        let stamps = files.stamps();
        let configs = files.load()?;
        let loaded = Loaded { configs, stamps, checked: Instant::now() };
        Ok(MemberTls { files: Arc::new(files), loaded: Arc::new(Mutex::new(loaded)) })
    }

    /// The settings as they are now: loaded again first when a file changed since the last look
    /// (at most once a second). No lock is held while files are read.
    fn configs(&self) -> Configs {
        let stale = {
            let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
            if loaded.checked.elapsed() < RELOAD_CHECK {
                return loaded.configs.clone();
            }
            loaded.checked = Instant::now();
            loaded.stamps
        };
        let stamps = self.files.stamps();
        if stamps == stale {
            return self.loaded.lock().unwrap_or_else(|p| p.into_inner()).configs.clone();
        }
        let reloaded = self.files.load();
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        match reloaded {
            Ok(configs) => {
                tracing::info!(cert = %self.files.cert.display(), "member certificate files changed: loaded again");
                loaded.configs = configs;
                loaded.stamps = stamps;
            }
            // Reported once per change of the files: the stamps are kept, so the same broken set
            // is not read again every second.
            Err(e) => {
                tracing::error!(error = %e, "member certificate files changed but do not load: the ones before are kept");
                loaded.stamps = stamps;
            }
        }
        loaded.configs.clone()
    }

    /// The TLS server side of one accepted connection, within `timeout`.
    pub async fn accept<IO>(&self, io: IO, timeout: Duration) -> io::Result<tokio_rustls::server::TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.configs().server);
        match tokio::time::timeout(timeout, acceptor.accept(io)).await {
            Ok(accepted) => accepted,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake not done in time")),
        }
    }

    /// What the peer of a TLS connection names itself.
    pub fn peer_of<IO>(&self, stream: &tokio_rustls::server::TlsStream<IO>) -> Named {
        match stream.get_ref().1.peer_certificates().and_then(|c| c.first()) {
            Some(cert) => named_member(cert, &self.files.cluster),
            None => Named { member: Err(Unnamed::Unreadable), subject: String::new() },
        }
    }

    /// A connector for tonic's channels to the member at a raft address: TLS with this node's
    /// certificate, the member's certificate checked against the CA and the address's host, and
    /// it must name a member of this cluster (`expected`, when the caller knows which).
    pub fn connector(&self, expected: Option<u64>) -> MemberConnector {
        MemberConnector { tls: self.clone(), expected }
    }
}

/// Dials a member over mutual TLS (see [`MemberTls::connector`]).
#[derive(Clone)]
pub struct MemberConnector {
    tls: MemberTls,
    expected: Option<u64>,
}

type Dialled = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;

impl tonic::codegen::Service<Uri> for MemberConnector {
    type Response = Dialled;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Dialled>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let (tls, expected) = (self.tls.clone(), self.expected);
        Box::pin(async move {
            let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{uri}: {what}"));
            let host = uri.host().ok_or_else(|| bad("no host"))?.trim_matches(['[', ']']).to_string();
            let port = uri.port_u16().ok_or_else(|| bad("no port"))?;
            let name = ServerName::try_from(host.clone()).map_err(|_| bad("the host is no name"))?;
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = tokio_rustls::TlsConnector::from(tls.configs().client).connect(name, tcp).await?;
            let peer = stream.get_ref().1.peer_certificates().and_then(|c| c.first());
            let named = peer.map(|c| named_member(c, &tls.files.cluster).member).unwrap_or(Err(Unnamed::Unreadable));
            // Wrapped as a TLS failure: the member refuses to be who this node dials, as a
            // certificate the CA did not sign would (`raft::refusals` tells those apart).
            let refused = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, rustls::Error::General(why));
            match (named, expected) {
                (Ok(id), Some(want)) if id != want => {
                    Err(refused(format!("{host}:{port} presents the certificate of member {id}, not of member {want}")))
                }
                (Ok(_), _) => Ok(hyper_util::rt::TokioIo::new(stream)),
                (Err(why), _) => Err(refused(format!("{host}:{port}: {why}"))),
            }
        })
    }
}

/// What the raft listener knows of a connection: where it comes from and, on mutual TLS, the
/// member its certificate names. Tonic puts it in every request's extensions.
#[derive(Debug, Clone)]
pub struct MemberConnection {
    pub remote: Option<SocketAddr>,
    /// The member id; `None` on a listener without mutual TLS.
    pub member: Option<u64>,
    pub subject: Arc<str>,
}

/// A connection to the raft port, open until its peer closes it or `closed` resolves (the member
/// its certificate names was removed). A task of its own waits for that; the reads and writes
/// only look at a flag (they are the replication's hot path).
pub struct MemberStream<IO> {
    io: IO,
    info: MemberConnection,
    closed: Option<Closing>,
}

/// The task waiting for a connection's member to be removed, and what it tells the connection.
struct Closing {
    state: Arc<ClosedFlag>,
    waiting: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct ClosedFlag {
    closed: std::sync::atomic::AtomicBool,
    reader: futures_util::task::AtomicWaker,
}

impl Drop for Closing {
    fn drop(&mut self) {
        self.waiting.abort();
    }
}

impl<IO> MemberStream<IO> {
    pub fn new(io: IO, info: MemberConnection, closed: Option<Pin<Box<dyn Future<Output = ()> + Send>>>) -> Self {
        let closed = closed.map(|gone| {
            let state = Arc::new(ClosedFlag::default());
            let flag = Arc::clone(&state);
            let waiting = tokio::spawn(async move {
                gone.await;
                flag.closed.store(true, std::sync::atomic::Ordering::Release);
                flag.reader.wake();
            });
            Closing { state, waiting }
        });
        MemberStream { io, info, closed }
    }

    /// An error once the connection is to be closed.
    fn check_closed(&self) -> io::Result<()> {
        match &self.closed {
            Some(c) if c.state.closed.load(std::sync::atomic::Ordering::Acquire) => {
                Err(io::Error::new(io::ErrorKind::ConnectionAborted, "the member was removed from the cluster"))
            }
            _ => Ok(()),
        }
    }
}

impl<IO: Send + 'static> Connected for MemberStream<IO> {
    type ConnectInfo = MemberConnection;

    fn connect_info(&self) -> MemberConnection {
        self.info.clone()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for MemberStream<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // An idle connection waits here: woken when its member is removed.
        if let Some(c) = &this.closed {
            c.state.reader.register(cx.waker());
        }
        this.check_closed()?;
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for MemberStream<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_closed()?;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA, and member certificates it signs, written to a directory.
    struct Ca {
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
        dir: PathBuf,
    }

    impl Ca {
        fn new(dir: &Path) -> Ca {
            use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let cert = params.self_signed(&key).unwrap();
            std::fs::write(dir.join("ca.pem"), cert.pem()).unwrap();
            Ca { issuer: rcgen::Issuer::new(params, key), dir: dir.to_path_buf() }
        }

        /// A certificate for 127.0.0.1 with these URI SANs; its DER, and the paths of it and its key.
        fn issue(&self, file: &str, uris: &[String]) -> (Vec<u8>, PathBuf, PathBuf) {
            self.issue_for(file, "127.0.0.1", uris)
        }

        fn issue_for(&self, file: &str, host: &str, uris: &[String]) -> (Vec<u8>, PathBuf, PathBuf) {
            use rcgen::{CertificateParams, DnType, KeyPair, SanType};
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(vec![host.to_string()]).unwrap();
            for uri in uris {
                params.subject_alt_names.push(SanType::URI(uri.clone().try_into().unwrap()));
            }
            params.distinguished_name.push(DnType::CommonName, file);
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            let (pem, key_path) = (self.dir.join(format!("{file}.pem")), self.dir.join(format!("{file}.key")));
            std::fs::write(&pem, cert.pem()).unwrap();
            std::fs::write(&key_path, key.serialize_pem()).unwrap();
            (cert.der().to_vec(), pem, key_path)
        }
    }

    #[test]
    fn a_certificate_names_one_member_of_this_cluster_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new(dir.path());
        let member = |uris: &[String]| named_member(&ca.issue("c", uris).0, "rockraft");
        let named = member(&[member_uri("rockraft", 2)]);
        assert_eq!(named.member, Ok(2));
        assert!(named.subject.contains("CN=c"), "{}", named.subject);
        assert_eq!(member(&[]).member, Err(Unnamed::NoMemberUri), "a certificate the CA issued to another service");
        assert_eq!(member(&[member_uri("staging", 2)]).member, Err(Unnamed::OtherCluster("staging".into())));
        assert_eq!(member(&[member_uri("rockraft", 1), member_uri("rockraft", 2)]).member, Err(Unnamed::Several(2)));
        // Other URIs are not member names.
        assert_eq!(member(&["https://example.org/".into(), member_uri("rockraft", 3)]).member, Ok(3));
        assert_eq!(named_member(b"not DER", "rockraft").member, Err(Unnamed::Unreadable));
        for bad in ["rockraft://rockraft/node/", "rockraft://rockraft/node/+1", "rockraft://rockraft/node/1/x"] {
            assert_eq!(parse_member_uri(bad, "rockraft"), Err(Unnamed::NoMemberUri), "{bad}");
        }
    }

    #[test]
    fn member_tls_needs_the_node_s_own_certificate_and_a_pem_ca() {
        const PEM_CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        const PEM_KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n";
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let config = |cert: bool, key: bool, ca: Option<&str>| {
            let write = |name: &str, text: &str| {
                let p = d.join(name);
                std::fs::write(&p, text).unwrap();
                p
            };
            TlsConfig {
                cert_file: cert.then(|| write("node.pem", PEM_CERT)),
                key_file: key.then(|| write("node.key", PEM_KEY)),
                peer_ca_file: ca.map(|text| write("ca.pem", text)),
            }
        };
        let member = |c: &TlsConfig| MemberTls::from_config(c, "rockraft", 1);
        // Neither, or client and admin TLS alone: no member TLS.
        assert!(member(&config(false, false, None)).unwrap().is_none());
        assert!(member(&config(true, true, None)).unwrap().is_none());
        // A CA without the node's certificate and key: refused, saying what is missing.
        for (cert, key) in [(false, false), (true, false), (false, true)] {
            let text = member(&config(cert, key, Some(PEM_CERT))).unwrap_err().to_string();
            assert!(text.contains("cert_file") && text.contains("key_file"), "{text}");
        }
        let err = member(&config(true, true, Some("not a certificate"))).unwrap_err();
        assert!(matches!(err, MemberTlsError::Files(TlsError::PeerCaNotPem)), "{err}");
        let missing = TlsConfig { peer_ca_file: Some(d.join("absent.pem")), ..config(true, true, None) };
        let err = member(&missing).unwrap_err();
        assert!(matches!(&err, MemberTlsError::Files(TlsError::Read { what: "peer_ca_file", .. })), "{err}");
        assert!(err.to_string().contains("absent.pem"), "{err}");
        // PEM that holds no certificate.
        assert!(member(&config(true, true, Some(PEM_CERT))).is_err());
    }

    #[test]
    fn a_node_whose_own_certificate_names_no_member_does_not_start() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new(dir.path());
        let (_, cert, key) = ca.issue("plain", &[]);
        let err = MemberTls::load(&cert, &key, &dir.path().join("ca.pem"), "rockraft", 1).unwrap_err();
        assert!(matches!(err, MemberTlsError::NotAMember { .. }), "{err}");
        let (_, cert, key) = ca.issue("member", &[member_uri("rockraft", 1)]);
        let err = MemberTls::load(&cert, &key, &dir.path().join("ca.pem"), "rockraft", 2).unwrap_err();
        assert!(err.to_string().contains("names member 1") && err.to_string().contains("node_id is 2"), "{err}");
        MemberTls::load(&cert, &key, &dir.path().join("ca.pem"), "rockraft", 1).expect("its own certificate");
    }

    /// Serves TLS handshakes on a loopback port with `tls`, for as long as the test runs.
    async fn serve(tls: MemberTls) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let tls = tls.clone();
                tokio::spawn(async move {
                    if let Ok(mut stream) = tls.accept(tcp, Duration::from_secs(5)).await {
                        use tokio::io::AsyncReadExt as _;
                        let _ = stream.read(&mut [0u8; 1]).await;
                    }
                });
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_dialled_member_must_present_the_certificate_of_the_member_expected_and_renewed_files_are_taken_up() {
        use tonic::codegen::Service as _;
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new(dir.path());
        let ca_path = dir.path().join("ca.pem");
        let (_, server_cert, server_key) = ca.issue("server", &[member_uri("rockraft", 1)]);
        let (_, client_cert, client_key) = ca.issue("client", &[member_uri("rockraft", 2)]);
        let (_, elsewhere_cert, elsewhere_key) = ca.issue_for("elsewhere", "localhost", &[member_uri("rockraft", 4)]);
        let (_, moved_cert, moved_key) = ca.issue_for("moved", "localhost", &[member_uri("rockraft", 4)]);
        let moved = MemberTls::load(&moved_cert, &moved_key, &ca_path, "rockraft", 4).unwrap();
        let server = MemberTls::load(&server_cert, &server_key, &ca_path, "rockraft", 1).unwrap();
        let client = MemberTls::load(&client_cert, &client_key, &ca_path, "rockraft", 2).unwrap();
        let server_uri: Uri = serve(server.clone()).await.parse().unwrap();
        client.connector(Some(1)).call(server_uri.clone()).await.expect("member 1 is who was dialled");
        client.connector(None).call(server_uri.clone()).await.expect("a member of this cluster");
        let err =
            client.connector(Some(3)).call(server_uri.clone()).await.map(drop).expect_err("member 1 is not member 3");
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        // Member 4's certificate names another host than the one it is dialled at: refused, until
        // its files are renewed with one for that host, taken up without a restart.
        let uri: Uri = serve(moved).await.parse().unwrap();
        assert!(client.connector(Some(4)).call(uri.clone()).await.is_err(), "a certificate for another host");
        let (_, renewed_cert, renewed_key) = ca.issue("renewed", &[member_uri("rockraft", 4)]);
        std::fs::rename(renewed_key, &moved_key).unwrap();
        std::fs::rename(renewed_cert, &moved_cert).unwrap();
        tokio::time::sleep(RELOAD_CHECK + Duration::from_millis(100)).await;
        client.connector(Some(4)).call(uri).await.expect("the renewed certificate");
        // A renewal that names another member is not taken: the files before stay in use.
        std::fs::rename(elsewhere_key, &server_key).unwrap();
        std::fs::rename(elsewhere_cert, &server_cert).unwrap();
        tokio::time::sleep(RELOAD_CHECK + Duration::from_millis(100)).await;
        client.connector(Some(1)).call(server_uri).await.expect("member 1's certificate before");
    }
}
