//! Entry points for the fuzz targets of `fuzz/` (not an API: hidden from the docs, and
//! nothing but the fuzz crate uses it). They run the daemon's own code without sockets or
//! threads:
//!
//! - [`Daemon::request`]: one tgtadm request (header + payload bytes) decoded and executed
//!   by the management handlers against an in-memory registry, answered with the response
//!   bytes, as `mgmt::socket` serves it (but without its `catch_unwind`: a handler panic
//!   is the fuzzer's finding).
//! - [`Daemon::directory`]: the registry's login [`Directory`] for connection number `n`
//!   (TSIH allocation, session registration and reinstatement), with the connections the
//!   registry asked to close recorded for [`Daemon::take_closed`].
//!
//! Sandboxing: a LUN's `path` is replaced by one of four files in the daemon's own
//! directory (chosen by a hash of the path: a 1 MiB file, a 4 KiB file, an empty file and
//! a missing one), and `sys update reload=...` (which reads configuration files) is
//! answered "unsupported" without running.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use iscsi_proto::{ConnConfig, Directory};
use tgtadm_wire::{ErrCode, Mode, Op, Payload, REQ_HEADER_LEN, ReqHeader};

use crate::conn_id::ConnId;
use crate::mgmt::{Ctx, handlers};
use crate::registry::{Acl, ConnControl, LoginContext, Portal, Registry, Target};

/// The open target every [`Daemon`] starts with (tid 1, ACL `ALL`, no LUN).
pub const TARGET: &str = "iqn.2026-11.org.numatgt:fuzz";

/// Records the connections the registry closes.
#[derive(Default)]
struct Closer(Mutex<Vec<usize>>);

impl ConnControl for Closer {
    fn close(&self, id: ConnId, _reason: &'static str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id.slot);
    }
}

/// An in-memory daemon: registry, management context, backing-file sandbox.
pub struct Daemon {
    ctx: Ctx,
    closer: Arc<Closer>,
    dir: PathBuf,
}

fn conn_id(n: usize) -> ConnId {
    ConnId {
        thread: 0,
        slot: n,
        generation: 1,
    }
}

impl Daemon {
    /// A daemon with one open target ([`TARGET`], tid 1), one portal, no accounts; LUN
    /// backing files live in `dir` (created, and its four files reset, here).
    pub fn new(dir: &Path) -> Daemon {
        let _ = std::fs::create_dir_all(dir);
        for (name, len) in [("f0", 1u64 << 20), ("f1", 4096), ("f2", 0)] {
            if let Ok(f) = std::fs::File::create(dir.join(name)) {
                let _ = f.set_len(len);
            }
        }
        let _ = std::fs::remove_file(dir.join("f3"));
        let all = config::AddressRule::parse("ALL").ok();
        let acl = Acl {
            addresses: all.map(|r| ("ALL".to_string(), r)).into_iter().collect(),
            names: Vec::new(),
        };
        let target = Target::new(
            1,
            TARGET.to_string(),
            None,
            Default::default(),
            ConnConfig::default(),
            acl,
        );
        let portal = Portal {
            addr: SocketAddr::from(([127, 0, 0, 1], 3260)),
            nop_interval: None,
            nop_count: None,
        };
        let registry = Arc::new(Registry::new(
            vec![Arc::new(target)],
            vec![portal],
            ConnConfig::default(),
        ));
        registry.set_state_dir(dir.to_path_buf());
        let closer = Arc::new(Closer::default());
        let base = config::Config::default();
        let ctx = Ctx {
            registry,
            control: Arc::clone(&closer) as Arc<dyn ConnControl>,
            cache: None,
            base: Arc::new(base.clone()),
            debug: None,
            portals: None,
            loaded: Arc::new(Mutex::new(crate::reload::Loaded {
                path: None,
                config: base,
                portals_from_cli: false,
                iser_portals_from_cli: false,
                metrics_from_cli: false,
                demo: Vec::new(),
            })),
            saved: None,
        };
        Daemon {
            ctx,
            closer,
            dir: dir.to_path_buf(),
        }
    }

