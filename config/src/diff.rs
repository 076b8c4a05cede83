//! What a reload has to do: [`diff`] compares the running configuration with
//! a newly read one and says which targets were added, removed, changed (and
//! in what: LUNs added/removed/changed, ACLs, CHAP, iSCSI values) or left
//! alone, which LUNs have new QoS limits (applied live: a QoS change alone
//! changes no target or LUN), which portals and accounts changed, and which
//! global settings can only take effect after a restart. Targets are matched
//! by name (case-insensitively, as iSCSI names compare).

use std::fmt;
use std::net::SocketAddr;

use crate::model::{Config, LunConfig, PortalConfig, Qos, TargetConfig};

/// The difference between two configurations, for a reload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigDiff {
    /// Targets only in the new configuration (new order).
    pub added: Vec<String>,
    /// Targets only in the old configuration (old order).
    pub removed: Vec<String>,
    /// Targets in both whose definition or effective settings differ. QoS limits are not
    /// part of this: see `qos_changed`.
    pub changed: Vec<TargetChange>,
    /// Targets in both that are the same but for QoS limits: their sessions are untouched.
    pub unchanged: Vec<String>,
    /// (target name, LUN number) of each LUN in both configurations whose effective QoS
    /// limits ([`LunConfig::effective_qos`]) differ, in the new configuration's order; also
    /// for targets in `changed`. Applied to the running LUN, without closing sessions.
    pub qos_changed: Vec<(String, u64)>,
    /// Portals to start listening on.
    pub portals_added: Vec<SocketAddr>,
    /// Portals to stop listening on.
    pub portals_removed: Vec<SocketAddr>,
    /// Portals in both whose NOP settings changed.
    pub portals_changed: Vec<SocketAddr>,
    /// iSER portals to start listening on (`iser_portals`; absent counts as its default
    /// `0.0.0.0:3260`, which only listens on a host with an RDMA device).
    pub iser_portals_added: Vec<SocketAddr>,
    /// iSER portals to stop listening on.
    pub iser_portals_removed: Vec<SocketAddr>,
    /// iSER portals in both whose NOP settings changed.
    pub iser_portals_changed: Vec<SocketAddr>,
    /// CHAP users added, removed or with a new secret.
    pub accounts_changed: Vec<String>,
    /// The discovery CHAP bindings changed.
    pub discovery_auth_changed: bool,
    /// The global `iscsi` values changed (targets whose effective values
    /// changed are also listed in `changed`).
    pub iscsi_defaults_changed: bool,
    /// The `limits:` section changed (applied at once, no restart needed).
    pub limits_changed: bool,
    /// Settings that only a restart applies, as field paths (`cache.size_per_node`).
    pub needs_restart: Vec<String>,
}

/// How one target changed. Empty lists / false = that part is the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetChange {
    /// The target's iSCSI name.
    pub iqn: String,
    /// Changed target-level fields: `tid`, `alias`, `driver`, `state`,
    /// `allow_initiators`, `allow_addresses`, `incoming_users`,
    /// `outgoing_user`, `alua`, `max_sessions`, `accounts` (a secret of a user it references),
    /// `iscsi` (its effective values).
    pub fields: Vec<&'static str>,
    /// LUN numbers only in the new definition.
    pub luns_added: Vec<u64>,
    /// LUN numbers only in the old definition.
    pub luns_removed: Vec<u64>,
    /// LUNs in both whose settings (or effective cache mode) differ; QoS limits are not
    /// compared (see [`ConfigDiff::qos_changed`]).
    pub luns_changed: Vec<u64>,
}

impl ConfigDiff {
    /// True when nothing differs (every target is unchanged, no LUN's QoS changed).
    pub fn is_empty(&self) -> bool {
        ConfigDiff {
            unchanged: Vec::new(),
            ..self.clone()
        } == ConfigDiff::default()
    }
}

