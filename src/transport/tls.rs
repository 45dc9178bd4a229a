//! TLS for the TCP transport (rustls with the ring provider): both nodes
//! present a certificate and verify the other's against the configured CA;
//! the dialer also checks that the certificate names the peer it dialed.
//! Loaded once at module load; a file that does not parse refuses the load.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

use crate::error::{Error, HandshakeFailure, Result};
use crate::ops::config::Config;
use crate::proto::auth::BINDING_LEN;
use crate::transport::channel::TlsSession;

/// Label of the TLS exporter that binds the secret's proofs to the session.
const EXPORTER_LABEL: &[u8] = b"EXPORTER-rdmasync-link-auth";

/// Client and server configurations built from the `tls-*` files.
pub struct TlsConfig {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
}

fn config_error(arg: &str, reason: impl Into<String>) -> Error {
    Error::Config {
        arg: arg.to_owned(),
        reason: reason.into(),
    }
}

fn read_certs(arg: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| config_error(arg, format!("'{}': {e}", path.display())))?;
    if certs.is_empty() {
        return Err(config_error(
            arg,
            format!("'{}' holds no PEM certificate", path.display()),
        ));
    }
    Ok(certs)
}

fn need<'a>(arg: &str, p: Option<&'a Path>) -> Result<&'a Path> {
    p.ok_or_else(|| config_error(arg, "required with tls=yes"))
}

impl TlsConfig {
    /// Loads the certificate, key and CA named in `config`.
    ///
    /// # Errors
    /// [`Error::Config`] naming the file argument that cannot be used.
    pub fn load(config: &Config) -> Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = read_certs(
            "tls-cert-file",
            need("tls-cert-file", config.tls_cert_file.as_deref())?,
        )?;
        let key_path = need("tls-key-file", config.tls_key_file.as_deref())?;
        let key = PrivateKeyDer::from_pem_file(key_path)
            .map_err(|e| config_error("tls-key-file", format!("'{}': {e}", key_path.display())))?;
        let ca_path = need("tls-ca-cert-file", config.tls_ca_cert_file.as_deref())?;
        let mut roots = RootCertStore::empty();
        for ca in read_certs("tls-ca-cert-file", ca_path)? {
            roots.add(ca).map_err(|e| {
                config_error("tls-ca-cert-file", format!("'{}': {e}", ca_path.display()))
            })?;
        }
        let roots = Arc::new(roots);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| config_error("tls-ca-cert-file", e.to_string()))?;
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error("tls", e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| {
                config_error(
                    "tls-key-file",
                    format!("does not match the certificate: {e}"),
                )
            })?;
        server.send_tls13_tickets = 0;
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error("tls", e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .map_err(|e| {
                config_error(
                    "tls-key-file",
                    format!("does not match the certificate: {e}"),
                )
            })?;
        Ok(Self {
            client: Arc::new(client),
            server: Arc::new(server),
        })
    }
}

fn failure_of(e: &std::io::Error) -> HandshakeFailure {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(
            rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::AlertReceived(_),
        ) => HandshakeFailure::Auth,
        Some(_) => HandshakeFailure::Malformed,
        None => HandshakeFailure::Incomplete,
    }
}

/// Runs the TLS handshake on `sock` (blocking, with a read timeout set)
/// until `deadline`; returns the session and its channel binding.
fn complete(
    mut conn: rustls::Connection,
    sock: &mut TcpStream,
    deadline: Instant,
    timeout_ms: u64,
    abandoned: &dyn Fn() -> bool,
) -> Result<(Arc<TlsSession>, [u8; BINDING_LEN])> {
    while conn.is_handshaking() || conn.wants_write() {
        if abandoned() {
            return Err(Error::handshake(
                HandshakeFailure::Incomplete,
                "TLS handshake abandoned",
            ));
        }
        if Instant::now() >= deadline {
            return Err(Error::handshake(
                HandshakeFailure::Incomplete,
                format!("TLS handshake not completed within {timeout_ms} ms"),
            ));
        }
        match conn.complete_io(sock) {
            Ok((0, 0)) if conn.is_handshaking() => {
                return Err(Error::handshake(
                    HandshakeFailure::Incomplete,
                    "connection closed during the TLS handshake",
                ))
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => {
                return Err(Error::handshake(
                    failure_of(&e),
                    format!("TLS handshake failed: {e}"),
                ))
            }
        }
    }
    let binding = conn
        .export_keying_material([0u8; BINDING_LEN], EXPORTER_LABEL, None)
        .map_err(|e| Error::handshake(HandshakeFailure::Malformed, format!("TLS exporter: {e}")))?;
    Ok((TlsSession::new(conn), binding))
}

impl TlsConfig {
    /// Dialer side: TLS client to `host` (checked against its certificate).
    ///
    /// # Errors
    /// [`Error::Handshake`]: a certificate that does not verify is an auth failure.
    pub fn connect(
        &self,
        sock: &mut TcpStream,
        host: &str,
        deadline: Instant,
        timeout_ms: u64,
        abandoned: &dyn Fn() -> bool,
    ) -> Result<(Arc<TlsSession>, [u8; BINDING_LEN])> {
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            Error::handshake(
                HandshakeFailure::Malformed,
                format!("peer '{host}' is not a name TLS can check: {e}"),
            )
        })?;
        let conn = ClientConnection::new(self.client.clone(), name)
            .map_err(|e| Error::handshake(HandshakeFailure::Malformed, e.to_string()))?;
        complete(conn.into(), sock, deadline, timeout_ms, abandoned)
    }

    /// Acceptor side: TLS server requiring a client certificate from the CA.
    ///
    /// # Errors
    /// [`Error::Handshake`]: a certificate that does not verify is an auth failure.
    pub fn accept(
        &self,
        sock: &mut TcpStream,
        deadline: Instant,
        timeout_ms: u64,
        abandoned: &dyn Fn() -> bool,
    ) -> Result<(Arc<TlsSession>, [u8; BINDING_LEN])> {
        let conn = ServerConnection::new(self.server.clone())
            .map_err(|e| Error::handshake(HandshakeFailure::Malformed, e.to_string()))?;
        complete(conn.into(), sock, deadline, timeout_ms, abandoned)
    }
}
