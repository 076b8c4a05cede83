//! Persistent reservations of an RBD LUN that several gateways export as one target: the
//! state lives in the cluster, in a RADOS object beside the image (`numatgt.pr.<image>`,
//! the `scsi` crate's state bytes), and every gateway holds a copy its commands are checked
//! against.
//!
//! - A PERSISTENT RESERVE OUT runs on an I/O worker: the object is read and taken as the
//!   copy, the command executed on it, and the new state written back only if the object
//!   still holds what was read (RADOS compare-and-write; otherwise it starts over with the
//!   newer state). The other gateways are then notified (RADOS watch/notify, with the new
//!   state and what the command did to their nexuses: unit attentions, PREEMPT AND ABORT)
//!   and the status is sent only once they answered — so no conflicting command is admitted
//!   anywhere after the initiator saw GOOD. A gateway that does not answer within 10 s is
//!   fenced first (its Ceph client blocklisted, by the address it wrote beside the state).
//! - SPC-2 RESERVE and RELEASE go the same way (the holder is part of the state). The
//!   releases SPC-2 makes on its own are written by [`release_spc2`]: the holder's I_T
//!   nexus loss (a Logout is answered only after it), LOGICAL UNIT RESET and target resets
//!   (with the reset's event for the others), and, when a gateway starts, whatever was held
//!   through its own relative port before it stopped.
//! - Each gateway watches the object; a watch that broke (a network cut, an OSD restart) is
//!   made again and the object read again by the LUN's `pr-<lun>` thread. Until then the
//!   copy may be stale, and the LUN admits no command a reservation could refuse (NOT
//!   READY, ASYMMETRIC ACCESS STATE TRANSITION: initiators retry, or use another path). So
//!   does a copy the cluster has not confirmed for the lease (`pr_shared::LEASE_MS`, 8 s:
//!   less than the 10 s above), checked per command: a gateway cut off or frozen stops
//!   admitting before another one's change completes.
//! - File LUNs, single gateways and read-only images keep the local reservations
//!   (`pr`, `pr_store`).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use scsi::{CmdCtx, Outcome};

use super::reply::{Answer, ReplyTo, TaskControl, completed};
use crate::pr_shared::{LEASE_MS, MAX_STATE, SharedPr};
use crate::registry::{Lun, Target};

/// How long a PR OUT waits for the other gateways to take its change.
const NOTIFY_TIMEOUT_MS: u64 = 10_000;
/// Compare-and-write attempts before a PR OUT gives up (others keep changing the state).
const ATTEMPTS: usize = 8;
/// How often the `pr-<lun>` thread checks its watch.
const WATCH_CHECK: Duration = Duration::from_secs(1);

/// Where PREEMPT AND ABORT ends tasks (the event threads), set once they exist.
static TASKS: OnceLock<Arc<dyn TaskControl + Send + Sync>> = OnceLock::new();

/// Called by the runtime once the event threads exist.
pub(crate) fn set_task_control(t: Arc<dyn TaskControl + Send + Sync>) {
    let _ = TASKS.set(t);
}

/// Before the LUN serves: its logical unit takes the cluster's state (the object is made
/// from the local state when no gateway made it yet) and reports every change from now on.
pub(crate) fn init(
    lu: &scsi::LogicalUnit,
    number: u64,
    image: &rbd::Image,
    sp: &SharedPr,
) -> io::Result<()> {
    lu.set_shared_pr(true);
    let local = lu.pr_state_bytes().bytes;
    if !image.object_replace_if(&sp.object, rbd::Expect::Absent, &local)? {
        load(lu, image, sp, true)?;
    }
    // an SPC-2 reservation held through this gateway's port before it stopped: that I_T
    // nexus is gone (the others are told once they watch; none of this gateway's own
    // nexuses exists yet)
    let port = lu.params().rel_port_id;
    if port != 0 {
        release_in(
            lu,
            number,
            image,
            sp,
            scsi::Spc2Holder::ThroughPort(port),
            &[],
        );
    }
    tracing::info!(object = %sp.object, "persistent reservations shared through the cluster");
    Ok(())
}

