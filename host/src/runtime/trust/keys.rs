//! The ECDSA public keys Sigstore uses: P-256 (cosign keys, Fulcio leaf
//! certificates, Rekor's log key) and P-384 (Fulcio's CA keys), each with
//! the hash its curve is used with (SHA-256, SHA-384).

use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
use sha2::{Digest, Sha256, Sha384};

/// An ECDSA public key on P-256 or P-384.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EcKey {
    /// NIST P-256.
    P256(p256::ecdsa::VerifyingKey),
    /// NIST P-384.
    P384(p384::ecdsa::VerifyingKey),
}

/// A hash an X.509 or Sigstore signature names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
}

impl Hash {
    /// `bytes` hashed.
    pub fn of(self, bytes: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => Sha256::digest(bytes).to_vec(),
            Hash::Sha384 => Sha384::digest(bytes).to_vec(),
        }
    }
}

impl EcKey {
    /// A key from its DER SubjectPublicKeyInfo (P-256 or P-384).
    pub fn from_spki_der(der: &[u8]) -> Result<EcKey, String> {
        use p256::pkcs8::DecodePublicKey as _;
        if let Ok(k) = p256::ecdsa::VerifyingKey::from_public_key_der(der) {
            return Ok(EcKey::P256(k));
        }
        if let Ok(k) = <p384::ecdsa::VerifyingKey as p384::pkcs8::DecodePublicKey>::from_public_key_der(der) {
            return Ok(EcKey::P384(k));
        }
        Err("not an ECDSA P-256 or P-384 public key (DER SubjectPublicKeyInfo)".into())
    }

    /// The hash this key's curve is used with.
    pub fn hash(&self) -> Hash {
        match self {
            EcKey::P256(_) => Hash::Sha256,
            EcKey::P384(_) => Hash::Sha384,
        }
    }

    /// Whether `sig` (ASN.1 DER) is this key's over the digest `prehash`.
    pub fn verify_prehash(&self, prehash: &[u8], sig: &[u8]) -> bool {
        match self {
            EcKey::P256(k) => {
                p256::ecdsa::Signature::from_der(sig).is_ok_and(|s| k.verify_prehash(prehash, &s).is_ok())
            }
            EcKey::P384(k) => {
                p384::ecdsa::Signature::from_der(sig).is_ok_and(|s| k.verify_prehash(prehash, &s).is_ok())
            }
        }
    }

    /// Whether `sig` (ASN.1 DER) is this key's over `message`, hashed with
    /// its curve's hash.
    pub fn verify(&self, message: &[u8], sig: &[u8]) -> bool {
        self.verify_prehash(&self.hash().of(message), sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Signer as _;
    use p256::pkcs8::EncodePublicKey as _;

    #[test]
    fn both_curves_verify_their_own_signatures_only() {
        let sk = p256::ecdsa::SigningKey::from_slice(&[3; 32]).unwrap();
        let der = sk.verifying_key().to_public_key_der().unwrap();
        let key = EcKey::from_spki_der(der.as_bytes()).unwrap();
        let sig: p256::ecdsa::Signature = sk.sign(b"message");
        assert!(key.verify(b"message", sig.to_der().as_bytes()));
        assert!(!key.verify(b"messagf", sig.to_der().as_bytes()));
        let sk384 = p384::ecdsa::SigningKey::from_slice(&[5; 48]).unwrap();
        let der384 = p384::pkcs8::EncodePublicKey::to_public_key_der(sk384.verifying_key()).unwrap();
        let key384 = EcKey::from_spki_der(der384.as_bytes()).unwrap();
        let sig384: p384::ecdsa::Signature = sk384.sign(b"message");
        assert!(key384.verify(b"message", sig384.to_der().as_bytes()));
        assert!(!key.verify(b"message", sig384.to_der().as_bytes()));
        assert!(EcKey::from_spki_der(b"junk").unwrap_err().contains("P-256 or P-384"));
    }
}
