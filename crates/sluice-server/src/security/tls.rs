//! TLS with rustls on the ring provider (not aws-lc-rs, a heavy C build):
//! the acceptor pgwire uses after an SSLRequest, and a listener that
//! serves HTTPS to axum. Certificates and keys are PEM files, read once at
//! start-up (a bad file stops the start, it does not surface later).

use pgwire::tokio::tokio_rustls::TlsAcceptor;
use pgwire::tokio::tokio_rustls::rustls::{self, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::TlsFiles;

/// TLS handshakes in progress at once on the HTTPS listener; beyond this
/// new connections are closed until one finishes.
const HANDSHAKES_MAX: usize = 64;
/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS acceptors of a server: pgwire (ALPN `postgresql`) and HTTPS.
#[derive(Clone)]
pub struct TlsAcceptors {
    pub pgwire: TlsAcceptor,
    pub https: TlsAcceptor,
}

/// Reads the certificate chain and key and builds both acceptors.
pub fn acceptors(files: &TlsFiles) -> Result<TlsAcceptors, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| format!("--tls-cert {}: {e}", files.cert.display()))?;
    if certs.is_empty() {
        return Err(format!("--tls-cert {}: no certificate in it", files.cert.display()));
    }
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| format!("--tls-key {}: {e}", files.key.display()))?;
    let config = |alpn: &[u8]| -> Result<TlsAcceptor, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| format!("--tls-cert/--tls-key: {e}"))?;
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    };
    Ok(TlsAcceptors {
        pgwire: config(b"postgresql")?,
        https: config(b"http/1.1")?,
    })
}

/// A TCP listener whose connections are TLS streams, for `axum::serve`.
/// Handshakes run concurrently (a slow client holds up nobody), each with
/// a deadline, at most [`HANDSHAKES_MAX`] at once.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Option<(pgwire::tokio::tokio_rustls::server::TlsStream<TcpStream>, SocketAddr)>>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> Self {
        TlsListener {
            tcp,
            acceptor,
            handshakes: JoinSet::new(),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = pgwire::tokio::tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => {
                    let Ok((socket, addr)) = accepted else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    if self.handshakes.len() >= HANDSHAKES_MAX {
                        continue; // dropped: closed
                    }
                    let acceptor = self.acceptor.clone();
                    self.handshakes.spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
                            Ok(Ok(stream)) => Some((stream, addr)),
                            _ => None,
                        }
                    });
                }
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(ready)) = done {
                        return ready;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
