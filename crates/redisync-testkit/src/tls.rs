//! TLS test servers: certificates made at run time with `rcgen`.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::TestkitError;

/// A CA, a server certificate signed by it (for `127.0.0.1` and
/// `localhost`) and a client certificate signed by it (for mutual TLS), all
/// made at run time, as PEM. Keys are ECDSA P-256.
///
/// ```no_run
/// # async fn demo() -> Result<(), redisync_testkit::TestkitError> {
/// use redisync_testkit::{RedisServer, TestCerts};
/// let certs = TestCerts::generate()?;
/// let server = RedisServer::try_start_tls(&certs, false, &[]).await?;
/// let url = server.tls_url(); // "rediss://127.0.0.1:PORT"
/// # let _ = url;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TestCerts {
    /// The CA's certificate: what a client trusts.
    pub ca_pem: String,
    /// The server's certificate.
    pub server_cert_pem: String,
    /// The server's private key.
    pub server_key_pem: String,
    /// A client certificate for mutual TLS.
    pub client_cert_pem: String,
    /// Its private key.
    pub client_key_pem: String,
}

impl std::fmt::Debug for TestCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCerts").finish_non_exhaustive()
    }
}

fn rcgen_failed(what: &str, e: &rcgen::Error) -> TestkitError {
    TestkitError::Io {
        context: format!("cannot make the test {what}"),
        source: std::io::Error::other(e.to_string()),
    }
}

impl TestCerts {
    /// Makes a fresh CA and the certificates it signs.
    ///
    /// # Errors
    /// [`TestkitError::Io`] when `rcgen` fails (it does not in practice).
    pub fn generate() -> Result<TestCerts, TestkitError> {
        let ca_key = KeyPair::generate().map_err(|e| rcgen_failed("CA key", &e))?;
        let mut ca =
            CertificateParams::new(Vec::<String>::new()).map_err(|e| rcgen_failed("CA", &e))?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "redisync test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca
            .self_signed(&ca_key)
            .map_err(|e| rcgen_failed("CA", &e))?;

        let leaf = |name: &str, sans: Vec<String>, usages: Vec<ExtendedKeyUsagePurpose>| {
            let key = KeyPair::generate().map_err(|e| rcgen_failed("key", &e))?;
            let mut params = CertificateParams::new(sans).map_err(|e| rcgen_failed(name, &e))?;
            params.distinguished_name.push(DnType::CommonName, name);
            params.extended_key_usages = usages;
            let cert = params
                .signed_by(&key, &ca_cert, &ca_key)
                .map_err(|e| rcgen_failed(name, &e))?;
            Ok::<_, TestkitError>((cert.pem(), key.serialize_pem()))
        };
        // The server certificate also serves as the server's own client
        // certificate (replication, cluster bus): both usages.
        let (server_cert_pem, server_key_pem) = leaf(
            "redisync test server",
            vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )?;
        let (client_cert_pem, client_key_pem) = leaf(
            "redisync test client",
            vec!["redisync-test-client".to_owned()],
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        )?;
        Ok(TestCerts {
            ca_pem: ca_cert.pem(),
            server_cert_pem,
            server_key_pem,
            client_cert_pem,
            client_key_pem,
        })
    }
}

/// Whether a server's log says its build has no TLS.
pub(crate) fn lacks_tls(log_tail: &str) -> bool {
    let log = log_tail.to_ascii_lowercase();
    log.contains("tls") && (log.contains("not supported") || log.contains("not built"))
        || log.contains("bad directive") && log.contains("tls")
}