/// The state object's bytes (`None`: it does not exist). Read with a buffer for the usual
/// few registrations first, with one for the largest state only when that one is full.
fn read_state(image: &rbd::Image, object: &str) -> io::Result<Option<Vec<u8>>> {
    const USUAL: usize = 64 << 10;
    match image.object_read(object, USUAL)? {
        Some(b) if b.len() == USUAL => image.object_read(object, MAX_STATE),
        read => Ok(read),
    }
}

/// Reads the state object into `lu` (`force`: whatever `lu` holds; else only a newer one).
fn load(lu: &scsi::LogicalUnit, image: &rbd::Image, sp: &SharedPr, force: bool) -> io::Result<()> {
    let bytes = read_state(image, &sp.object)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "state object vanished"))?;
    let r = if force {
        lu.set_pr_state(&bytes).map(drop)
    } else {
        lu.adopt_pr_state(&bytes).map(drop)
    };
    r.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", sp.object)))
}

/// Starts following the other gateways' changes to `lun` of `target` (a shared LUN;
/// nothing for others): the watch, then one more read (what changed before the watch
/// existed), then the `pr-<lun>` thread that keeps the watch alive.
pub(crate) fn start(target: &Arc<Target>, lun: &Lun) {
    let Some(sp) = &lun.shared_pr else {
        return;
    };
    if sp.started.swap(true, Ordering::AcqRel) {
        return;
    }
    let (sp, target, number) = (Arc::clone(sp), Arc::downgrade(target), lun.number);
    if let Err(e) = watch(&sp, &target, number) {
        tracing::error!(lun = number, object = %sp.object,
            "cannot watch the reservation state (retried every second): {e}");
        sp.distrust(&lun.scsi);
    }
    let spawned = std::thread::Builder::new()
        .name(format!("pr-{number}"))
        .spawn(move || keep_watching(&sp, &target, number));
    if let Err(e) = spawned {
        tracing::error!(
            lun = number,
            "cannot start the reservation watch thread: {e}"
        );
    }
}

/// The LUN `number` of `target` whose shared reservations are `sp`.
fn current(
    target: &Weak<Target>,
    number: u64,
    sp: &Arc<SharedPr>,
) -> Option<(Arc<Target>, Arc<Lun>)> {
    let t = target.upgrade()?;
    let lun = t.lun_set().map.get(&number).cloned()?;
    let same = lun.shared_pr.as_ref().is_some_and(|x| Arc::ptr_eq(x, sp));
    same.then_some((t, lun))
}

/// Establishes the watch and reads the state once more.
fn watch(sp: &Arc<SharedPr>, target: &Weak<Target>, number: u64) -> io::Result<()> {
    let Some((_, lun)) = current(target, number, sp) else {
        return Ok(());
    };
    let Some(image) = lun.store.rbd_image() else {
        return Ok(());
    };
    if let Some(old) = sp.cookie.lock().unwrap_or_else(|p| p.into_inner()).take() {
        image.object_unwatch(old);
    }
    let (on_sp, on_target) = (Arc::downgrade(sp), target.clone());
    let (err_sp, err_target) = (Arc::downgrade(sp), target.clone());
    // an object removed by an administrator is made again from this gateway's copy (a
    // watch needs the object; an existing one is left as it is)
    let local = lun.scsi.pr_state_bytes().bytes;
    if image.object_replace_if(&sp.object, rbd::Expect::Absent, &local)? {
        tracing::warn!(lun = number, object = %sp.object,
            "the reservation state object was gone: made again from this gateway's copy");
    }
    let cookie = image.object_watch(
        &sp.object,
        rbd::ObjectWatchFns {
            on_notify: Box::new(move |payload| {
                if let Some(sp) = on_sp.upgrade() {
                    take_notification(&sp, &on_target, number, payload);
                }
            }),
            on_error: Box::new(move |e| {
                tracing::warn!(lun = number, "reservation state watch broke: {e}");
                if let Some(sp) = err_sp.upgrade()
                    && let Some((_, lun)) = current(&err_target, number, &sp)
                {
                    sp.distrust(&lun.scsi);
                }
            }),
        },
    )?;
    *sp.cookie.lock().unwrap_or_else(|p| p.into_inner()) = Some(cookie);
    sp.confirmed(0);
    // where this gateway is, for the others to fence it if it ever stops answering
    let addr = image.client_addr()?;
    image.object_set_xattr(&sp.object, &client_key(image.client_id()), addr.as_bytes())?;
    load(&lun.scsi, image, sp, false)
}

