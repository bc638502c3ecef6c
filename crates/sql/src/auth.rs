//! Accounts and the two password plugins MySQL clients use:
//! `mysql_native_password` (SHA-1 challenge-response) and
//! `caching_sha2_password` (SHA-256). The server keeps only the double
//! hashes, never a password. Because every account's SHA-256 double hash
//! is known from the start, caching_sha2 always succeeds by its "fast
//! path" (the scramble check) and never needs the plaintext exchange that
//! MySQL requires TLS or an RSA key for.

use sha1::Sha1;
use sha2::{Digest, Sha256};

pub const NATIVE: &str = "mysql_native_password";
pub const CACHING_SHA2: &str = "caching_sha2_password";

#[derive(Clone)]
pub struct Account {
    pub user: String,
    empty: bool,
    native_stage2: [u8; 20],
    sha2_stage2: [u8; 32],
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Account({})", self.user)
    }
}

impl Account {
    pub fn new(user: &str, password: &str) -> Account {
        let native_stage2: [u8; 20] = Sha1::digest(Sha1::digest(password.as_bytes())).into();
        let sha2_stage2: [u8; 32] = Sha256::digest(Sha256::digest(password.as_bytes())).into();
        Account { user: user.to_string(), empty: password.is_empty(), native_stage2, sha2_stage2 }
    }

    /// Parses `user` or `user:password` (the form of `--user`).
    pub fn parse(spec: &str) -> Result<Account, String> {
        let (user, password) = spec.split_once(':').unwrap_or((spec, ""));
        if user.is_empty() || user.len() > 32 {
            return Err(format!("user name in '{spec}' must be 1 to 32 bytes (give USER or USER:PASSWORD)"));
        }
        Ok(Account::new(user, password))
    }

    /// Checks a client's answer to `nonce` for the given plugin.
    pub fn verify(&self, plugin: &str, nonce: &[u8; 20], response: &[u8]) -> bool {
        // Some clients (Connector/J with caching_sha2_password) send one NUL
        // byte for an empty password.
        if response.is_empty() || response == [0] {
            return self.empty;
        }
        if self.empty {
            return false;
        }
        match plugin {
            NATIVE => {
                let Ok(response) = <[u8; 20]>::try_from(response) else { return false };
                let mut h = Sha1::new();
                h.update(nonce);
                h.update(self.native_stage2);
                let mask: [u8; 20] = h.finalize().into();
                let stage1: Vec<u8> = response.iter().zip(mask).map(|(a, b)| a ^ b).collect();
                let check: [u8; 20] = Sha1::digest(&stage1).into();
                constant_time_eq(&check, &self.native_stage2)
            }
            CACHING_SHA2 => {
                let Ok(response) = <[u8; 32]>::try_from(response) else { return false };
                let mut h = Sha256::new();
                h.update(self.sha2_stage2);
                h.update(nonce);
                let mask: [u8; 32] = h.finalize().into();
                let stage1: Vec<u8> = response.iter().zip(mask).map(|(a, b)| a ^ b).collect();
                let check: [u8; 32] = Sha256::digest(&stage1).into();
                constant_time_eq(&check, &self.sha2_stage2)
            }
            _ => false,
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 20 random bytes, none of them NUL (the handshake sends part of the
/// nonce NUL-terminated).
pub fn nonce() -> [u8; 20] {
    let mut n = [0u8; 20];
    if getrandom::fill(&mut n).is_err() {
        // No OS randomness: fall back to hashing the time and an address.
        let seed = format!("{:?}{:p}", std::time::SystemTime::now(), &n);
        n.copy_from_slice(&Sha256::digest(seed.as_bytes())[..20]);
    }
    for b in &mut n {
        *b = (*b % 94) + 33;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native_client(password: &str, nonce: &[u8; 20]) -> Vec<u8> {
        let stage1 = Sha1::digest(password.as_bytes());
        let stage2 = Sha1::digest(stage1);
        let mut h = Sha1::new();
        h.update(nonce);
        h.update(stage2);
        let mask = h.finalize();
        stage1.iter().zip(mask).map(|(a, b)| a ^ b).collect()
    }

    fn sha2_client(password: &str, nonce: &[u8; 20]) -> Vec<u8> {
        let stage1 = Sha256::digest(password.as_bytes());
        let stage2 = Sha256::digest(stage1);
        let mut h = Sha256::new();
        h.update(stage2);
        h.update(nonce);
        let mask = h.finalize();
        stage1.iter().zip(mask).map(|(a, b)| a ^ b).collect()
    }

    #[test]
    fn both_plugins_accept_the_right_password_and_refuse_a_wrong_one() {
        let account = Account::parse("app:s3cret").unwrap();
        let n = nonce();
        assert!(account.verify(NATIVE, &n, &native_client("s3cret", &n)));
        assert!(!account.verify(NATIVE, &n, &native_client("wrong", &n)));
        assert!(account.verify(CACHING_SHA2, &n, &sha2_client("s3cret", &n)));
        assert!(!account.verify(CACHING_SHA2, &n, &sha2_client("wrong", &n)));
        assert!(!account.verify(NATIVE, &n, b""), "an empty answer is not the password");
        assert!(!account.verify(NATIVE, &n, b"short"), "a malformed answer is refused");
    }

    #[test]
    fn an_account_without_password_takes_only_an_empty_answer() {
        let account = Account::parse("root").unwrap();
        let n = nonce();
        assert!(account.verify(NATIVE, &n, b""));
        assert!(!account.verify(NATIVE, &n, &native_client("x", &n)));
        assert!(account.verify(CACHING_SHA2, &n, &[0]), "a single NUL byte is an empty password");
        assert!(Account::parse(":pw").is_err());
    }

    #[test]
    fn nonces_have_no_nul_bytes() {
        for _ in 0..100 {
            assert!(!nonce().contains(&0));
        }
    }
}
