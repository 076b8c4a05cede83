//! Request dispatch: (mode, op) to the handler, with tgtd's answers for what it does not
//! know (an unknown mode or op is an invalid request; a known op a mode lacks is
//! unsupported), and the `--lld` check: `iscsi` always, `iser` while the iSER LLD is
//! `ready` (else "can't find the driver", as tgtd when its iSER driver failed to start).

pub mod account;
mod disc;
pub mod lun;
pub mod system;
pub mod target;

use super::{Ctx, Reply};
use tgtadm_wire::{ErrCode, Mode, Op, Payload, ReqHeader};

/// Handle one decoded request.
pub fn handle(ctx: &Ctx, h: &ReqHeader, p: &Payload) -> Reply {
    let (Some(mode), Some(op)) = (Mode::from_u32(h.mode), Op::from_u32(h.op)) else {
        return Err(ErrCode::InvalidRequest);
    };
    let lld = request_lld(&h.lld, mode, crate::rdma_probe::iser_state())?;
    tracing::debug!(
        ?mode,
        ?op,
        tid = h.tid,
        lun = h.lun,
        sid = h.sid,
        lld = lld.as_str(),
        "management request"
    );
    let r = match mode {
        Mode::System => system::system(ctx, op, p),
        Mode::Target => target::handle(ctx, op, h, p, lld),
        Mode::Device => lun::handle(ctx, op, h, p),
        Mode::Account => account::handle(ctx, op, h, p),
        Mode::Portal => system::portal(ctx, op, p, lld),
        Mode::Lld => system::lld(ctx, op),
        Mode::Session => system::session(ctx, op, h),
        Mode::Connection => system::connection(ctx, op, h),
    };
    match &r {
        Err(e) => tracing::info!(?mode, ?op, tid = h.tid, "management request failed: {e}"),
        // what changed is saved (`--save-config`); showing and counting change nothing
        // (an upgrade that did not happen changed nothing either)
        Ok(_) if mode == Mode::System && p.get("upgrade").is_some() => {}
        Ok(_) if !matches!(op, Op::Show | Op::Stats) => crate::saved::after_change(ctx),
        Ok(_) => {}
    }
    r
}

/// The LLD a request is for: `--lld` (empty means `iscsi`). `iscsi` is always there; `iser`
/// only while `iser_state` (the probe's `ready`/`error`) is `ready`; anything else is
/// `NoDriver`. `--mode sys` does not depend on an LLD and takes any (as `iscsi`).
pub fn request_lld(lld: &str, mode: Mode, iser_state: &str) -> Result<config::Driver, ErrCode> {
    let driver = match lld {
        "" | "iscsi" => Some(config::Driver::Iscsi),
        "iser" if iser_state == "ready" => Some(config::Driver::Iser),
        _ => None,
    };
    match (driver, mode) {
        (Some(d), _) => Ok(d),
        (None, Mode::System) => Ok(config::Driver::Iscsi),
        (None, _) => Err(ErrCode::NoDriver),
    }
}

/// `tid` of a request that needs one: > 0.
pub fn need_tid(h: &ReqHeader) -> Result<u32, ErrCode> {
    if h.tid <= 0 {
        return Err(ErrCode::InvalidRequest);
    }
    Ok(h.tid as u32)
}

/// `Yes`/`No`, `1`/`0`, `on`/`off` (any case).
pub fn parse_bool(v: &str) -> Result<bool, ErrCode> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "yes" | "on" | "true" => Ok(true),
        "0" | "no" | "off" | "false" => Ok(false),
        _ => Err(ErrCode::InvalidRequest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::Driver;

    #[test]
    fn lld_names() {
        for mode in [
            Mode::Target,
            Mode::Portal,
            Mode::Device,
            Mode::Lld,
            Mode::Session,
        ] {
            assert_eq!(request_lld("iscsi", mode, "error"), Ok(Driver::Iscsi));
            assert_eq!(request_lld("", mode, "error"), Ok(Driver::Iscsi));
            assert_eq!(request_lld("iser", mode, "ready"), Ok(Driver::Iser));
            // tgtd: an LLD that failed to initialise is not found
            assert_eq!(request_lld("iser", mode, "error"), Err(ErrCode::NoDriver));
            assert_eq!(request_lld("fc", mode, "ready"), Err(ErrCode::NoDriver));
            // names are exact, as tgtd's
            assert_eq!(request_lld("ISER", mode, "ready"), Err(ErrCode::NoDriver));
        }
        assert_eq!(
            request_lld("iser", Mode::System, "error"),
            Ok(Driver::Iscsi)
        );
        assert_eq!(request_lld("iser", Mode::System, "ready"), Ok(Driver::Iser));
    }
}
