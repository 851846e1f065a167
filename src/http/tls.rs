//! Optional TLS on the listener, for deployments without a terminating
//! proxy. Handshakes run in tasks of their own, bounded by a deadline, so a
//! client that opens a connection and says nothing holds one connection
//! place (of `--max-http-connections`) until the deadline, and never the
//! accept loop.

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::listener::{Bounded, BoundedListener};

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The certificate chain and private key a TLS listener presents.
#[derive(Debug, Clone)]
pub struct TlsConfig(Arc<ServerConfig>);

#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("reading the certificate chain from {path}")]
    Certificates {
        path: String,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} holds no certificate")]
    NoCertificate { path: String },
    #[error("reading the private key from {path}")]
    Key {
        path: String,
        source: rustls::pki_types::pem::Error,
    },
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

impl TlsConfig {
    /// Loads a PEM certificate chain (leaf first) and a PEM private key
    /// (PKCS#8, PKCS#1 or SEC1). TLS 1.2 and 1.3, HTTP/1.1.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsConfigError> {
        let certs = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|source| TlsConfigError::Certificates {
                path: cert.display().to_string(),
                source,
            })?;
        if certs.is_empty() {
            return Err(TlsConfigError::NoCertificate {
                path: cert.display().to_string(),
            });
        }
        let private_key =
            PrivateKeyDer::from_pem_file(key).map_err(|source| TlsConfigError::Key {
                path: key.display().to_string(),
                source,
            })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, private_key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsConfig(Arc::new(config)))
    }
}

/// Connections that finished their handshake, in the order they finished.
#[derive(Debug)]
pub(super) struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<Bounded>, SocketAddr)>,
    addr: SocketAddr,
    acceptor: JoinHandle<()>,
}

impl TlsListener {
    pub(super) fn new(mut inner: BoundedListener, config: &TlsConfig) -> io::Result<Self> {
        use axum::serve::Listener as _;
        let addr = inner.local_addr()?;
        let tls = TlsAcceptor::from(Arc::clone(&config.0));
        let (tx, ready) = mpsc::channel(64);
        let acceptor = tokio::spawn(async move {
            while !tx.is_closed() {
                let (io, peer) = inner.accept().await;
                let (tls, tx) = (tls.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(io)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener {
            ready,
            addr,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<Bounded>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept task only ends with this listener.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
