//! TLS on the listener (tests/fixtures/tls: a test CA, `ca.pem`, and a
//! certificate it issued for localhost; the CA's key was thrown away): a client that trusts the certificate is served; a
//! plaintext client and a client that trusts nothing are not; a client that
//! opens a connection and never shakes hands does not hold up anyone else.

use command_ledger::http::{self, AppState, TlsConfig};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::harness::fresh_pool;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

async fn serve_tls() -> std::net::SocketAddr {
    let config = TlsConfig::from_pem_files(&fixture("cert.pem"), &fixture("key.pem")).unwrap();
    let state = AppState::new(
        crate::harness::as_role(
            &fresh_pool().await,
            command_ledger::db::roles::ServiceRole::Api,
        ),
        crate::harness::ledger_backend(),
        Default::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        http::serve_with(listener, state, Some(config), std::future::pending())
            .await
            .unwrap();
    });
    addr
}

fn connector(trust_fixture: bool) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    if trust_fixture {
        for cert in CertificateDer::pem_file_iter(fixture("ca.pem")).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// `GET /healthz` over TLS; the whole response, or the handshake's error.
async fn get_healthz(addr: std::net::SocketAddr, trust: bool) -> std::io::Result<String> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = connector(trust).connect(name, tcp).await?;
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = String::new();
    tls.read_to_string(&mut response).await?;
    Ok(response)
}

#[tokio::test]
async fn the_listener_serves_https_to_clients_that_trust_its_certificate() {
    let addr = serve_tls().await;
    let response = get_healthz(addr, true).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    assert!(response.contains("\"status\":\"ok\""), "{response}");

    // A client that does not trust the certificate gets no further.
    assert!(get_healthz(addr, false).await.is_err());

    // Plain HTTP to the TLS port gets no HTTP answer.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer)).await;
    assert!(!answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
}

#[tokio::test]
async fn a_silent_connection_does_not_hold_up_other_handshakes() {
    let addr = serve_tls().await;
    // Connections that never send a ClientHello.
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    let response = tokio::time::timeout(Duration::from_secs(5), get_healthz(addr, true))
        .await
        .expect("served while the silent connections wait")
        .unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
}

#[test]
fn a_missing_or_mismatched_key_is_a_start_up_error() {
    let missing = TlsConfig::from_pem_files(&fixture("cert.pem"), &fixture("absent.pem"));
    assert!(missing.unwrap_err().to_string().contains("absent.pem"));
    // The certificate file holds no key; the key file holds no certificate.
    let swapped = TlsConfig::from_pem_files(&fixture("key.pem"), &fixture("cert.pem"));
    assert!(swapped.is_err());
}
