//! SCRAM-SHA-256 verifiers (RFC 5802/7677, stored as Postgres stores them:
//! `SCRAM-SHA-256$<iterations>:<salt>:<StoredKey>:<ServerKey>`, base64),
//! the check of a clear-text password against one (HTTP Basic), and API
//! token secrets and their digests.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use pgwire::api::auth::sasl::scram::{ScramSecret, gen_salted_password};
use ring::{digest, hmac};

/// PBKDF2 iterations of new verifiers (Postgres' default).
pub const SCRAM_ITERATIONS: usize = 4096;
/// Salt bytes of new verifiers (Postgres uses 16).
const SALT_BYTES: usize = 16;
/// Random bytes in an API token's secret.
const TOKEN_SECRET_BYTES: usize = 32;
/// What every token secret starts with (so it is recognisable in a leak scan).
pub const TOKEN_PREFIX: &str = "sluice_";

/// A fresh verifier for `password` with a random salt.
pub fn make_verifier(password: &str) -> String {
    let salt: [u8; SALT_BYTES] = rand::random();
    verifier_with_salt(password, &salt, SCRAM_ITERATIONS)
}

fn verifier_with_salt(password: &str, salt: &[u8], iterations: usize) -> String {
    let salted = gen_salted_password(password, salt, iterations);
    let client_key = hmac_sha256(&salted, b"Client Key");
    let stored_key = digest::digest(&digest::SHA256, &client_key);
    let server_key = hmac_sha256(&salted, b"Server Key");
    format!(
        "SCRAM-SHA-256${iterations}:{}:{}:{}",
        STANDARD.encode(salt),
        STANDARD.encode(stored_key.as_ref()),
        STANDARD.encode(server_key)
    )
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::sign(&key, message).as_ref().to_vec()
}

/// The parts of a stored verifier, as pgwire's SCRAM exchange takes them.
pub fn parse_verifier(verifier: &str) -> Option<ScramSecret> {
    let rest = verifier.strip_prefix("SCRAM-SHA-256$")?;
    let (iterations, keys) = rest.split_once(':')?;
    let fields: Vec<&str> = keys.split(':').collect();
    let [salt_b64, stored_b64, server_b64] = fields.as_slice() else {
        return None;
    };
    Some(ScramSecret::Verifier {
        salt: STANDARD.decode(salt_b64).ok()?,
        iterations: iterations.parse().ok()?,
        stored_key: STANDARD.decode(stored_b64).ok()?,
        server_key: STANDARD.decode(server_b64).ok()?,
    })
}

/// A verifier that no password matches, for a role that does not exist:
/// the exchange with an unknown user costs what it costs with a known one
/// (salt derived from the name, so a repeated attempt sees the same salt).
pub fn mock_secret(user: &str) -> ScramSecret {
    let salt = digest::digest(&digest::SHA256, format!("sluice mock salt {user}").as_bytes());
    ScramSecret::Verifier {
        salt: salt.as_ref()[..SALT_BYTES].to_vec(),
        iterations: SCRAM_ITERATIONS,
        stored_key: vec![0; 32],
        server_key: vec![0; 32],
    }
}

/// Whether `password` matches `verifier` (constant time in the compare).
pub fn password_matches(verifier: &str, password: &str) -> bool {
    let Some(ScramSecret::Verifier {
        salt,
        iterations,
        stored_key,
        ..
    }) = parse_verifier(verifier)
    else {
        return false;
    };
    if iterations > 1_000_000 {
        return false;
    }
    let salted = gen_salted_password(password, &salt, iterations);
    let client_key = hmac_sha256(&salted, b"Client Key");
    let computed = digest::digest(&digest::SHA256, &client_key);
    constant_time_eq(computed.as_ref(), &stored_key)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A new token secret (shown once) and its hex SHA-256 (stored).
pub fn new_token() -> (String, String) {
    let bytes: [u8; TOKEN_SECRET_BYTES] = rand::random();
    let secret = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let digest = token_digest(&secret);
    (secret, digest)
}

/// The hex SHA-256 of a token secret.
pub fn token_digest(secret: &str) -> String {
    digest::digest(&digest::SHA256, secret.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's example: user "user", password "pencil", salt
    /// W22ZaJ0SNY7soEsUEjb6gQ==, 4096 iterations; the ServerKey follows
    /// from its server signature, the StoredKey is Postgres' for the same
    /// inputs.
    #[test]
    fn verifier_matches_the_rfc_7677_example() {
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let v = verifier_with_salt("pencil", &salt, 4096);
        assert_eq!(
            v,
            "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==:WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
        );
    }

    #[test]
    fn a_password_matches_its_verifier_only() {
        let v = make_verifier("s3cret");
        assert!(v.starts_with("SCRAM-SHA-256$4096:"));
        assert!(!v.contains("s3cret"));
        assert!(password_matches(&v, "s3cret"));
        assert!(!password_matches(&v, "s3cret "));
        assert!(!password_matches("garbage", "s3cret"));
        assert_ne!(make_verifier("s3cret"), v, "salts are random");
    }

    #[test]
    fn tokens_are_random_and_hashed() {
        let (secret, digest) = new_token();
        assert!(secret.starts_with(TOKEN_PREFIX));
        assert_eq!(digest.len(), 64);
        assert_eq!(token_digest(&secret), digest);
        assert_ne!(new_token().0, secret);
    }
}
