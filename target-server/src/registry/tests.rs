//! Registry tests: the target's driver, the iSER portal list, and SendTargets answering
//! with the portals of the discovery session's transport; the session limits.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use iscsi_proto::Directory;

use super::*;

struct NoControl;

impl ConnControl for NoControl {
    fn close(&self, _id: ConnId, _reason: &'static str) {}
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("address")
}

fn portal(s: &str) -> Portal {
    Portal {
        addr: addr(s),
        nop_interval: None,
        nop_count: None,
    }
}

fn open_target(tid: u32, iqn: &str) -> Target {
    let acl = Acl {
        addresses: vec![(
            "ALL".into(),
            config::AddressRule::parse("ALL").expect("rule"),
        )],
        names: Vec::new(),
    };
    Target::new(
        tid,
        iqn.to_string(),
        None,
        BTreeMap::new(),
        ConnConfig::default(),
        acl,
    )
}

fn registry() -> Registry {
    let t1 = open_target(1, "iqn.2026-11.org.numatgt:tcp");
    let t2 = open_target(2, "iqn.2026-11.org.numatgt:rdma").with_driver(config::Driver::Iser);
    Registry::new(
        vec![Arc::new(t1), Arc::new(t2)],
        vec![portal("0.0.0.0:3260"), portal("10.0.0.9:3270")],
        ConnConfig::default(),
    )
}

fn send_targets(
    reg: &Registry,
    transport: config::Driver,
    local: &str,
) -> Vec<(String, Vec<String>)> {
    let ctx = LoginContext {
        registry: reg,
        me: ConnId {
            thread: 0,
            slot: 0,
            generation: 0,
        },
        control: &NoControl,
        transport,
    };
    ctx.send_targets("iqn.i", addr("10.0.0.1:40000"), addr(local), None)
        .into_iter()
        .map(|r| (r.name, r.addresses))
        .collect()
}

#[test]
fn targets_default_to_iscsi_and_keep_their_driver() {
    let reg = registry();
    let drivers: Vec<_> = reg.targets().iter().map(|t| t.driver).collect();
    assert_eq!(drivers, vec![config::Driver::Iscsi, config::Driver::Iser]);
}

#[test]
fn iser_portals_are_set_and_read() {
    let reg = registry();
    assert!(reg.iser_portals().is_empty());
    reg.set_iser_portals(vec![portal("0.0.0.0:3260"), portal("[fd00::1]:3261")]);
    let got: Vec<_> = reg.iser_portals().iter().map(|p| p.addr).collect();
    assert_eq!(got, vec![addr("0.0.0.0:3260"), addr("[fd00::1]:3261")]);
    // the TCP list is another one
    assert_eq!(reg.portals().len(), 2);
    reg.set_iser_portals(Vec::new());
    assert!(reg.iser_portals().is_empty());
}

#[test]
fn send_targets_lists_the_portals_of_the_transport() {
    let reg = registry();
    reg.set_iser_portals(vec![portal("0.0.0.0:3260"), portal("192.168.5.5:3262")]);
    let tcp = send_targets(&reg, config::Driver::Iscsi, "10.0.0.9:3260");
    let iser = send_targets(&reg, config::Driver::Iser, "192.168.5.5:3260");
    // every target over every transport
    assert_eq!(tcp.len(), 2);
    assert_eq!(iser.len(), 2);
    for (_, a) in &tcp {
        assert_eq!(
            a,
            &vec!["10.0.0.9:3260,1".to_string(), "10.0.0.9:3270,1".into()]
        );
    }
    for (_, a) in &iser {
        // the wildcard is advertised with the address the initiator reached
        assert_eq!(
            a,
            &vec![
                "192.168.5.5:3260,1".to_string(),
                "192.168.5.5:3262,1".into()
            ]
        );
    }
}

#[test]
fn sessions_record_their_transport() {
    let reg = registry();
    let me = ConnId {
        thread: 1,
        slot: 2,
        generation: 3,
    };
    reg.sessions.lock().expect("lock").insert(
        ("iqn.i".into(), [0; 6], "iqn.2026-11.org.numatgt:tcp".into()),
        SessionEntry {
            owner: me,
            tsih: 7,
            target: "iqn.2026-11.org.numatgt:tcp".into(),
            alias: None,
            peer: addr("10.0.0.1:40000"),
            transport: config::Driver::Iser,
        },
    );
    let s = reg.sessions_of("iqn.2026-11.org.numatgt:tcp");
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].transport, config::Driver::Iser);
}

#[test]
fn session_limits_count_pending_logins_and_spare_reinstatements() {
    use crate::limits::Limit;
    let reg = registry();
    reg.limits.apply(&config::LimitsSettings {
        max_sessions: 2,
        ..config::LimitsSettings::default()
    });
    let conn = |slot| ConnId {
        thread: 0,
        slot,
        generation: 1,
    };
    let tcp = "iqn.2026-11.org.numatgt:tcp".to_string();
    let nexus = |name: &str, t: &str| (name.to_string(), [0x80, 0, 0, 0, 0, 1], t.to_string());
    // a pending (not yet authenticated) login counts
    assert_eq!(
        reg.reserve_session(conn(0), 1, &nexus("a", &tcp), None),
        None
    );
    assert_eq!(
        reg.reserve_session(conn(1), 2, &nexus("b", &tcp), Some(1)),
        Some((Limit::TargetSessions, 1))
    );
    let rdma = "iqn.2026-11.org.numatgt:rdma".to_string();
    assert_eq!(
        reg.reserve_session(conn(1), 2, &nexus("b", &rdma), None),
        None
    );
    assert_eq!(
        reg.reserve_session(conn(2), 3, &nexus("c", &rdma), None),
        Some((Limit::Sessions, 2))
    );
    // a logged-in session: the same nexus logging in again reinstates it, never refused
    reg.sessions.lock().expect("sessions").insert(
        nexus("a", &tcp),
        SessionEntry {
            owner: conn(0),
            tsih: 1,
            target: tcp.clone(),
            alias: None,
            peer: addr("127.0.0.1:1"),
            transport: config::Driver::Iscsi,
        },
    );
    reg.pending.lock().expect("pending").remove(&conn(0));
    assert_eq!(
        reg.reserve_session(conn(3), 4, &nexus("a", &tcp), Some(1)),
        None
    );
    // a connection that goes away frees its place
    reg.connection_closed(conn(1));
    reg.connection_closed(conn(3));
    assert_eq!(
        reg.reserve_session(conn(4), 5, &nexus("d", &rdma), None),
        None
    );
}
