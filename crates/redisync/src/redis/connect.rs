//! How a [`Client`](crate::Client) reaches its server: credentials (fixed or
//! rotating), the reconnect policy, TLS, and the errors of a failed connect.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::error::{Error as RedisError, ErrorKind};
use fred::types::config::Server;

use crate::error::{Error, Result};

/// The error a [credential provider](crate::ClientBuilder::credential_provider)
/// returns.
pub type CredentialError = Box<dyn std::error::Error + Send + Sync>;

type ProviderFn = dyn Fn() -> Pin<Box<dyn Future<Output = std::result::Result<Credentials, CredentialError>> + Send>>
    + Send
    + Sync;

/// A user name and password for `AUTH` / `HELLO AUTH`, as a
/// [credential provider](crate::ClientBuilder::credential_provider) returns
/// them. Its `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    username: Option<String>,
    password: String,
}

impl Credentials {
    /// An ACL user and its password (`AUTH username password`).
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Credentials {
        Credentials {
            username: Some(username.into()),
            password: password.into(),
        }
    }

    /// A password alone: legacy `AUTH password` (`requirepass`), which is
    /// the ACL user `default`.
    pub fn password_only(password: impl Into<String>) -> Credentials {
        Credentials {
            username: None,
            password: password.into(),
        }
    }

    /// The user name; `None` for a password alone (the user `default`).
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    pub(crate) fn password_text(&self) -> &str {
        &self.password
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

/// Where the credentials of every connection come from.
#[derive(Clone, Default)]
pub(crate) enum CredentialSource {
    /// Those of the URL, if any.
    #[default]
    Url,
    /// Set on the builder (they replace the URL's).
    Fixed(Credentials),
    /// Asked for at each connect.
    Provider(Arc<Provider>),
}

impl std::fmt::Debug for CredentialSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialSource::Url => f.write_str("Url"),
            CredentialSource::Fixed(c) => f.debug_tuple("Fixed").field(c).finish(),
            CredentialSource::Provider(_) => f.write_str("Provider"),
        }
    }
}

/// A credential provider as fred calls it, which remembers the user it
/// gave last (for the message of a failed authentication) and counts
/// nothing else.
pub(crate) struct Provider {
    fetch: Box<ProviderFn>,
    last: Mutex<Option<Credentials>>,
}

impl Provider {
    pub(crate) fn new<F, Fut>(f: F) -> Provider
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Credentials, CredentialError>> + Send + 'static,
    {
        Provider {
            fetch: Box::new(move || Box::pin(f())),
            last: Mutex::new(None),
        }
    }

    /// The credentials it gave last, if any.
    pub(crate) fn last(&self) -> Option<Credentials> {
        crate::mutex::lock_unpoisoned(&self.last).clone()
    }
}

/// fred's side: fred calls it before each `AUTH`/`HELLO` (each connection,
/// each reconnection, each node and sentinel).
#[derive(Debug)]
pub(crate) struct FredProvider(pub(crate) Arc<Provider>);

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider").finish_non_exhaustive()
    }
}

impl fred::types::config::CredentialProvider for FredProvider {
    // `async_trait`'s desugaring, written out (no macro dependency).
    fn fetch<'a, 'b, 'f>(
        &'a self,
        _server: Option<&'b Server>,
    ) -> Pin<
        Box<
            dyn Future<Output = std::result::Result<(Option<String>, Option<String>), RedisError>>
                + Send
                + 'f,
        >,
    >
    where
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        Box::pin(async move {
            let credentials = (self.0.fetch)().await.map_err(|e| {
                RedisError::new(
                    ErrorKind::Auth,
                    format!("the credential provider failed: {e}"),
                )
            })?;
            *crate::mutex::lock_unpoisoned(&self.0.last) = Some(credentials.clone());
            Ok((credentials.username, Some(credentials.password)))
        })
    }
}

/// How a client reconnects after its connection broke (a server restart, a
/// failover, a network error): exponential back-off from `min_delay`,
/// doubling up to `max_delay`, with up to 100 ms of random jitter, for at
/// most `max_attempts` attempts in a row (unlimited by default).
///
/// The default is what redisync always did: 50 ms doubling up to 2 s,
/// forever. A limited policy gives up for good: a client whose attempts ran
/// out fails every command until it is dropped.
///
/// ```
/// use std::time::Duration;
/// use redisync::ReconnectPolicy;
/// let policy = ReconnectPolicy::exponential(Duration::from_millis(100), Duration::from_secs(5))
///     .max_attempts(20);
/// # let _ = policy;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct ReconnectPolicy {
    min_delay: Duration,
    max_delay: Duration,
    max_attempts: Option<u32>,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy::exponential(Duration::from_millis(50), Duration::from_secs(2))
    }
}

