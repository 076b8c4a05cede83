//! The daemon's shared view of targets, LUNs and sessions: built from the configuration at
//! start, consulted at login (target lookup, access control, TSIH, session reinstatement)
//! and in discovery (SendTargets). Not on the per-I/O path: a connection keeps an `Arc` of
//! its target after login.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use cache::BackingStore;
use iscsi_proto::{
    ConnConfig, Directory, LoginGrant, LoginReject, LoginRequestInfo, SessionType, TargetRecord,
};

/// Identifies a connection: which event thread owns it, its slot, and the slot's generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub thread: usize,
    pub slot: usize,
    pub generation: u64,
}

/// One exported logical unit.
pub struct Lun {
    pub number: u64,
    pub scsi: scsi::LogicalUnit,
    pub store: Arc<BackingStore>,
    /// The LUN's identity in the block cache (unique in the daemon).
    pub cache_id: u32,
    /// Reads and writes go through the NUMA-aware block cache (`cache: numa`).
    pub cached: bool,
    /// Cache blocks to read ahead after a sequential read (0 = off).
    pub read_ahead: u32,
    /// Where the last read of this LUN ended (byte offset), to spot sequential streams.
    pub last_read_end: std::sync::atomic::AtomicU64,
}

/// One target: its name, LUNs and access rules.
pub struct Target {
    pub tid: u32,
    pub iqn: String,
    pub alias: Option<String>,
    pub luns: BTreeMap<u64, Arc<Lun>>,
    /// LUN numbers, sorted, for REPORT LUNS.
    pub lun_numbers: Vec<u64>,
    /// The target's iSCSI limits and offers (global parameters merged with its own).
    pub conn_config: ConnConfig,
    pub config: config::TargetConfig,
}

/// A listening portal (its bound address) and its NOP-In settings, if it has its own.
#[derive(Debug, Clone)]
pub struct Portal {
    pub addr: SocketAddr,
    pub nop_interval: Option<u32>,
    pub nop_count: Option<u32>,
}

impl Target {
    pub fn allows(&self, initiator: &str, peer: SocketAddr) -> bool {
        self.config.allows(initiator, peer.ip())
    }
}

/// Something the registry asks an event thread to do to one of its connections.
pub trait ConnControl: Send + Sync {
    /// Close a connection (session reinstatement, forced logout).
    fn close(&self, id: ConnId, reason: &'static str);
}

#[derive(Debug, Clone)]
struct SessionEntry {
    owner: ConnId,
    tsih: u16,
    target: String,
}

/// Targets, portals and the session table.
pub struct Registry {
    targets: RwLock<Vec<Arc<Target>>>,
    portals: Vec<Portal>,
    /// Limits for connections before login picks a target (and for discovery sessions).
    default_config: ConnConfig,
    sessions: Mutex<HashMap<(String, [u8; 6]), SessionEntry>>,
    next_tsih: AtomicU16,
}

/// Portal group tag of every portal (one portal group, as tgtd's default).
pub const PORTAL_GROUP_TAG: u16 = 1;

impl Registry {
    pub fn new(
        targets: Vec<Arc<Target>>,
        portals: Vec<Portal>,
        default_config: ConnConfig,
    ) -> Self {
        Registry {
            targets: RwLock::new(targets),
            portals,
            default_config,
            sessions: Mutex::new(HashMap::new()),
            next_tsih: AtomicU16::new(1),
        }
    }

    pub fn target(&self, iqn: &str) -> Option<Arc<Target>> {
        let targets = self.targets.read().unwrap_or_else(|p| p.into_inner());
        targets
            .iter()
            .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
            .cloned()
    }