/// The `pr-<lun>` thread: checks the watch every second and makes it again when it broke;
/// ends when the LUN is gone.
fn keep_watching(sp: &Arc<SharedPr>, target: &Weak<Target>, number: u64) {
    // failed attempts in a row (a fenced gateway's client is blocklisted for good: said
    // once a minute)
    let mut failures = 0u64;
    loop {
        std::thread::sleep(WATCH_CHECK);
        let Some((_, lun)) = current(target, number, sp) else {
            return;
        };
        let Some(image) = lun.store.rbd_image() else {
            return;
        };
        let cookie = *sp.cookie.lock().unwrap_or_else(|p| p.into_inner());
        // confirmed within the lease: the copy stays trusted; otherwise (an error, or no
        // confirmation for too long: this process was frozen, or cut off) watched again
        let fresh = cookie.and_then(|c| image.object_watch_check(c).ok());
        if let Some(ms) = fresh.filter(|&ms| ms <= LEASE_MS) {
            sp.confirmed(ms);
        }
        let broken = sp.broken.load(Ordering::Acquire) || fresh.is_none_or(|ms| ms > LEASE_MS);
        if !broken {
            continue;
        }
        sp.distrust(&lun.scsi);
        match watch(sp, target, number) {
            Ok(()) => {
                sp.trust(&lun.scsi);
                sp.stats.rewatched.fetch_add(1, Ordering::Relaxed);
                failures = 0;
                tracing::info!(
                    lun = number,
                    "reservation state watched again and read again"
                );
            }
            Err(e) => {
                if failures % 60 == 0 {
                    tracing::warn!(
                        lun = number,
                        attempts = failures + 1,
                        "reservation state watch not made again yet (media access waits): {e}"
                    );
                }
                failures += 1;
            }
        }
    }
}

/// A notification: (sender, state, events) as [`payload`] made it.
fn take_notification(sp: &SharedPr, target: &Weak<Target>, number: u64, payload: &[u8]) {
    let Some((from, state, events)) = parse_payload(payload) else {
        tracing::warn!(
            lun = number,
            len = payload.len(),
            "reservation notification not understood"
        );
        return;
    };
    if from == sp.me {
        return; // this gateway's own change, applied when it was made
    }
    let Some(t) = target.upgrade() else {
        return;
    };
    let Some(lun) = t.lun_set().map.get(&number).cloned() else {
        return;
    };
    if let Err(e) = lun.scsi.adopt_pr_state(state) {
        tracing::error!(
            lun = number,
            "reservation state from another gateway refused: {e}"
        );
    }
    if events.is_empty() {
        // a change with no effect on other nexuses (RESERVE, RELEASE, an SPC-2 release)
        sp.stats.taken.fetch_add(1, Ordering::Relaxed);
        return;
    }
    match lun.scsi.apply_peer_pr_events(events) {
        Ok(applied) => {
            let tasks = TASKS.get();
            if applied.reset {
                tracing::info!(
                    lun = number,
                    "reset through another gateway: unit attentions set, tasks ended"
                );
                if let Some(tasks) = tasks {
                    tasks.abort_tasks(t.tid, Some(number), None, None, None);
                }
            } else if !applied.abort.is_empty() {
                tracing::info!(
                    lun = number,
                    nexuses = applied.abort.len(),
                    "PREEMPT AND ABORT through another gateway: ending the preempted nexuses' tasks"
                );
                if let Some(tasks) = tasks {
                    tasks.abort_tasks(t.tid, Some(number), Some(applied.abort), None, None);
                }
            }
        }
        Err(e) => tracing::error!(
            lun = number,
            "reservation events from another gateway refused: {e}"
        ),
    }
    sp.stats.taken.fetch_add(1, Ordering::Relaxed);
}