    /// One request as the management socket serves it: `bytes` is what the client sent
    /// (header, then the payload up to the header's `len`). `None` when the socket would
    /// drop the request without an answer (payload shorter than `len` says).
    pub fn request(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let head = bytes.get(..REQ_HEADER_LEN)?;
        let reply = match ReqHeader::decode(head) {
            Err(_) => Err(ErrCode::InvalidRequest),
            Ok(h) => {
                let rest = (h.len as usize).saturating_sub(REQ_HEADER_LEN);
                let body = bytes.get(REQ_HEADER_LEN..REQ_HEADER_LEN + rest)?;
                match Payload::parse(body) {
                    Err(_) => Err(ErrCode::InvalidRequest),
                    Ok(mut p) => self.sandboxed(&h, &mut p),
                }
            }
        };
        let (code, text) = match reply {
            Ok(t) => (ErrCode::Success, t),
            Err(c) => (c, String::new()),
        };
        Some(tgtadm_wire::encode_response(code, &text))
    }

    fn sandboxed(&self, h: &ReqHeader, p: &mut Payload) -> crate::mgmt::Reply {
        let (mode, op) = (Mode::from_u32(h.mode), Op::from_u32(h.op));
        if mode == Some(Mode::System) && op == Some(Op::Update) && p.get("reload").is_some() {
            return Err(ErrCode::UnsupportedOperation);
        }
        for (k, v) in p.pairs.iter_mut().chain(p.params.iter_mut()) {
            if k == "path" && !v.is_empty() {
                let h = v.bytes().fold(0u8, |a, b| a.wrapping_add(b));
                *v = self.dir.join(format!("f{}", h % 4)).display().to_string();
            }
        }
        handlers::handle(&self.ctx, h, p)
    }

    /// The login [`Directory`] of connection `n` (from `peer`, over TCP).
    pub fn directory(&self, n: usize) -> impl Directory + '_ {
        LoginContext {
            registry: &self.ctx.registry,
            me: conn_id(n),
            control: &*self.closer,
            transport: config::Driver::Iscsi,
        }
    }

    /// Connection `n` went away (the event loop's cleanup).
    pub fn connection_closed(&self, n: usize) {
        self.ctx.registry.connection_closed(conn_id(n));
    }

    /// The connections the daemon asked to close since the last call (reinstatement,
    /// tgtadm `--mode conn --op delete`, `target delete --force`).
    pub fn take_closed(&self) -> Vec<usize> {
        std::mem::take(&mut *self.closer.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The registered sessions of `iqn`: (TSIH, CID, connection number), as `tgtadm
    /// --mode conn --op show` lists them.
    pub fn sessions(&self, iqn: &str) -> Vec<(u16, u16, usize)> {
        self.ctx
            .registry
            .sessions_of(iqn)
            .iter()
            .map(|s| (s.tsih, s.cid, s.owner.slot))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(mode: Mode, op: Op, tid: i32, payload: &str) -> Vec<u8> {
        ReqHeader {
            mode: mode.as_u32(),
            op: op.as_u32(),
            tid,
            ..ReqHeader::default()
        }
        .encode(payload)
    }

    #[test]
    fn requests_run_against_the_in_memory_registry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = Daemon::new(dir.path());
        let ok = tgtadm_wire::encode_response(ErrCode::Success, "");
        let new = req(
            Mode::Target,
            Op::New,
            2,
            "targetname=iqn.2026-11.org.numatgt:t2",
        );
        assert_eq!(d.request(&new), Some(ok.clone()));
        assert_eq!(
            d.request(&new),
            Some(tgtadm_wire::encode_response(ErrCode::TargetExist, ""))
        );
        let show = d
            .request(&req(Mode::Target, Op::Show, -1, ""))
            .expect("answered");
        let text = String::from_utf8_lossy(&show);
        assert!(text.contains(TARGET) && text.contains("iqn.2026-11.org.numatgt:t2"));
        // a LUN on a sandboxed file (f0, 1 MiB), whatever the path says
        let lun = ReqHeader {
            mode: Mode::Device.as_u32(),
            op: Op::New.as_u32(),
            tid: 1,
            lun: 1,
            ..ReqHeader::default()
        }
        .encode("bsopts=cache=page,path=/nonexistent/#");
        assert_eq!(d.request(&lun), Some(ok));
        // reload reads files: not run
        assert_eq!(
            d.request(&req(Mode::System, Op::Update, -1, "reload=/etc/x.conf")),
            Some(tgtadm_wire::encode_response(
                ErrCode::UnsupportedOperation,
                ""
            ))
        );
        // a payload shorter than the header's len: no answer, as the socket
        let mut short = req(Mode::System, Op::Show, -1, "");
        short[72..76].copy_from_slice(&200u32.to_le_bytes());
        assert_eq!(d.request(&short), None);
    }
}