    pub fn targets(&self) -> Vec<Arc<Target>> {
        self.targets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn alloc_tsih(&self) -> u16 {
        loop {
            let t = self.next_tsih.fetch_add(1, Ordering::Relaxed);
            if t != 0 {
                return t;
            }
        }
    }

    /// A connection went away: drop the session entries it owned.
    pub fn connection_closed(&self, id: ConnId) {
        let mut s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        s.retain(|_, e| e.owner != id);
    }

    /// Sessions currently registered (for logs and, later, tgtadm show).
    pub fn session_count(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// The connection configuration for a connection that reached us on `local`, before
    /// login (or for a target's `base` limits): the portal's own NOP-In settings win.
    pub fn config_for(&self, base: Option<&ConnConfig>, local: SocketAddr) -> ConnConfig {
        let mut c = base.unwrap_or(&self.default_config).clone();
        if let Some(p) = self.portal_of(local) {
            if let Some(i) = p.nop_interval {
                c.nop_interval_ms = u64::from(i) * 1000;
            }
            if let Some(n) = p.nop_count {
                c.nop_count = n;
            }
        }
        c
    }

    fn portal_of(&self, local: SocketAddr) -> Option<&Portal> {
        self.portals.iter().find(|p| p.addr == local).or_else(|| {
            self.portals
                .iter()
                .find(|p| p.addr.ip().is_unspecified() && p.addr.port() == local.port())
        })
    }

    fn portal_strings(&self, local: SocketAddr) -> Vec<String> {
        self.portals
            .iter()
            .map(|p| p.addr)
            .map(|p| {
                // a wildcard portal is advertised with the address the initiator reached us on
                let addr = if p.ip().is_unspecified() {
                    SocketAddr::new(local.ip(), p.port())
                } else {
                    p
                };
                format!("{},{}", addr, PORTAL_GROUP_TAG)
            })
            .collect()
    }
}

/// The registry as seen by one connection's login: implements `iscsi_proto::Directory`.
pub struct LoginContext<'a> {
    pub registry: &'a Registry,
    pub me: ConnId,
    pub control: &'a dyn ConnControl,
}

impl Directory for LoginContext<'_> {
    fn login(&self, req: &LoginRequestInfo<'_>) -> Result<LoginGrant, LoginReject> {
        let reg = self.registry;
        let target_name = match req.session_type {
            SessionType::Discovery => {
                return Ok(LoginGrant {
                    tsih: if req.tsih != 0 {
                        req.tsih
                    } else {
                        reg.alloc_tsih()
                    },
                    target_portal_group_tag: PORTAL_GROUP_TAG,
                    target_alias: None,
                    config: None,
                });
            }
            SessionType::Normal => match req.target_name {
                Some(n) => n,
                None => return Err(LoginReject::TargetNotFound),
            },
        };
        let Some(target) = reg.target(target_name) else {
            tracing::info!(initiator = req.initiator_name, target = target_name, peer = %req.peer,
                "login refused: no such target");
            return Err(LoginReject::TargetNotFound);
        };
        if !target.allows(req.initiator_name, req.peer) {
            tracing::warn!(initiator = req.initiator_name, target = target_name, peer = %req.peer,
                "login refused: initiator not allowed by the target's ACL");
            return Err(LoginReject::NotAuthorized);
        }
        let key = (req.initiator_name.to_string(), req.isid);
        let mut sessions = reg.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if req.tsih != 0 {
            // adding a connection to an existing session (MC/S) or ERL2 recovery: not supported
            tracing::info!(
                initiator = req.initiator_name,
                tsih = req.tsih,
                "login refused: joining an existing session (MaxConnections=1)"
            );
            return Err(LoginReject::TooManySessions);
        }
        if let Some(old) = sessions.remove(&key) {
            // session reinstatement (RFC 7143 6.3.5): the old session is closed
            tracing::info!(initiator = req.initiator_name, target = %old.target, old_tsih = old.tsih,
                "session reinstatement: closing the old session with the same ISID");
            if old.owner != self.me {
                self.control
                    .close(old.owner, "session reinstated by a new login");
            }
        }
        let tsih = reg.alloc_tsih();
        sessions.insert(
            key,
            SessionEntry {
                owner: self.me,
                tsih,
                target: target.iqn.clone(),
            },
        );
        Ok(LoginGrant {
            tsih,
            target_portal_group_tag: PORTAL_GROUP_TAG,
            target_alias: target.alias.clone(),
            config: Some(reg.config_for(Some(&target.conn_config), req.local)),
        })
    }

    fn send_targets(
        &self,
        initiator_name: &str,
        peer: SocketAddr,
        local: SocketAddr,
        scope: Option<&str>,
    ) -> Vec<TargetRecord> {
        let reg = self.registry;
        reg.targets()
            .iter()
            .filter(|t| scope.is_none_or(|s| t.iqn.eq_ignore_ascii_case(s)))
            .filter(|t| t.allows(initiator_name, peer))
            .map(|t| TargetRecord {
                name: t.iqn.clone(),
                addresses: reg.portal_strings(local),
            })
            .collect()
    }
}
