//! CHAP accounts (tgtadm `--mode account`): the account list, discovery
//! authentication, and the advisory checks on CHAP secrets (length) that
//! never reject a secret tgtd would accept.

use std::fmt;

/// RFC 7143 §12.1.3 (and RFC 3720 §8.2.1): a CHAP secret with fewer than 96
/// random bits (12 bytes) may only be used over IPsec; the Microsoft initiator
/// refuses secrets shorter than 12 bytes.
pub const CHAP_SECRET_RECOMMENDED_MIN: usize = 12;
/// Longest user name or secret accepted (tgtd's account buffers).
pub const CHAP_FIELD_MAX: usize = 255;

/// One CHAP account: a user name and its secret. The same account may be
/// bound to several targets, incoming or outgoing.
#[derive(Clone, PartialEq, Eq)]
pub struct Account {
    /// The CHAP user name (`CHAP_N`).
    pub user: String,
    /// The CHAP secret; never printed by `Debug`.
    pub password: String,
}

impl fmt::Debug for Account {
    /// The secret is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Account")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// CHAP for discovery sessions (`SendTargets`): tgtadm's account binding
/// without a tid. Empty `incoming_users` = discovery without CHAP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveryAuth {
    /// Accounts an initiator may authenticate as.
    pub incoming_users: Vec<String>,
    /// Account the target authenticates itself with (mutual CHAP).
    pub outgoing_user: Option<String>,
}

/// Checks a user name or secret: 1..=255 bytes, printable ASCII without
/// spaces (tgt's `incominguser USER SECRET` is split on whitespace, and
/// open-iscsi stores them in a line-based file).
pub(crate) fn check_chap_field(what: &str, v: &str) -> Result<(), String> {
    if v.is_empty() || v.len() > CHAP_FIELD_MAX {
        return Err(format!("{what} must be 1..={CHAP_FIELD_MAX} bytes"));
    }
    if !v.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(format!(
            "{what} must be printable ASCII without spaces or control characters"
        ));
    }
    Ok(())
}

/// The advisory about a secret's length, if any.
pub(crate) fn secret_advice(user: &str, password: &str) -> Option<String> {
    (password.len() < CHAP_SECRET_RECOMMENDED_MIN).then(|| {
        format!(
            "CHAP secret of account {user:?} is {} bytes; RFC 7143 §12.1.3 wants at least \
             {CHAP_SECRET_RECOMMENDED_MIN} bytes (96 bits) unless IPsec is used, and the \
             Microsoft initiator rejects shorter secrets (accepted anyway, as tgtd does)",
            password.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        assert!(check_chap_field("user", "alice").is_ok());
        assert!(check_chap_field("user", "").is_err());
        assert!(check_chap_field("user", "a b").is_err());
        assert!(check_chap_field("user", &"x".repeat(256)).is_err());
        assert!(secret_advice("a", "short").is_some());
        assert!(secret_advice("a", "twelve-bytes").is_none());
        let a = Account {
            user: "u".into(),
            password: "secretsecret".into(),
        };
        assert!(!format!("{a:?}").contains("secretsecret"));
    }
}
