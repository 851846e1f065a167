//! One webhook request: the URL rule applied to the addresses the host
//! resolves to now, a connection to an address that passed it (never a
//! second lookup, so a name that resolves differently a moment later, DNS
//! rebinding, cannot slip past the check), TLS for https (certificates
//! checked against the Mozilla roots of `webpki-roots`), and one HTTP/1.1
//! POST whose status is the answer. No proxy, no redirect is followed.

use hyper::body::Bytes;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpStream;

use crate::domain::webhook::{AddressClass, Host, Target, UrlError, check_address};

/// Why no answer came back.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("refused by the URL rule: {0}")]
    Refused(#[from] UrlError),
    #[error("the host {host} did not resolve: {source}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the host {0} resolved to no address")]
    NoAddress(String),
    #[error("connecting to {address}: {source}")]
    Connect {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS with {host}: {source}")]
    Tls {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("the request could not be built: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("the receiver closed the connection without answering")]
    Closed,
}

/// The addresses `target` may be sent to now: its address, or every
/// address its name resolves to, each checked by the URL rule. One refused
/// address refuses the name (a name that mixes public and private
/// addresses is not one to send to).
pub async fn resolve_checked(
    target: &Target,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, SendError> {
    let addresses = match &target.host {
        Host::Address(ip) => vec![SocketAddr::new(*ip, target.port)],
        Host::Name(name) => tokio::net::lookup_host((name.as_str(), target.port))
            .await
            .map_err(|source| SendError::Resolve {
                host: name.clone(),
                source,
            })?
            .collect(),
    };
    if addresses.is_empty() {
        return Err(SendError::NoAddress(host_text(target)));
    }
    for a in &addresses {
        check_address(a.ip(), allow_private)?;
        check_not_this_host(a.ip(), allow_private)?;
    }
    Ok(addresses)
}

/// Refuses an address of this very host (a public address of its own
/// interface included, which no range names) unless private targets are
/// allowed. Asked of the host itself: an address it can bind a socket to is
/// its own.
pub fn check_not_this_host(address: IpAddr, allow_private: bool) -> Result<(), UrlError> {
    if allow_private || address.is_unspecified() {
        return Ok(());
    }
    match std::net::UdpSocket::bind((address, 0)) {
        Ok(_) => Err(UrlError::PrivateAddress {
            address,
            class: AddressClass::ThisHost,
        }),
        Err(_) => Ok(()),
    }
}

fn host_text(target: &Target) -> String {
    match &target.host {
        Host::Address(ip) => ip.to_string(),
        Host::Name(name) => name.clone(),
    }
}

/// The `Host` header: the host, and the port when it is not the scheme's.
fn host_header(target: &Target) -> String {
    let host = match &target.host {
        Host::Address(IpAddr::V6(v6)) => format!("[{v6}]"),
        Host::Address(ip) => ip.to_string(),
        Host::Name(name) => name.clone(),
    };
    let default = if target.https { 443 } else { 80 };
    if target.port == default {
        host
    } else {
        format!("{host}:{}", target.port)
    }
}

/// The client TLS configuration, made once: the ring provider (the one the
/// server side uses) and the Mozilla roots.
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports the default TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

/// Connects to the first of `addresses` that accepts.
async fn connect(addresses: &[SocketAddr]) -> Result<TcpStream, SendError> {
    let mut last = None;
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(source) => {
                last = Some(SendError::Connect {
                    address: *address,
                    source,
                });
            }
        }
    }
    Err(last.unwrap_or_else(|| SendError::NoAddress(String::new())))
}

/// POSTs `body` with `headers` to `target` (whose host must pass the URL
/// rule when resolved now) and returns the status the receiver answered.
/// The caller bounds the time it may take.
pub async fn post(
    target: &Target,
    allow_private: bool,
    headers: &[(&str, String)],
    body: Bytes,
) -> Result<u16, SendError> {
    let addresses = resolve_checked(target, allow_private).await?;
    let stream = connect(&addresses).await?;
    if target.https {
        let name = match &target.host {
            Host::Address(ip) => rustls::pki_types::ServerName::IpAddress((*ip).into()),
            Host::Name(name) => {
                rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| {
                    SendError::Tls {
                        host: name.clone(),
                        source: std::io::Error::other(e),
                    }
                })?
            }
        };
        let tls = tokio_rustls::TlsConnector::from(tls_config())
            .connect(name, stream)
            .await
            .map_err(|source| SendError::Tls {
                host: host_text(target),
                source,
            })?;
        exchange(tls, target, headers, body).await
    } else {
        exchange(stream, target, headers, body).await
    }
}

/// One request and its status over an open connection, which is closed after.
async fn exchange<S>(
    stream: S,
    target: &Target,
    headers: &[(&str, String)],
    body: Bytes,
) -> Result<u16, SendError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    let mut request = hyper::Request::post(target.path_and_query.as_str())
        .header(hyper::header::HOST, host_header(target))
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(
            hyper::header::USER_AGENT,
            concat!("command-ledger/", env!("CARGO_PKG_VERSION")),
        )
        .header(hyper::header::CONNECTION, "close");
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let request = request.body(http_body_util::Full::new(body))?;
    let answer = sender.send_request(request);
    tokio::pin!(answer, connection);
    tokio::select! {
        biased;
        response = &mut answer => Ok(response?.status().as_u16()),
        // The connection ended: the answer may have come just before it
        // (a receiver that closes after answering), or not at all.
        ended = &mut connection => match (answer.await, ended) {
            (Ok(response), _) => Ok(response.status().as_u16()),
            (Err(_), Err(e)) => Err(SendError::Http(e)),
            (Err(_), Ok(())) => Err(SendError::Closed),
        },
    }
}

/// How long a request may take in all (resolution, connection, TLS, answer)
/// when no other value is configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