/// Compares `old` (running) with `new` (just read).
pub fn diff(old: &Config, new: &Config) -> ConfigDiff {
    let mut d = ConfigDiff::default();
    let find = |c: &'_ Config, iqn: &str| -> Option<usize> {
        c.targets
            .iter()
            .position(|t| t.iqn.eq_ignore_ascii_case(iqn))
    };
    for t in &old.targets {
        if find(new, &t.iqn).is_none() {
            d.removed.push(t.iqn.clone());
        }
    }
    for t in &new.targets {
        match find(old, &t.iqn) {
            None => d.added.push(t.iqn.clone()),
            Some(k) => {
                let o = &old.targets[k];
                for l in &t.luns {
                    if let Some(ol) = o.lun(l.lun) {
                        if ol.effective_qos(o) != l.effective_qos(t) {
                            d.qos_changed.push((t.iqn.clone(), l.lun));
                        }
                    }
                }
                let c = target_change(old, o, new, t);
                if c.fields.is_empty()
                    && c.luns_added.is_empty()
                    && c.luns_removed.is_empty()
                    && c.luns_changed.is_empty()
                {
                    d.unchanged.push(t.iqn.clone());
                } else {
                    d.changed.push(c);
                }
            }
        }
    }
    (d.portals_added, d.portals_removed, d.portals_changed) =
        portal_changes(&old.portals, &new.portals);
    (
        d.iser_portals_added,
        d.iser_portals_removed,
        d.iser_portals_changed,
    ) = portal_changes(&old.iser_listen(true), &new.iser_listen(true));
    for a in &old.accounts {
        if new.account(&a.user) != Some(a) {
            d.accounts_changed.push(a.user.clone());
        }
    }
    for a in &new.accounts {
        if old.account(&a.user).is_none() {
            d.accounts_changed.push(a.user.clone());
        }
    }
    d.discovery_auth_changed = old.discovery_auth != new.discovery_auth;
    d.iscsi_defaults_changed = old.iscsi != new.iscsi;
    d.limits_changed = old.limits != new.limits;
    d.needs_restart = needs_restart(old, new);
    d
}

type PortalChanges = (Vec<SocketAddr>, Vec<SocketAddr>, Vec<SocketAddr>);

/// Portals added, removed, and in both with other NOP settings (matched by address).
fn portal_changes(old: &[PortalConfig], new: &[PortalConfig]) -> PortalChanges {
    let (mut added, mut removed, mut changed) = (Vec::new(), Vec::new(), Vec::new());
    for p in new {
        match old.iter().find(|o| o.addr == p.addr) {
            None => added.push(p.addr),
            Some(o) if o != p => changed.push(p.addr),
            Some(_) => {}
        }
    }
    for p in old {
        if !new.iter().any(|n| n.addr == p.addr) {
            removed.push(p.addr);
        }
    }
    (added, removed, changed)
}

fn needs_restart(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |name: &str, changed: bool| {
        if changed {
            out.push(name.to_string());
        }
    };
    check("numa.nodes", old.numa.nodes != new.numa.nodes);
    check(
        "threads.event_threads",
        old.threads.event_threads != new.threads.event_threads,
    );
    check(
        "threads.io_threads",
        old.threads.io_threads != new.threads.io_threads,
    );
    check(
        "threads.busy_poll_us",
        old.threads.busy_poll_us != new.threads.busy_poll_us,
    );
    check(
        "threads.io_engine",
        old.threads.io_engine != new.threads.io_engine,
    );
    let (a, b) = (&old.cache, &new.cache);
    check("cache.size_per_node", a.size_per_node != b.size_per_node);
    check("cache.block_size", a.block_size != b.block_size);
    check("cache.group_blocks", a.group_blocks != b.group_blocks);
    check(
        "cache.partitions_per_node",
        a.partitions_per_node != b.partitions_per_node,
    );
    check("cache.huge_pages", a.huge_pages != b.huge_pages);
    check("cache.dirty_limit", a.dirty_limit != b.dirty_limit);
    check("cache.read_ahead", a.read_ahead != b.read_ahead);
    check("cache.warm_restart", a.warm_restart != b.warm_restart);
    check("cache.memory", a.memory != b.memory);
    let (a, b) = (&old.router, &new.router);
    check(
        "router.min_forward_bytes",
        a.min_forward_bytes != b.min_forward_bytes,
    );
    check("router.max_queue", a.max_queue != b.max_queue);
    check("router.enabled", a.enabled != b.enabled);
    check(
        "metrics.address",
        old.metrics.address != new.metrics.address,
    );
    check(
        "metrics.session_info",
        old.metrics.session_info != new.metrics.session_info,
    );
    out
}

