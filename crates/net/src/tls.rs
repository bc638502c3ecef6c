//! TLS with rustls and the ring provider: for the API nodes' client ports
//! (SQL and REST), and the cluster's own identities on the native protocol.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Loads a PEM certificate chain and private key into a TLS acceptor;
/// the error says which file is wrong and how.
pub fn acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, String> {
    let certs = read_certificates(cert)?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read the TLS private key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the TLS certificate and key do not fit together: {e}"))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read the TLS certificate {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot read the TLS certificate {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The part a process plays in a cluster. Its certificate names it, and a
/// node accepts from a peer only what that part may send: peer messages
/// only from data nodes, requests of a data node's lifecycle only from one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    DataNode,
    Mgmd,
    /// SQL and REST nodes, native clients, `latsdb mgm` and the benchmarks.
    Api,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::DataNode, Role::Mgmd, Role::Api];

    /// The name of this role's files in a TLS directory (`<name>.pem`,
    /// `<name>.key`).
    pub fn file_stem(self) -> &'static str {
        match self {
            Role::DataNode => "data-node",
            Role::Mgmd => "mgmd",
            Role::Api => "api",
        }
    }

    /// The DNS name a certificate carries among its subject alternative
    /// names to hold this role. `.invalid` is reserved (RFC 6761), so no
    /// real host can be named so by mistake.
    pub fn certificate_name(self) -> &'static str {
        match self {
            Role::DataNode => "data-node.latsdb.invalid",
            Role::Mgmd => "mgmd.latsdb.invalid",
            Role::Api => "api.latsdb.invalid",
        }
    }
}

/// ring's cipher suites with AES-128-GCM first: both ends of a native link
/// are latsdb, so the first suite is the one used, and AES-128 encrypts the
/// frames of a batch of reads with fewer rounds than AES-256 (rustls's
/// first choice); it is a TLS 1.3 suite of full strength.
fn cluster_provider() -> rustls::crypto::CryptoProvider {
    let mut provider = rustls::crypto::ring::default_provider();
    let first = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
    provider.cipher_suites.retain(|s| s.suite() != first.suite());
    provider.cipher_suites.insert(0, first);
    provider
}

/// A process's TLS identity in its cluster: the cluster CA it trusts and
/// its own certificate, used both when it connects (as a client, verifying
/// the server's host name) and when it accepts (requiring a client
/// certificate of the same CA).
pub struct ClusterTls {
    role: Role,
    dir: PathBuf,
    connector: tokio_rustls::TlsConnector,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterTls({} from {})", self.role.file_stem(), self.dir.display())
    }
}

impl ClusterTls {
    /// Loads `ca.pem`, `<role>.pem` and `<role>.key` from `dir` (as
    /// `latsdb certs create` writes them).
    pub fn load(dir: &Path, role: Role) -> Result<Arc<ClusterTls>, String> {
        let ca = read_certificates(&dir.join("ca.pem"))?;
        let mut roots = rustls::RootCertStore::empty();
        for certificate in ca {
            roots
                .add(certificate)
                .map_err(|e| format!("{} is not a usable CA certificate: {e}", dir.join("ca.pem").display()))?;
        }
        let roots = Arc::new(roots);
        let cert_path = dir.join(format!("{}.pem", role.file_stem()));
        let key_path = dir.join(format!("{}.key", role.file_stem()));
        let chain = read_certificates(&cert_path)?;
        let key = PrivateKeyDer::from_pem_file(&key_path)
            .map_err(|e| format!("cannot read the TLS private key {}: {e}", key_path.display()))?;
        let provider = Arc::new(cluster_provider());
        let client_verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                .build()
                .map_err(|e| format!("the CA in {} cannot verify clients: {e}", dir.display()))?;
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup failed: {e}"))?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| format!("{} and {} do not fit together: {e}", cert_path.display(), key_path.display()))?;
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup failed: {e}"))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("{} and {} do not fit together: {e}", cert_path.display(), key_path.display()))?;
        let tls = ClusterTls {
            role,
            dir: dir.to_path_buf(),
            connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        };
        Ok(Arc::new(tls))
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The directory the identity was loaded from (passed on to the
    /// processes a launcher starts).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }

    /// Starts the client handshake; the server must hold a certificate
    /// for the host part of `address` (an IP address or a DNS name).
    pub(crate) fn connect(
        &self,
        address: &str,
        stream: crate::link::TlsIo,
    ) -> latsdb_types::Result<tokio_rustls::Connect<crate::link::TlsIo>> {
        let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string()).map_err(|e| {
            latsdb_types::DbError::bad_request(format!("{address}: {host} is not a host name TLS can verify: {e}"))
        })?;
        Ok(self.connector.connect(name, stream))
    }
}

/// Whether a peer may act as a data node (open a peer link, or speak for a
/// data node to the management server): always without TLS (`tls` None);
/// with it, only with a data node's certificate made for `from`.
pub fn check_data_node(
    tls: Option<&ClusterTls>,
    identity: Option<&PeerIdentity>,
    from: Option<IpAddr>,
) -> Result<(), String> {
    if tls.is_none() {
        return Ok(());
    }
    // accept_link completes a handshake that requires a client
    // certificate, so a TLS link always has one.
    let Some(identity) = identity else { return Err("it has no certificate".to_string()) };
    identity.check(Role::DataNode, from)
}

/// The certificate a peer presented, for what the peer may do.
pub struct PeerIdentity {
    certificate: CertificateDer<'static>,
}

impl PeerIdentity {
    pub fn new(certificate: CertificateDer<'static>) -> PeerIdentity {
        PeerIdentity { certificate }
    }

    fn names(&self, name: &ServerName<'_>) -> bool {
        // The chain was verified in the handshake; this only reads names.
        let Ok(parsed) = rustls::server::ParsedCertificate::try_from(&self.certificate) else { return false };
        rustls::client::verify_server_name(&parsed, name).is_ok()
    }

    pub fn has_role(&self, role: Role) -> bool {
        match ServerName::try_from(role.certificate_name()) {
            Ok(name) => self.names(&name),
            Err(_) => false,
        }
    }

    /// Whether the certificate holds `role` and names the address the peer
    /// connects from: certificates of data nodes are bound to the hosts
    /// they were made for. An unknown address is refused.
    pub fn check(&self, role: Role, from: Option<IpAddr>) -> Result<(), String> {
        if !self.has_role(role) {
            return Err(format!("its certificate does not hold the {} role", role.file_stem()));
        }
        let Some(ip) = from else { return Err("its address is unknown".to_string()) };
        if !self.names(&ServerName::IpAddress(ip.into())) {
            return Err(format!("its {} certificate is not made for its address {ip}", role.file_stem()));
        }
        Ok(())
    }
}