/// Task management reset `luns` through this gateway (`target`: a target reset, else
/// LOGICAL UNIT RESET): the reset releases the SPC-2 reservation in the cluster's state
/// too, and the other gateways of each shared LUN are told and reset their copies (unit
/// attentions for their nexuses, their tasks of it ended) before this returns, or the
/// notify timeout passed (a silent gateway is logged, not fenced: what a reset changes
/// only lets more through). Blocking: run on an I/O worker, before the task management
/// response.
pub(crate) fn spread_reset(luns: &[Arc<Lun>], target: bool) {
    let event = scsi::LogicalUnit::peer_reset_event(target);
    for lun in luns {
        release_spc2(lun, scsi::Spc2Holder::Any, &event);
    }
}

/// Releases the SPC-2 reservation of `lun` (a shared LUN) that `which` holds in the
/// cluster's state, then tells the other gateways, with `events` for them
/// ([`scsi::LogicalUnit::apply_peer_pr_events`]: a reset's), the new state with it. When
/// `which` holds none, only `events` are sent (nothing when there are none). The releases
/// SPC-2 makes outside RELEASE: its holder's I_T nexus loss (before a Logout's response),
/// resets, a restarted gateway's nexuses. Blocking: run on an I/O worker. Failures are
/// logged: the reservation then stays until a reset or a RELEASE.
pub(crate) fn release_spc2(lun: &Lun, which: scsi::Spc2Holder<'_>, events: &[u8]) {
    if let (Some(sp), Some(image)) = (&lun.shared_pr, lun.store.rbd_image()) {
        release_in(&lun.scsi, lun.number, image, sp, which, events);
    }
}

/// [`release_spc2`] of LUN `number`, whose logical unit is `lu`.
fn release_in(
    lu: &scsi::LogicalUnit,
    number: u64,
    image: &rbd::Image,
    sp: &SharedPr,
    which: scsi::Spc2Holder<'_>,
    events: &[u8],
) {
    let _one = sp.local.lock().unwrap_or_else(|p| p.into_inner());
    // the events go out even when the release could not be stored (with this gateway's
    // copy): a reset reaches the other gateways whatever happened to the state
    let mut note = (!events.is_empty()).then(|| payload(sp.me, &lu.pr_state_bytes().bytes, events));
    for attempt in 0..=ATTEMPTS {
        if attempt == ATTEMPTS {
            tracing::error!(
                lun = number,
                "the reservation state kept changing: the SPC-2 release was not stored"
            );
            break;
        }
        let (before, exists) = match read_state(image, &sp.object) {
            Ok(Some(b)) => (b, true),
            Ok(None) => (lu.pr_state_bytes().bytes, false),
            Err(e) => {
                tracing::error!(lun = number, "cannot read the reservation state: {e}");
                break;
            }
        };
        let req = match lu.release_spc2_in(&before, which) {
            Ok(Some(req)) => req,
            Ok(None) => {
                if note.is_some() {
                    note = Some(payload(sp.me, &before, events));
                }
                break;
            }
            Err(e) => {
                tracing::error!(lun = number, object = %sp.object,
                    "the reservation state in the cluster is damaged: {e}");
                break;
            }
        };
        match image.object_replace_if(&sp.object, unchanged(&before, exists), &req.bytes) {
            Ok(true) => {
                sp.stats.written.fetch_add(1, Ordering::Relaxed);
                tracing::info!(lun = number, "SPC-2 reservation released in the cluster");
                note = Some(payload(sp.me, &req.bytes, events));
                break;
            }
            Ok(false) => {
                sp.stats.races.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let _ = lu.set_pr_state(&before);
                tracing::error!(lun = number, "cannot store the SPC-2 release: {e}");
                break;
            }
        }
    }
    let Some(note) = note else {
        return;
    };
    match image.object_notify(&sp.object, &note, NOTIFY_TIMEOUT_MS) {
        Ok(silent) if silent.is_empty() => {}
        Ok(silent) => tracing::warn!(
            lun = number,
            silent = silent.len(),
            "a gateway did not take the change in time"
        ),
        Err(e) => tracing::warn!(
            lun = number,
            "the other gateways could not be told of the change: {e}"
        ),
    }
}

