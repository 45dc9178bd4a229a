//! The shared secret and the HMAC-SHA256 proofs of the handshake, pure
//! (the `hmac` and `sha2` crates do the cryptography).
//!
//! Each side proves it knows the secret by a MAC over the whole handshake
//! transcript: both HELLOs (each with a fresh random nonce), a channel
//! binding (TLS exporter, or zeros), and a label naming its role. Fresh
//! nonces make a recorded proof useless on a new connection; the role
//! label makes a reflected proof useless.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::proto::control::{HELLO_LEN, NONCE_LEN, PROOF_LEN};

/// Shortest secret accepted: proofs are visible on the wire, and a short
/// secret could be guessed offline from one.
pub const MIN_SECRET_LEN: usize = 16;
/// Longest secret accepted.
pub const MAX_SECRET_LEN: usize = 4096;
/// Bytes of the channel binding mixed into the proofs.
pub const BINDING_LEN: usize = 32;

const DOMAIN: &[u8] = b"rdmasync link auth v2\0";

type HmacSha256 = Hmac<Sha256>;

/// The shared secret. Never printed (its `Debug` is redacted) and wiped
/// from memory when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Zeroizing<Vec<u8>>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Secret {
    /// Wraps `bytes`, which must be [`MIN_SECRET_LEN`] to [`MAX_SECRET_LEN`] long.
    ///
    /// # Errors
    /// Why the secret is refused (never the secret itself).
    pub fn new(bytes: Vec<u8>) -> Result<Self, String> {
        let bytes = Zeroizing::new(bytes);
        if bytes.len() < MIN_SECRET_LEN {
            return Err(format!(
                "too short ({} bytes; at least {MIN_SECRET_LEN})",
                bytes.len()
            ));
        }
        if bytes.len() > MAX_SECRET_LEN {
            return Err(format!(
                "too long ({} bytes; at most {MAX_SECRET_LEN})",
                bytes.len()
            ));
        }
        Ok(Self(bytes))
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length; this cannot fail.
        <HmacSha256 as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"))
    }
}

/// Which side of a connection a proof comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The node that dialed.
    Dialer,
    /// The node that accepted.
    Acceptor,
}

impl Side {
    fn label(self) -> &'static [u8] {
        match self {
            Self::Dialer => b"dialer proof\0",
            Self::Acceptor => b"acceptor proof\0",
        }
    }
}

/// What both sides MAC: the two HELLO bodies (dialer's first) and the
/// channel binding.
#[derive(Clone)]
pub struct Transcript {
    /// The dialer's HELLO body.
    pub dialer_hello: [u8; HELLO_LEN],
    /// The acceptor's HELLO body.
    pub acceptor_hello: [u8; HELLO_LEN],
    /// TLS exporter bytes, or zeros without TLS.
    pub binding: [u8; BINDING_LEN],
}

fn mac_of(secret: &Secret, side: Side, t: &Transcript) -> HmacSha256 {
    let mut mac = secret.mac();
    mac.update(DOMAIN);
    mac.update(side.label());
    mac.update(&t.dialer_hello);
    mac.update(&t.acceptor_hello);
    mac.update(&t.binding);
    mac
}

/// The proof `side` sends.
pub fn proof(secret: &Secret, side: Side, t: &Transcript) -> [u8; PROOF_LEN] {
    mac_of(secret, side, t).finalize().into_bytes().into()
}

/// Whether `tag` is `side`'s proof for this transcript (constant time).
pub fn verify(secret: &Secret, side: Side, t: &Transcript, tag: &[u8]) -> bool {
    mac_of(secret, side, t).verify_slice(tag).is_ok()
}

/// A fresh random nonce from the operating system.
///
/// # Errors
/// The OS error when no randomness is available.
pub fn nonce() -> Result<[u8; NONCE_LEN], std::io::Error> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript(n: u8) -> Transcript {
        Transcript {
            dialer_hello: [n; HELLO_LEN],
            acceptor_hello: [n + 1; HELLO_LEN],
            binding: [0; BINDING_LEN],
        }
    }

    #[test]
    fn proofs_verify_only_with_the_same_secret_side_and_transcript() {
        let s = Secret::new(b"correct horse battery staple".to_vec()).unwrap();
        let other = Secret::new(b"correct horse battery stapler".to_vec()).unwrap();
        let t = transcript(1);
        let p = proof(&s, Side::Dialer, &t);
        assert!(verify(&s, Side::Dialer, &t, &p));
        assert!(!verify(&other, Side::Dialer, &t, &p), "other secret");
        assert!(!verify(&s, Side::Acceptor, &t, &p), "reflected");
        assert!(!verify(&s, Side::Dialer, &transcript(2), &p), "replayed");
        let mut bound = t.clone();
        bound.binding[0] = 1;
        assert!(!verify(&s, Side::Dialer, &bound, &p), "other channel");
        assert!(!verify(&s, Side::Dialer, &t, &p[..31]), "truncated");
    }

    #[test]
    fn known_answer() {
        // HMAC-SHA256 as specified in docs/protocol.md, computed independently.
        let s = Secret::new(b"0123456789abcdef".to_vec()).unwrap();
        let t = transcript(0);
        let mut mac = <HmacSha256 as Mac>::new_from_slice(b"0123456789abcdef").unwrap();
        mac.update(b"rdmasync link auth v2\0acceptor proof\0");
        mac.update(&[0u8; HELLO_LEN]);
        mac.update(&[1u8; HELLO_LEN]);
        mac.update(&[0u8; BINDING_LEN]);
        let want: [u8; 32] = mac.finalize().into_bytes().into();
        assert_eq!(proof(&s, Side::Acceptor, &t), want);
    }

    #[test]
    fn secrets_are_bounded_and_never_printed() {
        assert!(Secret::new(vec![b'x'; MIN_SECRET_LEN - 1]).is_err());
        assert!(Secret::new(vec![b'x'; MAX_SECRET_LEN + 1]).is_err());
        let s = Secret::new(b"a very secret value".to_vec()).unwrap();
        assert!(!format!("{s:?}").contains("secret value"));
        let err = Secret::new(b"short-secret".to_vec()).unwrap_err();
        assert!(!err.contains("short-secret"));
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
