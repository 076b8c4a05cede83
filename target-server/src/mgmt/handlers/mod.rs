//! Request dispatch: (mode, op) to the handler, with tgtd's answers for what it does not
//! know (an unknown mode or op is an invalid request; a known op a mode lacks is
//! unsupported).

pub mod account;
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
    if !h.lld.is_empty() && h.lld != "iscsi" && mode != Mode::System {
        // the iSER driver is in tgtd's list but not running here; others do not exist
        return Err(ErrCode::NoDriver);
    }
    tracing::debug!(
        ?mode,
        ?op,
        tid = h.tid,
        lun = h.lun,
        sid = h.sid,
        "management request"
    );
    let r = match mode {
        Mode::System => system::system(ctx, op, p),
        Mode::Target => target::handle(ctx, op, h, p),
        Mode::Device => lun::handle(ctx, op, h, p),
        Mode::Account => account::handle(ctx, op, h, p),
        Mode::Portal => system::portal(ctx, op, p),
        Mode::Lld => system::lld(ctx, op),
        Mode::Session => system::session(ctx, op, h),
        Mode::Connection => system::connection(ctx, op, h),
    };
    if let Err(e) = &r {
        tracing::info!(?mode, ?op, tid = h.tid, "management request failed: {e}");
    }
    r
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