/// A notification's bytes: sender (u64), state length (u32), state, events (the rest).
fn payload(me: u64, state: &[u8], events: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(12 + state.len() + events.len());
    p.extend_from_slice(&me.to_be_bytes());
    p.extend_from_slice(&u32::try_from(state.len()).unwrap_or(u32::MAX).to_be_bytes());
    p.extend_from_slice(state);
    p.extend_from_slice(events);
    p
}

fn parse_payload(p: &[u8]) -> Option<(u64, &[u8], &[u8])> {
    let from = u64::from_be_bytes(p.get(..8)?.try_into().ok()?);
    let len = usize::try_from(u32::from_be_bytes(p.get(8..12)?.try_into().ok()?)).ok()?;
    let state = p.get(12..12usize.checked_add(len)?)?;
    let events = p.get(12 + len..)?;
    Some((from, state, events))
}

/// A PERSISTENT RESERVE OUT, RESERVE or RELEASE of a shared LUN: carried out on an I/O worker (see the
/// module's text); its status goes to `reply` once the cluster and the other gateways have
/// the change.
pub(crate) fn reserve_out(
    lun: &Arc<Lun>,
    tid: u32,
    nexus: &scsi::Nexus,
    cdb: &[u8],
    data: &[u8],
    ctx: &super::StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    let (reply, later) = reply.defer();
    let (lun, nexus, cdb, data) = (Arc::clone(lun), nexus.clone(), cdb.to_vec(), data.to_vec());
    ctx.run(move || {
        let c = run_shared(&lun, tid, &nexus, &cdb, &data);
        reply.send(completed(c));
    });
    Answer::Later(later)
}

fn run_shared(
    lun: &Lun,
    tid: u32,
    nexus: &scsi::Nexus,
    cdb: &[u8],
    data: &[u8],
) -> scsi::Completion {
    let failed = || lun.scsi.persist_failed();
    let (Some(sp), Some(image)) = (&lun.shared_pr, lun.store.rbd_image()) else {
        return failed();
    };
    let _one = sp.local.lock().unwrap_or_else(|p| p.into_inner());
    let cmd = CmdCtx {
        cdb,
        data_out: data,
        landed: 0,
        luns: &[],
    };
    for _ in 0..ATTEMPTS {
        // the object gone (an administrator removed a damaged one): this gateway's copy
        // is the state, and the change makes the object again
        let (before, exists) = match read_state(image, &sp.object) {
            Ok(Some(b)) => (b, true),
            Ok(None) => (lun.scsi.pr_state_bytes().bytes, false),
            Err(e) => {
                tracing::error!(lun = lun.number, "cannot read the reservation state: {e}");
                return failed();
            }
        };
        if let Err(e) = lun.scsi.set_pr_state(&before) {
            tracing::error!(lun = lun.number, object = %sp.object,
                "the reservation state in the cluster is damaged: {e}");
            return failed();
        }
        let po = match lun.scsi.execute_nexus(nexus, &cmd) {
            Outcome::Action(scsi::Action::Complete(c)) => return c,
            Outcome::Action(_) => return failed(),
            Outcome::PersistentReserveOut(po) => po,
        };
        let Some(req) = &po.persist else {
            finish_local(lun, tid, &po.abort);
            return po.completion;
        };
        match image.object_replace_if(&sp.object, unchanged(&before, exists), &req.bytes) {
            Ok(true) => {
                sp.stats.written.fetch_add(1, Ordering::Relaxed);
                finish_local(lun, tid, &po.abort);
                let note = payload(sp.me, &req.bytes, &po.peer_events);
                match image.object_notify(&sp.object, &note, NOTIFY_TIMEOUT_MS) {
                    Ok(silent) if silent.is_empty() => {}
                    Ok(silent) => {
                        sp.stats.unanswered.fetch_add(1, Ordering::Relaxed);
                        fence_silent(lun, image, sp, &silent);
                    }
                    Err(e) => {
                        // the change is stored; who took it is unknown: the status says
                        // so rather than claim every gateway enforces it
                        tracing::error!(
                            lun = lun.number,
                            "the other gateways could not be told of the reservation change: {e}"
                        );
                        return failed();
                    }
                }
                return po.completion;
            }
            Ok(false) => {
                sp.stats.races.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    lun = lun.number,
                    "reservation state changed meanwhile: again"
                );
            }
            Err(e) => {
                // nothing was written: the copy goes back to what the cluster holds
                let _ = lun.scsi.set_pr_state(&before);
                tracing::error!(lun = lun.number, "cannot store the reservation state: {e}");
                return failed();
            }
        }
    }
    tracing::error!(
        lun = lun.number,
        attempts = ATTEMPTS,
        "the reservation state kept changing under this PERSISTENT RESERVE OUT"
    );
    let _ = load(&lun.scsi, image, sp, true);
    failed()
}