fn target_change(oc: &Config, o: &TargetConfig, nc: &Config, n: &TargetConfig) -> TargetChange {
    let mut c = TargetChange {
        iqn: n.iqn.clone(),
        ..TargetChange::default()
    };
    let mut field = |name: &'static str, changed: bool| {
        if changed {
            c.fields.push(name);
        }
    };
    field("iqn", o.iqn != n.iqn);
    field("tid", o.tid != n.tid);
    field("alias", o.alias != n.alias);
    field("driver", o.driver != n.driver);
    field("state", o.state != n.state);
    field("allow_initiators", o.allow_initiators != n.allow_initiators);
    field("allow_addresses", o.allow_addresses != n.allow_addresses);
    field("incoming_users", o.incoming_users != n.incoming_users);
    field("outgoing_user", o.outgoing_user != n.outgoing_user);
    field("alua", o.alua != n.alua);
    field("max_sessions", o.max_sessions != n.max_sessions);
    // `qos` is no field: new limits are applied to the running LUNs (qos_changed)
    let users = n.incoming_users.iter().chain(&n.outgoing_user);
    field(
        "accounts",
        users.clone().any(|u| oc.account(u) != nc.account(u)),
    );
    field(
        "iscsi",
        o.effective_iscsi(&oc.iscsi) != n.effective_iscsi(&nc.iscsi),
    );
    for l in &n.luns {
        match o.lun(l.lun) {
            None => c.luns_added.push(l.lun),
            Some(ol) if !same_lun(oc, ol, nc, l) => c.luns_changed.push(l.lun),
            Some(_) => {}
        }
    }
    for l in &o.luns {
        if n.lun(l.lun).is_none() {
            c.luns_removed.push(l.lun);
        }
    }
    c
}

/// Same settings (but for QoS, applied live) and same effective cache mode.
fn same_lun(oc: &Config, o: &LunConfig, nc: &Config, n: &LunConfig) -> bool {
    let no_qos = |l: &LunConfig| LunConfig {
        qos: Qos::default(),
        ..l.clone()
    };
    no_qos(o) == no_qos(n) && o.cache_mode(&oc.cache) == n.cache_mode(&nc.cache)
}

