//! Access control and CHAP data of the registry: target state, ACLs (tgtd's rules), CHAP
//! account bindings, the account table, and the OS random source for CHAP challenges.

use iscsi_proto::RandomUnavailable;

/// CHAP identifiers and challenges from the kernel's CSPRNG (`getrandom(2)`).
pub fn os_random(buf: &mut [u8]) -> Result<(), RandomUnavailable> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`, a live, exclusively
        // borrowed slice.
        let r = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if r < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(RandomUnavailable);
        }
        done += r as usize;
    }
    Ok(())
}

/// A target's state (`tgtadm --op update --mode target -n state`): the configuration's.
pub use config::TargetState;

/// A target's access rules, as tgtd: an initiator must match one address rule (none = nobody)
/// and, when any name rule exists, one name rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acl {
    /// As given (`ALL`, an IP, a CIDR network) with its parsed form.
    pub addresses: Vec<(String, config::AddressRule)>,
    pub names: Vec<String>,
}

impl Acl {
    pub fn allows(&self, initiator: &str, ip: std::net::IpAddr) -> bool {
        self.addresses.iter().any(|(_, r)| r.matches(ip))
            && (self.names.is_empty()
                || self.names.iter().any(|n| n.eq_ignore_ascii_case(initiator)))
    }

    /// The rules of a target from the YAML configuration (empty lists there mean "anyone").
    pub fn from_config(t: &config::TargetConfig) -> Acl {
        let mut acl = Acl::default();
        if t.allow_addresses.is_empty() {
            acl.addresses.push(("ALL".into(), config::AddressRule::All));
        }
        for r in &t.allow_addresses {
            let text = match r {
                config::AddressRule::All => "ALL".to_string(),
                other => other.to_string(),
            };
            acl.addresses.push((text, *r));
        }
        if !t
            .allow_initiators
            .iter()
            .any(|n| n.eq_ignore_ascii_case("all"))
        {
            acl.names = t.allow_initiators.clone();
        }
        acl
    }
}

/// CHAP users bound to a target (or to discovery): any number of incoming users, at most one
/// outgoing (mutual CHAP) user. Names refer to [`Registry`] accounts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthBinding {
    pub incoming: Vec<String>,
    pub outgoing: Option<String>,
}

/// The credentials a CHAP authenticator needs for one target (or discovery), resolved from
/// the bindings and the account table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChapCredentials {
    /// (user, secret) pairs an initiator may authenticate as.
    pub incoming: Vec<(String, String)>,
    /// (user, secret) the target answers with for mutual CHAP.
    pub outgoing: Option<(String, String)>,
}

/// The CHAP account table and the discovery bindings.
#[derive(Debug, Clone, Default)]
pub struct Accounts {
    /// (user, secret), newest first (tgtd lists them that way).
    pub users: Vec<(String, String)>,
    /// Accounts bound to discovery sessions (`GLOBAL_TID`).
    pub discovery: AuthBinding,
}

impl Accounts {
    /// The configuration's accounts (newest first, as tgtd lists them) and discovery
    /// bindings.
    pub fn from_config(cfg: &config::Config) -> Accounts {
        Accounts {
            users: cfg
                .accounts
                .iter()
                .rev()
                .map(|a| (a.user.clone(), a.password.clone()))
                .collect(),
            discovery: AuthBinding {
                incoming: cfg.discovery_auth.incoming_users.clone(),
                outgoing: cfg.discovery_auth.outgoing_user.clone(),
            },
        }
    }

    pub fn secret(&self, user: &str) -> Option<&str> {
        self.users
            .iter()
            .find(|(u, _)| u == user)
            .map(|(_, p)| p.as_str())
    }

    /// Resolve `binding` to credentials (unknown names are skipped).
    pub fn resolve(&self, binding: &AuthBinding) -> ChapCredentials {
        ChapCredentials {
            incoming: binding
                .incoming
                .iter()
                .filter_map(|u| self.secret(u).map(|p| (u.clone(), p.to_string())))
                .collect(),
            outgoing: binding
                .outgoing
                .as_ref()
                .and_then(|u| self.secret(u).map(|p| (u.clone(), p.to_string()))),
        }
    }
}