/// The compare part of a compare-and-write of the state object: it still holds `before`
/// (or, when it did not `exist`, still does not).
fn unchanged(before: &[u8], exists: bool) -> rbd::Expect<'_> {
    if exists {
        rbd::Expect::Bytes {
            offset: 0,
            bytes: before,
        }
    } else {
        rbd::Expect::Absent
    }
}

/// Gateways that did not take a reservation change within the timeout are fenced before
/// the command's status: each such watcher's Ceph client (its address as it wrote it beside
/// the state when it began watching) is blocklisted, so a gateway that
/// is cut off, frozen or dead can no longer reach the cluster — its watch breaks (its LUN's
/// media access then waits, see the module's text), its writes fail — and a restarted one
/// comes back as a new client that reads the state afresh. A watcher of this very client
/// (this gateway's own watch, which answers at once unless it broke) is never fenced.
fn fence_silent(lun: &Lun, image: &rbd::Image, sp: &SharedPr, silent: &rbd::Unanswered) {
    let me = image.client_id();
    for &(client, _cookie) in silent {
        if client == me {
            tracing::warn!(lun = lun.number, "this gateway's own watch did not answer");
            continue;
        }
        let addr = match image.object_xattr(&sp.object, &client_key(client)) {
            Ok(Some(a)) => String::from_utf8_lossy(&a).into_owned(),
            Ok(None) => {
                tracing::error!(
                    lun = lun.number,
                    client,
                    "a gateway did not take the reservation change and never said where it is: \
                     not fenced"
                );
                continue;
            }
            Err(e) => {
                tracing::error!(
                    lun = lun.number,
                    client,
                    "cannot look the silent gateway up: {e}"
                );
                continue;
            }
        };
        match image.blocklist(&addr) {
            Ok(()) => {
                sp.stats.fenced.fetch_add(1, Ordering::Relaxed);
                tracing::error!(lun = lun.number, client, addr = %addr,
                    "fenced a gateway that did not take the reservation change: its Ceph client \
                     is blocklisted");
            }
            Err(e) => tracing::error!(lun = lun.number, client, addr = %addr,
                "a gateway did not take the reservation change and could not be fenced: {e}"),
        }
    }
}

/// The state object's attribute that holds the address of the gateway whose Ceph client
/// has id `client` (each gateway writes its own when it starts watching).
fn client_key(client: u64) -> String {
    format!("numatgt.gateway.{client}")
}

/// PREEMPT AND ABORT: the preempted nexuses' tasks on this gateway end.
fn finish_local(lun: &Lun, tid: u32, abort: &[scsi::NexusId]) {
    if abort.is_empty() {
        return;
    }
    tracing::info!(
        lun = lun.number,
        nexuses = abort.len(),
        "PREEMPT AND ABORT: ending the preempted I_T nexuses' tasks"
    );
    if let Some(tasks) = TASKS.get() {
        tasks.abort_tasks(tid, Some(lun.number), Some(abort.to_vec()), None, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_garbage_is_refused() {
        let p = payload(7, b"state", b"events");
        assert_eq!(parse_payload(&p), Some((7, &b"state"[..], &b"events"[..])));
        for cut in 0..12 {
            assert_eq!(parse_payload(&p[..cut]), None);
        }
        let mut long = p.clone();
        long[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(parse_payload(&long), None);
    }
}