/// Bounds of [`ReconnectPolicy`]'s delays.
const MIN_RECONNECT_DELAY: Duration = Duration::from_millis(1);
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(300);

impl ReconnectPolicy {
    /// Back-off from `min_delay` doubling up to `max_delay`, forever.
    /// Checked at connect: `min_delay` at least 1 ms, `max_delay` at most
    /// 5 min, and `min_delay <= max_delay`.
    pub fn exponential(min_delay: Duration, max_delay: Duration) -> ReconnectPolicy {
        ReconnectPolicy {
            min_delay,
            max_delay,
            max_attempts: None,
        }
    }

    /// Gives up after `attempts` failed attempts in a row (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> ReconnectPolicy {
        self.max_attempts = Some(attempts);
        self
    }

    /// The first delay.
    pub fn min_delay(&self) -> Duration {
        self.min_delay
    }

    /// The longest delay.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// The attempts in a row before giving up; `None`: never gives up.
    pub fn attempts(&self) -> Option<u32> {
        self.max_attempts
    }

    pub(crate) fn validate(&self) -> Result<()> {
        crate::retry::check_delays(
            "reconnect_policy",
            (self.min_delay, self.max_delay),
            (MIN_RECONNECT_DELAY, MAX_RECONNECT_DELAY),
        )?;
        if self.max_attempts == Some(0) {
            return Err(Error::InvalidArgument(
                "reconnect_policy: max_attempts must be at least 1 (leave it unset for no limit)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// fred's policy (after [`ReconnectPolicy::validate`]).
    pub(crate) fn to_fred(self) -> fred::types::config::ReconnectPolicy {
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
        fred::types::config::ReconnectPolicy::new_exponential(
            self.max_attempts.unwrap_or(0),
            ms(self.min_delay),
            ms(self.max_delay),
            2,
        )
    }
}

/// Who authenticates, for messages: the user name, or `default`.
pub(crate) fn user_of(source: &CredentialSource, url_user: Option<&str>) -> String {
    let user = match source {
        CredentialSource::Url => url_user.map(str::to_owned),
        CredentialSource::Fixed(c) => c.username.clone(),
        CredentialSource::Provider(p) => p.last().and_then(|c| c.username),
    };
    user.filter(|u| !u.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

/// The secrets a message must never show.
pub(crate) fn secrets_of(source: &CredentialSource, url_password: Option<&str>) -> Vec<String> {
    let mut secrets: Vec<String> = url_password.map(str::to_owned).into_iter().collect();
    match source {
        CredentialSource::Url => {}
        CredentialSource::Fixed(c) => secrets.push(c.password.clone()),
        CredentialSource::Provider(p) => secrets.extend(p.last().map(|c| c.password)),
    }
    secrets.retain(|s| !s.is_empty());
    secrets
}

/// `text` with every secret replaced by `***`.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_owned(), |t, s| t.replace(s.as_str(), "***"))
}

/// fred's kind of a TLS error (I/O without TLS, where none happens).
pub(crate) fn tls_kind() -> ErrorKind {
    #[cfg(feature = "tls")]
    return ErrorKind::Tls;
    #[cfg(not(feature = "tls"))]
    return ErrorKind::IO;
}

/// What went wrong with a connect, for the message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The server refused the credentials.
    Auth,
    /// The TLS handshake failed: the server's certificate is not trusted.
    UntrustedCertificate,
    /// The TLS handshake failed: the certificate names another host.
    WrongName,
    /// The server wants a client certificate (mutual TLS).
    ClientCertificateRequired,
    /// A TLS client met a server that does not speak TLS.
    PlainServer,
    /// Another TLS failure.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Tls,
    /// Anything else.
    Other,
}

/// Classifies fred's error of a connect.
pub(crate) fn classify(e: &RedisError) -> Failure {
    let d = e.details();
    let code = d.split_whitespace().next().unwrap_or("");
    if *e.kind() == ErrorKind::Auth
        || matches!(code, "WRONGPASS" | "NOAUTH" | "NOPERM")
        || d.contains("invalid username-password")
        || d.contains("invalid password")
    {
        return Failure::Auth;
    }
    if d.contains("UnknownIssuer")
        || d.contains("BadSignature")
        || (d.contains("invalid peer certificate") || d.contains("InvalidCertificate("))
            && !d.contains("NotValidForName")
            && !d.contains("certificate not valid for name")
    {
        return Failure::UntrustedCertificate;
    }
    if d.contains("NotValidForName") || d.contains("certificate not valid for name") {
        return Failure::WrongName;
    }
    if d.contains("CertificateRequired")
        || d.contains("HandshakeFailure")
        || d.contains("alert") && d.contains("ertificate")
    {
        return Failure::ClientCertificateRequired;
    }
    if d.contains("corrupt message") || d.contains("InvalidContentType") {
        return Failure::PlainServer;
    }
    #[cfg(feature = "tls")]
    if *e.kind() == ErrorKind::Tls {
        return Failure::Tls;
    }
    Failure::Other
}

/// The hint a failure's message ends with (`tls`: the URL asks for TLS).
pub(crate) fn hint(failure: &Failure, tls: bool, timed_out: bool) -> &'static str {
    match failure {
        Failure::UntrustedCertificate => {
            " (TLS: the server's certificate is not signed by a trusted CA; wrong CA? \
             set ClientBuilder::tls_ca_pem to the CA that signed it)"
        }
        Failure::WrongName => {
            " (TLS: the server's certificate does not name this host; connect by a name \
             it carries, or set ClientBuilder::tls_server_name)"
        }
        Failure::ClientCertificateRequired => {
            " (TLS: the server refused the handshake; it may require a client certificate: \
             ClientBuilder::tls_client_cert_pem)"
        }
        Failure::PlainServer => {
            " (TLS: the server does not speak TLS; a plain server? use redis://)"
        }
        Failure::Tls | Failure::Auth => "",
        Failure::Other if tls && timed_out => {
            " (no TLS handshake answer: a plain server behind rediss://? use redis://)"
        }
        Failure::Other if tls => "",
        Failure::Other => " (a TLS server? then use rediss://, with the cargo feature `tls`)",
    }
}

#[cfg(feature = "tls")]
pub(crate) use tls::TlsSettings;

#[cfg(feature = "tls")]
mod tls {
    use std::sync::Arc;

    use fred::types::config::{Config, HostMapping, ServerConfig, TlsConfig, TlsHostMapping};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use crate::error::{Error, Result};

    /// The TLS settings of a [`ClientBuilder`](crate::ClientBuilder).
    #[derive(Clone, Default)]
    pub(crate) struct TlsSettings {
        pub(crate) ca_pem: Option<Vec<u8>>,
        pub(crate) client_cert: Option<(Vec<u8>, Vec<u8>)>,
        pub(crate) server_name: Option<String>,
    }

    impl std::fmt::Debug for TlsSettings {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("TlsSettings")
                .field("ca_pem", &self.ca_pem.as_ref().map(|_| "..."))
                .field(
                    "client_cert",
                    &self.client_cert.as_ref().map(|_| "(cert, ***)"),
                )
                .field("server_name", &self.server_name)
                .finish()
        }
    }

    impl TlsSettings {
        /// Whether anything was set.
        pub(crate) fn is_set(&self) -> bool {
            self.ca_pem.is_some() || self.client_cert.is_some() || self.server_name.is_some()
        }

        /// Puts a TLS connector with these settings on `config`.
        pub(crate) fn apply(&self, config: &mut Config) -> Result<()> {
            config.tls = Some(TlsConfig {
                connector: self.client_config()?.into(),
                hostnames: match &self.server_name {
                    Some(name) => TlsHostMapping::Custom(Arc::new(FixedName(name.clone()))),
                    None => TlsHostMapping::None,
                },
            });
            if let Some(name) = &self.server_name {
                let name: fred::bytes_utils::Str = name.as_str().into();
                let servers = match &mut config.server {
                    ServerConfig::Centralized { server } => std::slice::from_mut(server),
                    ServerConfig::Clustered { hosts, .. }
                    | ServerConfig::Sentinel { hosts, .. } => hosts.as_mut_slice(),
                };
                for s in servers {
                    s.tls_server_name = Some(name.clone());
                }
            }
            Ok(())
        }

        /// rustls' configuration, with the `ring` provider named (not the
        /// process default: with both providers compiled in, rustls would
        /// have to guess, and panics).
        fn client_config(&self) -> Result<rustls::ClientConfig> {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let builder = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| Error::InvalidArgument(format!("TLS setup: {e}")))?;
            let mut roots = rustls::RootCertStore::empty();
            if let Some(pem) = &self.ca_pem {
                let certs = certificates("tls_ca_pem", pem)?;
                for cert in certs {
                    roots.add(cert).map_err(|e| {
                        Error::InvalidArgument(format!(
                            "tls_ca_pem: a certificate is not a CA rustls takes: {e}"
                        ))
                    })?;
                }
            } else {
                // Unreadable system certificates are skipped: a server no
                // system CA signed fails its handshake with a message that
                // says so.
                let system = rustls_native_certs::load_native_certs();
                for cert in system.certs {
                    let _ = roots.add(cert);
                }
            }
            let builder = builder.with_root_certificates(roots);
            match &self.client_cert {
                None => Ok(builder.with_no_client_auth()),
                Some((chain, key)) => {
                    let chain = certificates("tls_client_cert_pem (certificate chain)", chain)?;
                    let key = PrivateKeyDer::from_pem_slice(key).map_err(|_| {
                        Error::InvalidArgument(
                            "tls_client_cert_pem: the key is not a PEM private key \
                             (PKCS#8, PKCS#1 or SEC1)"
                                .into(),
                        )
                    })?;
                    builder.with_client_auth_cert(chain, key).map_err(|e| {
                        Error::InvalidArgument(format!(
                            "tls_client_cert_pem: the key does not go with the certificate: {e}"
                        ))
                    })
                }
            }
        }

        /// Checks what can be checked before connecting.
        pub(crate) fn validate(&self) -> Result<()> {
            if let Some(name) = &self.server_name {
                rustls::pki_types::ServerName::try_from(name.as_str()).map_err(|_| {
                    Error::InvalidArgument(format!(
                        "tls_server_name {name:?} is neither a DNS name nor an IP address"
                    ))
                })?;
            }
            self.client_config().map(|_| ())
        }
    }

    /// Every certificate of `pem`; at least one.
    fn certificates(what: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::InvalidArgument(format!("{what}: bad PEM: {e}")))?;
        if certs.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{what}: no certificate (-----BEGIN CERTIFICATE-----) in the PEM"
            )));
        }
        Ok(certs)
    }

    /// The server name every cluster node is verified against.
    #[derive(Debug)]
    struct FixedName(String);

    impl HostMapping for FixedName {
        fn map(&self, _ip: &std::net::IpAddr, _default_host: &str) -> Option<String> {
            Some(self.0.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_show_their_password() {
        let c = Credentials::new("app", "s3cret");
        assert!(!format!("{c:?}").contains("s3cret"));
        let source = CredentialSource::Fixed(c);
        assert!(!format!("{source:?}").contains("s3cret"));
        assert_eq!(user_of(&source, None), "app");
        assert_eq!(scrub("x s3cret y", &secrets_of(&source, None)), "x *** y");
        assert_eq!(user_of(&CredentialSource::Url, None), "default");
    }

    #[test]
    fn reconnect_policy_bounds() {
        assert!(ReconnectPolicy::default().validate().is_ok());
        let ms = Duration::from_millis;
        for bad in [
            ReconnectPolicy::exponential(ms(0), ms(10)),
            ReconnectPolicy::exponential(ms(10), ms(5)),
            ReconnectPolicy::exponential(ms(10), Duration::from_secs(301)),
            ReconnectPolicy::exponential(ms(10), ms(20)).max_attempts(0),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains("reconnect_policy"), "{e}");
        }
        assert_eq!(
            ReconnectPolicy::default().to_fred(),
            fred::types::config::ReconnectPolicy::new_exponential(0, 50, 2000, 2)
        );
    }

    #[test]
    fn failures_are_told_apart() {
        let io = |d: &str| RedisError::new(ErrorKind::IO, d.to_owned());
        assert_eq!(
            classify(&io("invalid peer certificate: UnknownIssuer")),
            Failure::UntrustedCertificate
        );
        assert_eq!(
            classify(&io("invalid peer certificate: NotValidForName")),
            Failure::WrongName
        );
        assert_eq!(
            classify(&io("received corrupt message of type InvalidContentType")),
            Failure::PlainServer
        );
        assert_eq!(
            classify(&RedisError::new(
                ErrorKind::Auth,
                "WRONGPASS invalid username-password pair"
            )),
            Failure::Auth
        );
        assert_eq!(classify(&io("Connection refused")), Failure::Other);
        assert_eq!(
            classify(&io(
                "Custom { kind: InvalidData, error: InvalidCertificate(CaUsedAsEndEntity) }"
            )),
            Failure::UntrustedCertificate
        );
        assert_eq!(
            crate::error::tidy(
                "Custom { kind: InvalidData, error: InvalidCertificate(UnknownIssuer) }"
            ),
            "InvalidCertificate(UnknownIssuer)"
        );
        assert_eq!(
            crate::error::tidy("Connection refused"),
            "Connection refused"
        );
        assert_eq!(
            crate::error::tidy(
                r#"Os { code: 104, kind: ConnectionReset, message: "Connection reset by peer" }"#
            ),
            "Connection reset by peer"
        );
    }
}