impl fmt::Display for ConfigDiff {
    /// One line per change, e.g. `changed target iqn...: luns added [2]`,
    /// `qos changed: iqn... lun 1`, `needs restart: cache.size_per_node`; `no changes`
    /// when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return writeln!(f, "no changes");
        }
        for t in &self.added {
            writeln!(f, "added target {t}")?;
        }
        for t in &self.removed {
            writeln!(f, "removed target {t}")?;
        }
        for c in &self.changed {
            let mut parts: Vec<String> = c.fields.iter().map(|s| s.to_string()).collect();
            for (what, l) in [
                ("luns added", &c.luns_added),
                ("luns removed", &c.luns_removed),
                ("luns changed", &c.luns_changed),
            ] {
                if !l.is_empty() {
                    parts.push(format!("{what} {l:?}"));
                }
            }
            writeln!(f, "changed target {}: {}", c.iqn, parts.join(", "))?;
        }
        for (iqn, lun) in &self.qos_changed {
            writeln!(f, "qos changed: {iqn} lun {lun}")?;
        }
        for p in &self.portals_added {
            writeln!(f, "added portal {p}")?;
        }
        for p in &self.portals_removed {
            writeln!(f, "removed portal {p}")?;
        }
        for p in &self.portals_changed {
            writeln!(f, "changed portal {p}")?;
        }
        for p in &self.iser_portals_added {
            writeln!(f, "added iser portal {p}")?;
        }
        for p in &self.iser_portals_removed {
            writeln!(f, "removed iser portal {p}")?;
        }
        for p in &self.iser_portals_changed {
            writeln!(f, "changed iser portal {p}")?;
        }
        for u in &self.accounts_changed {
            writeln!(f, "changed account {u}")?;
        }
        if self.discovery_auth_changed {
            writeln!(f, "changed discovery_auth")?;
        }
        if self.iscsi_defaults_changed {
            writeln!(f, "changed iscsi defaults")?;
        }
        if self.limits_changed {
            writeln!(f, "changed limits")?;
        }
        for r in &self.needs_restart {
            writeln!(f, "needs restart: {r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::model::{Account, CacheMode, LunConfig, PortalConfig, TargetState};

    fn base() -> Config {
        let mut c = Config::demo(Path::new("/d"), &[]);
        let mut t = TargetConfig::new("iqn.2026-11.org.example:b");
        t.luns.push(LunConfig::new(1, "/d/b1".into()));
        t.luns.push(LunConfig::new(2, "/d/b2".into()));
        c.targets.push(t);
        c.accounts.push(Account {
            user: "u".into(),
            password: "secret-secret".into(),
        });
        c
    }

    #[test]
    fn identical_configs_have_no_diff() {
        let d = diff(&base(), &base());
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(d.to_string(), "no changes\n");
        assert!(diff(&Config::default(), &Config::default()).is_empty());
    }

    #[test]
    fn targets_added_removed_unchanged() {
        let old = base();
        let mut new = base();
        new.targets.remove(0);
        new.targets
            .push(TargetConfig::new("iqn.2026-11.org.example:c"));
        let d = diff(&old, &new);
        assert_eq!(d.removed, vec![crate::DEMO_IQN.to_string()]);
        assert_eq!(d.added, vec!["iqn.2026-11.org.example:c".to_string()]);
        assert_eq!(d.unchanged, vec!["iqn.2026-11.org.example:b".to_string()]);
        assert!(d.changed.is_empty());
        // Names compare case-insensitively.
        let mut new = base();
        new.targets[1].iqn = "IQN.2026-11.org.example:b".into();
        let d = diff(&old, &new);
        assert!(d.added.is_empty() && d.removed.is_empty());
        assert_eq!(d.changed[0].fields, vec!["iqn"]);
    }

    #[test]
    fn lun_and_field_changes() {
        let old = base();
        let mut new = base();
        let t = &mut new.targets[1];
        t.luns[0].readonly = true;
        t.luns.remove(1);
        t.luns.push(LunConfig::new(3, "/d/b3".into()));
        t.state = TargetState::Offline;
        t.allow_addresses = vec![crate::AddressRule::parse("10.0.0.0/8").unwrap()];
        let d = diff(&old, &new);
        assert_eq!(d.unchanged, vec![crate::DEMO_IQN.to_string()]);
        let c = &d.changed[0];
        assert_eq!(c.iqn, "iqn.2026-11.org.example:b");
        assert_eq!(c.fields, vec!["state", "allow_addresses"]);
        assert_eq!(
            (&c.luns_added, &c.luns_removed, &c.luns_changed),
            (&vec![3], &vec![2], &vec![1])
        );
        let s = d.to_string();
        assert!(s.contains("changed target iqn.2026-11.org.example:b: state, allow_addresses, luns added [3], luns removed [2], luns changed [1]"), "{s}");
    }

    #[test]
    fn accounts_and_effective_settings() {
        let old = base();
        let mut new = base();
        new.targets[1].incoming_users = vec!["u".into()];
        let mut old2 = old.clone();
        old2.targets[1].incoming_users = vec!["u".into()];
        // A new secret changes the account and every target using it.
        new.accounts[0].password = "another-secret".into();
        let d = diff(&old2, &new);
        assert_eq!(d.accounts_changed, vec!["u".to_string()]);
        assert_eq!(d.changed[0].fields, vec!["accounts"]);
        assert_eq!(d.unchanged, vec![crate::DEMO_IQN.to_string()]);
        // Global iSCSI values change the targets that do not override them.
        let mut new = base();
        new.iscsi.max_burst_length = 131072;
        new.targets[1].iscsi = Some(crate::IscsiParamsOverride {
            max_burst_length: Some(262144),
            ..Default::default()
        });
        let d = diff(&old, &new);
        assert!(d.iscsi_defaults_changed);
        assert_eq!(d.changed.len(), 1);
        assert_eq!(d.changed[0].iqn, crate::DEMO_IQN);
        assert_eq!(d.changed[0].fields, vec!["iscsi"]);
        // The global cache mode changes LUNs without their own mode.
        let mut new = base();
        new.cache.mode = CacheMode::Off;
        new.targets[1].luns[0].cache = Some(CacheMode::Numa);
        let d = diff(&old, &new);
        let b = d.changed.iter().find(|c| c.iqn.ends_with(":b")).unwrap();
        assert_eq!(b.luns_changed, vec![1, 2]);
        assert!(d.needs_restart.is_empty());
    }

    #[test]
    fn qos_changes_alone_change_no_target() {
        let old = base();
        let b = "iqn.2026-11.org.example:b";
        // a LUN's own limits
        let mut new = base();
        new.targets[1].luns[1].qos.iops = Some(1000);
        let d = diff(&old, &new);
        assert!(d.changed.is_empty(), "{d:?}");
        assert_eq!(d.unchanged.len(), 2);
        assert_eq!(d.qos_changed, vec![(b.to_string(), 2)]);
        assert!(!d.is_empty());
        assert_eq!(d.to_string(), format!("qos changed: {b} lun 2\n"));
        // the target's default reaches every LUN that does not set the field itself
        let mut newer = new.clone();
        newer.targets[1].qos.iops = Some(500);
        newer.targets[1].qos.burst_ms = Some(250);
        let d = diff(&new, &newer);
        assert!(d.changed.is_empty(), "{d:?}");
        assert_eq!(
            d.qos_changed,
            vec![(b.to_string(), 1), (b.to_string(), 2)],
            "LUN 2 keeps its iops but gets the burst"
        );
        newer.targets[1].qos.burst_ms = None;
        let d = diff(&new, &newer);
        assert_eq!(d.qos_changed, vec![(b.to_string(), 1)], "LUN 2 sets iops");
        // the same effective limits, said on the target instead of the LUN: no change
        let mut moved = base();
        moved.targets[1].qos.iops = Some(1000);
        moved.targets[1].luns[0].qos.iops = Some(0);
        let mut was = base();
        was.targets[1].luns[1].qos.iops = Some(1000);
        was.targets[1].luns[0].qos.iops = Some(0);
        assert!(diff(&was, &moved).is_empty(), "{:?}", diff(&was, &moved));
        // along with other changes: the target is changed and the QoS change listed too
        let mut both = new.clone();
        both.targets[1].luns[1].readonly = true;
        both.targets[1].luns[1].qos.iops = Some(2000);
        both.targets[1].luns.push(LunConfig {
            qos: crate::Qos {
                iops: Some(1),
                ..Default::default()
            },
            ..LunConfig::new(3, "/d/b3".into())
        });
        let d = diff(&new, &both);
        assert_eq!(d.changed.len(), 1);
        assert_eq!(d.changed[0].luns_changed, vec![2]);
        assert_eq!(d.changed[0].luns_added, vec![3]);
        assert_eq!(
            d.qos_changed,
            vec![(b.to_string(), 2)],
            "a new LUN is no QoS change"
        );
        let s = d.to_string();
        assert!(s.contains(&format!("qos changed: {b} lun 2\n")), "{s}");
        // names are matched case-insensitively; the new spelling is reported
        let mut upper = new.clone();
        upper.targets[1].iqn = b.to_ascii_uppercase();
        upper.targets[1].luns[1].qos.iops = None;
        let d = diff(&new, &upper);
        assert_eq!(d.qos_changed, vec![(b.to_ascii_uppercase(), 2)]);
    }

    #[test]
    fn portals_and_restart_settings() {
        let old = base();
        let mut new = base();
        new.portals
            .push(PortalConfig::new("10.0.0.1:3260".parse().unwrap()));
        new.portals[0].nop_interval = Some(5);
        new.cache.size_per_node = crate::model::CacheSize::Bytes(1 << 30);
        new.numa.nodes = Some(2);
        new.router.enabled = false;
        new.discovery_auth.incoming_users = vec!["u".into()];
        let d = diff(&old, &new);
        assert_eq!(d.portals_added, vec!["10.0.0.1:3260".parse().unwrap()]);
        assert_eq!(d.portals_changed, vec!["127.0.0.1:3260".parse().unwrap()]);
        assert!(d.portals_removed.is_empty());
        assert!(d.discovery_auth_changed);
        assert_eq!(
            d.needs_restart,
            vec!["numa.nodes", "cache.size_per_node", "router.enabled"]
        );
        assert_eq!(d.unchanged.len(), 2);
        let s = d.to_string();
        assert!(s.contains("needs restart: cache.size_per_node\n"), "{s}");
        let back = diff(&new, &old);
        assert_eq!(back.portals_removed, vec!["10.0.0.1:3260".parse().unwrap()]);
    }

    #[test]
    fn iser_portals_changes() {
        let old = base();
        // absent = the default 0.0.0.0:3260, so spelling the default out changes nothing
        let mut new = base();
        new.iser_portals = Some(vec![PortalConfig::new("0.0.0.0:3260".parse().unwrap())]);
        assert!(diff(&old, &new).is_empty());
        // an explicit empty list switches iSER off
        new.iser_portals = Some(Vec::new());
        let d = diff(&old, &new);
        assert_eq!(
            d.iser_portals_removed,
            vec!["0.0.0.0:3260".parse().unwrap()]
        );
        assert!(d.portals_added.is_empty() && d.portals_removed.is_empty());
        assert!(d.to_string().contains("removed iser portal 0.0.0.0:3260\n"));
        let mut newer = new.clone();
        let mut p = PortalConfig::new("10.0.0.2:3260".parse().unwrap());
        newer.iser_portals = Some(vec![p.clone()]);
        let d = diff(&new, &newer);
        assert_eq!(d.iser_portals_added, vec![p.addr]);
        let mut nop = newer.clone();
        p.nop_interval = Some(3);
        nop.iser_portals = Some(vec![p.clone()]);
        assert_eq!(diff(&newer, &nop).iser_portals_changed, vec![p.addr]);
    }
}
