//! TLS to registries: the web PKI roots plus the operator's extra CA files
//! (a private registry's own CA), and the words for a failed handshake.
//!
//! Which registries are reached over plain HTTP at all is decided in
//! `http.rs` (loopback and the listed insecure hosts); everything else is
//! HTTPS, its certificate checked against these roots. There is no switch
//! that skips the check: a registry whose certificate does not verify is
//! given its CA, never trusted blindly.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::Error;

/// 4 MiB: the largest CA file read. A whole system bundle
/// (`/etc/ssl/certs/ca-certificates.crt`, ~150 certificates) is ~220 KiB; a
/// file larger than this is not a CA file, and must not fill memory.
pub const MAX_CA_FILE_BYTES: u64 = 4 << 20;
/// The most certificates taken from all CA files together (a system bundle
/// has ~150): every one is parsed on the first TLS connection.
pub const MAX_CA_CERTIFICATES: usize = 1000;

/// The certificates of `files` (PEM, each holding at least one
/// `CERTIFICATE` block; other blocks such as keys are ignored). A file that
/// cannot be read, is larger than [`MAX_CA_FILE_BYTES`], holds no
/// certificate or a block that does not decode is an error naming it.
pub fn extra_roots(files: &[PathBuf]) -> Result<Vec<CertificateDer<'static>>, Error> {
    let mut out = Vec::new();
    for path in files {
        let bad = |reason: String| Error::CaFile { path: path.display().to_string(), reason };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CA_FILE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| bad(e.to_string()))?;
        if bytes.len() as u64 > MAX_CA_FILE_BYTES {
            return Err(bad(format!(
                "larger than the limit of {} for a CA file",
                crate::services::limits::human_bytes(MAX_CA_FILE_BYTES)
            )));
        }
        let before = out.len();
        for cert in CertificateDer::pem_slice_iter(&bytes) {
            out.push(cert.map_err(|e| bad(format!("not a PEM certificate file: {e}")))?);
            if out.len() > MAX_CA_CERTIFICATES {
                return Err(bad(format!("more than {MAX_CA_CERTIFICATES} CA certificates in all")));
            }
        }
        if out.len() == before {
            return Err(bad("holds no PEM `CERTIFICATE` block".into()));
        }
    }
    Ok(out)
}

/// The client configuration: the web PKI roots and `extra` (each checked
/// here as a trust anchor: a certificate that is not one is an error naming
/// its file list).
pub(crate) fn client_config(
    extra: &[CertificateDer<'static>],
    files: &[PathBuf],
) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    for cert in extra {
        roots.add(cert.clone()).map_err(|e| Error::CaFile {
            path: files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "),
            reason: format!("a certificate is not usable as a CA: {e}"),
        })?;
    }
    // The same provider and versions as ureq's own default configuration
    // (ring, TLS 1.2 and 1.3); only the roots differ.
    let config = rustls::ClientConfig::builder_with_provider(rustls::crypto::ring::default_provider().into())
        .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
        .map_err(|e| Error::CaFile { path: String::new(), reason: e.to_string() })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// What a failed TLS handshake means, in words an operator can act on;
/// `None` when `e` is not a TLS failure (a refused connection, a timeout).
pub(crate) fn explain(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let tls = crate::hooks::http::rustls_error(e)?;
    Some(match tls {
        rustls::Error::InvalidCertificate(c) => {
            format!(
                "the registry's TLS certificate is not trusted: {} ({c:?}); give the CA that signed it with \
                 --registry-ca FILE or DURASYNC_REGISTRY_CA",
                certificate_problem(c)
            )
        }
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateHandshakeMessage { .. } => {
            "the registry did not answer in TLS (a plain-HTTP registry?); plain HTTP is used only for loopback \
             registries and those listed as insecure (--insecure-registry, DURASYNC_INSECURE_REGISTRIES)"
                .to_owned()
        }
        other => format!("TLS handshake failed: {other}"),
    })
}

fn certificate_problem(c: &rustls::CertificateError) -> &'static str {
    use rustls::CertificateError as C;
    match c {
        C::UnknownIssuer => "it is signed by an unknown certificate authority",
        C::NotValidForName | C::NotValidForNameContext { .. } => "it is not valid for this registry's name",
        C::Expired | C::ExpiredContext { .. } => "it has expired",
        C::NotValidYet | C::NotValidYetContext { .. } => "it is not valid yet",
        C::BadSignature => "its signature does not verify",
        C::Revoked => "it is revoked",
        C::BadEncoding => "it does not decode",
        _ => "it was refused",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &std::path::Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn error(files: &[PathBuf]) -> String {
        match extra_roots(files) {
            Err(e) => e.to_string(),
            Ok(c) => panic!("{} certificates accepted from {files:?}", c.len()),
        }
    }

    #[test]
    fn ca_files_that_cannot_be_used_are_refused_naming_the_file_and_the_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("missing.pem");
        let e = error(std::slice::from_ref(&missing));
        assert!(e.starts_with(&format!("registry CA file {}: ", missing.display())), "{e}");

        let key_only =
            file(tmp.path(), "key.pem", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
        assert!(error(&[key_only]).contains("holds no PEM `CERTIFICATE` block"));
        let text = file(tmp.path(), "text.pem", b"not a certificate\n");
        assert!(error(&[text]).contains("holds no PEM `CERTIFICATE` block"));

        let bad_base64 =
            file(tmp.path(), "bad.pem", b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n");
        assert!(error(&[bad_base64]).contains("not a PEM certificate file"));

        let huge = tmp.path().join("huge.pem");
        std::fs::File::create(&huge).unwrap().set_len(MAX_CA_FILE_BYTES + 1).unwrap();
        assert!(error(&[huge]).contains("larger than the limit of 4 MiB"));

        // Base64 that is no certificate passes the PEM reading and is
        // refused as a trust anchor when the client is made.
        let not_der =
            file(tmp.path(), "notder.pem", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
        let certs = extra_roots(std::slice::from_ref(&not_der)).unwrap();
        let settings = super::super::Settings { ca_files: vec![not_der.clone()], ..Default::default() };
        let e = super::super::Registry::new(settings).err().expect("a bad CA was accepted").to_string();
        assert!(e.contains(&not_der.display().to_string()) && e.contains("not usable as a CA"), "{e}");
        assert_eq!(certs.len(), 1);
    }

    #[test]
    fn too_many_ca_certificates_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let one = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let many = file(tmp.path(), "many.pem", one.repeat(MAX_CA_CERTIFICATES + 1).as_bytes());
        assert!(error(&[many]).contains(&format!("more than {MAX_CA_CERTIFICATES} CA certificates")));
    }

    #[test]
    fn errors_that_are_not_tls_are_not_explained_as_tls() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(explain(&refused), None);
        let wrapped = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::Expired),
        );
        let e = explain(&wrapped).expect("a wrapped certificate error");
        assert!(e.contains("it has expired") && e.contains("--registry-ca"), "{e}");
    }
}
