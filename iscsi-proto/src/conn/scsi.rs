//! SCSI command flow: command receipt (immediate data, extended CDB / bidi AHS),
//! unsolicited Data-Out up to FirstBurstLength, R2T generation within MaxBurstLength and
//! MaxOutstandingR2T, Data-Out validation, delivery in CmdSN order once the write data
//! is complete, and Data-In / SCSI Response generation for completed commands.

use super::framing::Framing;
use super::state::State;
use super::tx::TxData;
use super::{Cdb, CommandResult, Connection, Event, ProtocolError, ScsiCommand};
use crate::DataBuf;
use crate::pdu::fields::lun_decode;
use crate::pdu::frame::{AHS_BIDI_READ_LEN, AHS_EXTENDED_CDB, parse_ahs};
use crate::pdu::{
    Bhs, DataIn, DataOut, R2t, RESERVED_TAG, RejectReason, ScsiCommandHdr, ScsiResponse,
};
use std::collections::VecDeque;

/// Largest write (EDTL) accepted; bounds the memory one task can make us hold.
pub const MAX_WRITE_LEN: u32 = 128 << 20;
/// Recycled write buffers: largest kept, and total bytes kept per connection.
const SPARE_BUF_MAX: usize = 2 << 20;
const SPARE_BYTES_MAX: usize = 8 << 20;
/// Recycled R2T queues kept per connection.
const SPARE_R2T_QUEUES: usize = 64;

/// An outstanding R2T.
#[derive(Debug)]
pub(crate) struct R2tState {
    ttt: u32,
    offset: u32,
    len: u32,
    received: u32,
    next_data_sn: u32,
}

/// A task from receipt of its command to its completion.
#[derive(Debug)]
pub(crate) struct Task {
    pub(crate) lun_raw: u64,
    pub(crate) lun: u64,
    pub(crate) ordered: bool,
    pub(crate) delivered: bool,
    /// Aborted by the task management request with this ITT while the server ran it: its
    /// completion sends nothing.
    pub(crate) aborted_by: Option<u32>,
    pub(crate) read: bool,
    pub(crate) write: bool,
    pub(crate) expected_read_len: u32,
    pub(crate) edtl_write: u32,
    pub(crate) cmd: Option<ScsiCommand>,
    /// Write bytes received so far (== cmd.data_out.len()).
    pub(crate) received: u32,
    /// Unsolicited bytes allowed (immediate + Data-Out).
    pub(crate) unsol_limit: u32,
    pub(crate) unsol_done: bool,
    pub(crate) unsol_data_sn: u32,
    pub(crate) next_r2t_offset: u32,
    pub(crate) r2ts: VecDeque<R2tState>,
    pub(crate) r2t_sn: u32,
    /// A Data-Out arrived out of DataSN order (RFC 7143 7.9: an implied digest error; at
    /// ErrorRecoveryLevel 0 the task ends with CHECK CONDITION, PROTOCOL SERVICE CRC ERROR
    /// once the initiator has sent the last PDU of every sequence it was asked for). The
    /// rest of its data is discarded and no further R2T is sent.
    pub(crate) data_failed: bool,
    /// RDMA datamover: the buffers announced with the command, the Get in flight.
    pub(crate) rdma: super::rdma::TaskBufs,
}

pub(crate) fn next_tag(t: u32) -> u32 {
    match t.wrapping_add(1) {
        RESERVED_TAG | 0 => 1,
        n => n,
    }
}

impl Task {
    fn write_complete(&self) -> bool {
        !self.write || self.received >= self.edtl_write
    }

    /// A failed data phase is over: no unsolicited PDU and no solicited sequence left.
    fn failed_phase_over(&self) -> bool {
        self.data_failed && self.unsol_done && self.r2ts.is_empty()
    }
}

/// Fixed-format sense data: ABORTED COMMAND, PROTOCOL SERVICE CRC ERROR (47h/05h), the
/// iSCSI condition for a task whose Data-Out was lost (RFC 7143 11.4.7.2).
const SENSE_PROTOCOL_CRC_ERROR: [u8; 18] = [
    0x70, 0, 0x0B, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x47, 0x05, 0, 0, 0, 0,
];

impl<B: DataBuf> Connection<B> {
    pub(crate) fn handle_command(
        &mut self,
        c: &ScsiCommandHdr,
        hdr: &[u8; 48],
        ahs: &[u8],
        data: &[u8],
    ) {
        let State::FullFeature(ff) = &self.state else {
            return;
        };
        if ff.logout.is_some() {
            // a Logout waits for the tasks to end
            self.reject(RejectReason::ProtocolError, hdr);
            return;
        }
        let p = &ff.params;
        let (immediate_data, initial_r2t, first_burst_length) =
            (p.immediate_data, p.initial_r2t, p.first_burst_length);
        let rdma = ff.session.rdma.is_some();
        if !c.immediate
            && let Err(r) = self.window.check(c.cmd_sn)
        {
            self.stats.dropped_out_of_window += 1;
            self.last_drop = Some(r.to_string());
            return;
        }
        let reject_consume = |me: &mut Self, reason: RejectReason| {
            // A rejected non-immediate command still consumes its CmdSN.
            if !c.immediate {
                let _ = me.window.arrive(c.cmd_sn, None);
                me.pump_window();
            }
            me.reject(reason, hdr);
        };
        if c.itt == RESERVED_TAG || self.tasks.contains_key(&c.itt) {
            reject_consume(self, RejectReason::ProtocolError);
            return;
        }
        if c.immediate && self.tasks.len() >= self.cfg.max_queued_commands.max(1) as usize {
            // Immediate commands bypass the CmdSN window; bound them by the task limit.
            self.reject(RejectReason::ImmediateCommandReject, hdr);
            return;
        }
        if c.write && c.edtl > MAX_WRITE_LEN {
            reject_consume(self, RejectReason::OutOfResources);
            return;
        }
        let Ok(ahs) = parse_ahs(ahs) else {
            reject_consume(self, RejectReason::InvalidPduField);
            return;
        };
        let Some(mut cdb) = Cdb::new(&c.cdb) else {
            reject_consume(self, RejectReason::InvalidPduField);
            return;
        };
        let mut bidi_len = None;
        for a in &ahs {
            match a.ahs_type {
                AHS_EXTENDED_CDB if a.data.len() > 1 && cdb.extend(&a.data[1..]) => {}
                AHS_BIDI_READ_LEN if a.data.len() == 5 => {
                    bidi_len = Some(u32::from_be_bytes([
                        a.data[1], a.data[2], a.data[3], a.data[4],
                    ]))
                }
                _ => {
                    reject_consume(self, RejectReason::InvalidPduField);
                    return;
                }
            }
        }
        let edtl_write = if c.write { c.edtl } else { 0 };
        let expected_read_len = match (c.read, c.write) {
            (true, true) => bidi_len.unwrap_or(0),
            (true, false) => c.edtl,
            _ => 0,
        };
        let dlen = data.len() as u32;
        if dlen > 0
            && (!c.write || !immediate_data || dlen > edtl_write || dlen > first_burst_length)
        {
            reject_consume(self, RejectReason::ProtocolError);
            return;
        }
        let unsol_limit = if initial_r2t || c.final_ {
            dlen
        } else {
            edtl_write.min(first_burst_length).max(dlen)
        };
        let bufs = self.rx_bufs();
        if rdma
            && ((expected_read_len > 0 && bufs.read.is_none())
                || (edtl_write > unsol_limit && bufs.write.is_none()))
        {
            // RDMA datamover: no buffer announced to move the command's data with
            reject_consume(self, RejectReason::ProtocolError);
            return;
        }
        let lun = lun_decode(c.lun);
        let mut data_out = self.take_buffer(edtl_write as usize);
        data_out.extend_from_slice(data);
        let task = Task {
            lun_raw: c.lun,
            lun,
            ordered: c.immediate,
            delivered: false,
            aborted_by: None,
            read: c.read,
            write: c.write,
            expected_read_len,
            edtl_write,
            cmd: Some(ScsiCommand {
                itt: c.itt,
                lun,
                cdb,
                attr: c.attr,
                read: c.read,
                write: c.write,
                expected_read_len,
                expected_write_len: edtl_write,
                data_out,
                landed: 0,
                immediate: c.immediate,
            }),
            received: dlen,
            unsol_limit,
            unsol_done: dlen >= unsol_limit,
            unsol_data_sn: 0,
            next_r2t_offset: dlen,
            r2ts: self.spare_r2ts.pop().unwrap_or_default(),
            r2t_sn: 0,
            data_failed: false,
            rdma: super::rdma::TaskBufs {
                bufs,
                get: None,
                get_from: 0,
            },
        };
        self.tasks.insert(c.itt, task);
        if c.immediate {
            self.active += 1;
        } else if self.window.arrive(c.cmd_sn, Some(c.itt)).is_err() {
            self.tasks.remove(&c.itt);
            return;
        }
        self.issue_r2ts(c.itt);
        if c.immediate {
            self.try_deliver(c.itt);
        }
        self.pump_window();
    }

    /// Sends R2Ts for a task whose unsolicited phase is over, within MaxOutstandingR2T
    /// and MaxBurstLength.
    pub(crate) fn issue_r2ts(&mut self, itt: u32) {
        let State::FullFeature(ff) = &self.state else {
            return;
        };
        if ff.session.rdma.is_some() {
            return self.issue_get(itt);
        }
        let mbl = ff.params.max_burst_length.max(512);
        let max_out = ff.params.max_outstanding_r2t.max(1) as usize;
        loop {
            let ttt = self.next_ttt;
            let Some(t) = self.tasks.get_mut(&itt) else {
                return;
            };
            if !t.write
                || t.data_failed
                || !t.unsol_done
                || t.r2ts.len() >= max_out
                || t.next_r2t_offset >= t.edtl_write
            {
                return;
            }
            self.next_ttt = next_tag(ttt);
            let offset = t.next_r2t_offset;
            let len = (t.edtl_write - offset).min(mbl);
            t.next_r2t_offset += len;
            let r2t_sn = t.r2t_sn;
            t.r2t_sn += 1;
            t.r2ts.push_back(R2tState {
                ttt,
                offset,
                len,
                received: 0,
                next_data_sn: 0,
            });
            let r = R2t {
                lun: t.lun_raw,
                itt,
                ttt,
                stat_sn: self.stat_sn.current(),
                exp_cmd_sn: self.window.exp_cmd_sn(),
                max_cmd_sn: self.window.max_cmd_sn(),
                r2t_sn,
                buffer_offset: offset,
                desired_len: len,
            };
            self.push(&Bhs::R2t(r), TxData::None);
        }
    }

    fn data_out_error(&mut self, hdr: &[u8; 48], why: ProtocolError) {
        self.reject(RejectReason::InvalidPduField, hdr);
        self.close(why.into());
    }

    pub(crate) fn handle_data_out(&mut self, d: &DataOut, hdr: &[u8; 48], data: &[u8]) {
        let Some(t) = self.tasks.get_mut(&d.itt) else {
            // Task unknown (e.g. aborted while data was in flight): ignore.
            self.stats.dropped_unknown_data_out += 1;
            self.last_drop = Some(format!("Data-Out for unknown ITT {:#x}", d.itt));
            return;
        };
        let len = data.len() as u32;
        if t.data_failed && !t.delivered {
            return self.discard_failed_data_out(d);
        }
        let sequence_error = if d.ttt == RESERVED_TAG {
            !t.unsol_done && d.data_sn != t.unsol_data_sn
        } else {
            t.r2ts
                .iter()
                .find(|r| r.ttt == d.ttt)
                .is_some_and(|r| d.data_sn != r.next_data_sn)
        };
        if sequence_error && t.write && !t.delivered {
            // RFC 7143 7.9: an out-of-order DataSN means earlier data was lost; at ERL 0 the
            // task fails (no recovery R2T) and the connection carries on
            t.data_failed = true;
            self.stats.data_sequence_errors += 1;
            self.last_drop = Some(format!(
                "Data-Out DataSN {} out of order for ITT {:#x}: task ends with CHECK CONDITION",
                d.data_sn, d.itt
            ));
            return self.discard_failed_data_out(d);
        }
        if !t.write || t.delivered || d.buffer_offset != t.received {
            return self.data_out_error(hdr, ProtocolError::DataOutUnexpected);
        }
        if u64::from(t.received) + u64::from(len) > u64::from(t.edtl_write) {
            return self.data_out_error(hdr, ProtocolError::DataOutBeyondLength);
        }
        if d.ttt == RESERVED_TAG {
            if t.unsol_done || d.data_sn != t.unsol_data_sn || t.received + len > t.unsol_limit {
                return self.data_out_error(hdr, ProtocolError::BadUnsolicitedDataOut);
            }
            t.unsol_data_sn += 1;
            t.received += len;
            if let Some(c) = t.cmd.as_mut() {
                c.data_out.extend_from_slice(data);
            }
            if d.final_ || t.received >= t.unsol_limit {
                t.unsol_done = true;
                t.next_r2t_offset = t.received;
            }
        } else {
            let Some(r) = t.r2ts.iter_mut().find(|r| r.ttt == d.ttt) else {
                return self.data_out_error(hdr, ProtocolError::DataOutUnknownTtt);
            };
            if d.data_sn != r.next_data_sn
                || d.buffer_offset != r.offset + r.received
                || r.received + len > r.len
                || (d.final_ && r.received + len != r.len)
            {
                return self.data_out_error(hdr, ProtocolError::BadSolicitedDataOut);
            }
            r.received += len;
            r.next_data_sn += 1;
            let done = r.received == r.len;
            let ttt = r.ttt;
            t.received += len;
            if let Some(c) = t.cmd.as_mut() {
                c.data_out.extend_from_slice(data);
            }
            if done {
                t.r2ts.retain(|r| r.ttt != ttt);
            }
        }
        self.issue_r2ts(d.itt);
        self.try_deliver(d.itt);
    }

    /// A Data-Out of a task whose data phase failed: its bytes are dropped; the final PDU
    /// of a sequence ends that sequence; when none is left the task is answered (in CmdSN
    /// order, see [`Self::try_deliver`]).
    fn discard_failed_data_out(&mut self, d: &DataOut) {
        let Some(t) = self.tasks.get_mut(&d.itt) else {
            return;
        };
        if d.final_ {
            if d.ttt == RESERVED_TAG {
                t.unsol_done = true;
            } else {
                t.r2ts.retain(|r| r.ttt != d.ttt);
            }
        }
        self.try_deliver(d.itt);
    }

    /// Delivers a task's command if its turn came and its data is complete; answers a task
    /// whose data phase failed once its turn came and the initiator stopped sending.
    pub(crate) fn try_deliver(&mut self, itt: u32) {
        let Some(t) = self.tasks.get_mut(&itt) else {
            return;
        };
        if t.ordered && !t.delivered && t.data_failed {
            if t.failed_phase_over() {
                t.delivered = true;
                self.complete_command(
                    itt,
                    CommandResult {
                        status: 0x02, // CHECK CONDITION
                        sense: SENSE_PROTOCOL_CRC_ERROR.to_vec(),
                        data: None,
                        write_transfer_len: None,
                    },
                );
            }
            return;
        }
        if t.ordered && !t.delivered && t.write_complete() {
            t.delivered = true;
            if let Some(cmd) = t.cmd.take() {
                self.events.push_back(Event::Command(cmd));
            }
        }
    }

    /// Removes a task (abort / completion), keeping the window accounting right. Its
    /// buffers go back to the connection's pools.
    pub(crate) fn drop_task(&mut self, itt: u32) -> Option<Task> {
        let mut t = self.tasks.remove(&itt)?;
        if t.ordered {
            self.active = self.active.saturating_sub(1);
        }
        let mut r2ts = std::mem::take(&mut t.r2ts);
        if r2ts.capacity() > 0 && self.spare_r2ts.len() < SPARE_R2T_QUEUES {
            r2ts.clear();
            self.spare_r2ts.push(r2ts);
        }
        if let Some(cmd) = t.cmd.take() {
            self.recycle_buffer(cmd.data_out);
        }
        Some(t)
    }

    /// A write buffer for `expected` bytes: a recycled one when there is one (its capacity
    /// grows to the sizes in use, after which writes stop allocating).
    fn take_buffer(&mut self, expected: usize) -> Vec<u8> {
        let want = expected.min(1 << 20);
        if want == 0 {
            return Vec::new();
        }
        let mut v = match self.spare_bufs.iter().rposition(|b| b.capacity() >= want) {
            Some(i) => self.spare_bufs.swap_remove(i),
            None => self.spare_bufs.pop().unwrap_or_default(),
        };
        self.spare_bytes -= v.capacity().min(self.spare_bytes);
        v.clear();
        v.reserve(want);
        v
    }

    /// Gives a command's write buffer (`ScsiCommand::data_out`) back for reuse by later
    /// commands of this connection. Buffers beyond the pool's bound are freed.
    pub fn recycle_buffer(&mut self, v: Vec<u8>) {
        let cap = v.capacity();
        if cap == 0 || cap > SPARE_BUF_MAX || self.spare_bytes + cap > SPARE_BYTES_MAX {
            return;
        }
        self.spare_bytes += cap;
        self.spare_bufs.push(v);
    }

    /// The server's answer to a command: Data-In PDUs (split per the initiator's
    /// MaxRecvDataSegmentLength and MaxBurstLength), then status (phase-collapsed into
    /// the last Data-In when there is no sense) with residuals.
    pub fn complete_command(&mut self, itt: u32, result: CommandResult<B>) {
        let State::FullFeature(ff) = &self.state else {
            return;
        };
        let rdma = ff.session.rdma.is_some();
        let max_send_data = ff.max_send_data();
        let mrdsl = ff.params.initiator_max_recv_data_segment_length.max(512) as usize;
        let mbl = ff.params.max_burst_length.max(512) as usize;
        match self.tasks.get(&itt) {
            Some(t) if t.delivered => {}
            _ => return,
        }
        let Some(t) = self.drop_task(itt) else {
            return;
        };
        self.window.update_max(self.active);
        if let Some(tmf) = t.aborted_by {
            // aborted: no Data-In, no status; the payload is dropped (unpinning its blocks)
            drop(result);
            self.aborted_task_done(tmf);
            self.maybe_finish_logout();
            return;
        }
        // Data-In only exists for commands with a read part.
        let data_len = if t.read {
            result.data.as_ref().map_or(0, |d| d.len()) as u64
        } else {
            0
        };
        let exp = u64::from(t.expected_read_len);
        let send = data_len.min(exp) as usize;
        let (over, under, residual) = if data_len > exp {
            (
                true,
                false,
                (data_len - exp).min(u64::from(u32::MAX)) as u32,
            )
        } else if data_len < exp && t.read {
            (false, true, (exp - data_len) as u32)
        } else {
            (false, false, 0)
        };
        // write direction: SPDTL from the SCSI layer against the write EDTL
        let (w_over, w_under, w_residual) = match result.write_transfer_len {
            Some(spdtl) if t.write && spdtl > t.edtl_write => (true, false, spdtl - t.edtl_write),
            Some(spdtl) if t.write && spdtl < t.edtl_write => (false, true, t.edtl_write - spdtl),
            _ => (false, false, 0),
        };
        let collapse = result.sense.is_empty() && send > 0 && !t.write && !rdma;
        let mut data_sn = 0u32;
        let status = result.status;
        let data = result.data.filter(|_| send > 0);
        if rdma {
            // RDMA datamover: the data goes by RDMA WRITE before the response
            if let (Some(buf), Some(remote)) = (data, t.rdma.bufs.read)
                && let Framing::Rdma(r) = &mut self.framing
            {
                r.tx.push_back(super::rdma::RdmaTx::Put {
                    itt,
                    remote,
                    data: buf,
                    len: send,
                });
            }
        } else if let Some(buf) = data
            && let Framing::Stream(s) = &mut self.framing
        {
            // held once for all of its Data-In PDUs, dropped when the last is written
            let id = s.tx.add_buf(buf);
            let mut off = 0usize;
            let mut burst = 0usize;
            while off < send {
                let len = mrdsl.min(send - off).min(mbl - burst);
                burst += len;
                let last = off + len == send;
                let final_ = last || burst == mbl;
                if burst == mbl {
                    burst = 0;
                }
                let with_status = last && collapse;
                let di = DataIn {
                    final_,
                    ack: false,
                    overflow: with_status && over,
                    underflow: with_status && under,
                    status: with_status.then_some(status),
                    lun: 0,
                    itt,
                    ttt: RESERVED_TAG,
                    stat_sn: if with_status {
                        self.stat_sn.advance()
                    } else {
                        0
                    },
                    exp_cmd_sn: self.window.exp_cmd_sn(),
                    max_cmd_sn: self.window.max_cmd_sn(),
                    data_sn,
                    buffer_offset: off as u32,
                    residual: if with_status { residual } else { 0 },
                };
                self.push(&Bhs::DataIn(di), TxData::Shared { id, off, len });
                data_sn = data_sn.wrapping_add(1);
                off += len;
            }
        }
        if !collapse {
            let bidi = t.read && t.write;
            let sense_data = if result.sense.is_empty() {
                Vec::new()
            } else {
                // within what the initiator can receive in one PDU (iSER: 128 bytes)
                let room = if rdma {
                    max_send_data.saturating_sub(2)
                } else {
                    0xffff
                };
                let n = result.sense.len().min(0xffff).min(room);
                let mut v = Vec::with_capacity(n + 2);
                v.extend_from_slice(&(n as u16).to_be_bytes());
                v.extend_from_slice(&result.sense[..n]);
                v
            };
            // bidirectional: the read part's residual goes in the Bidirectional Read Residual
            // Count, the write part's in the Residual Count (RFC 7143 11.4.5.2)
            let (overflow, underflow, residual_count) = if t.write {
                (w_over, w_under, w_residual)
            } else {
                (over, under, residual)
            };
            let r = ScsiResponse {
                bidi_overflow: bidi && over,
                bidi_underflow: bidi && under,
                overflow,
                underflow,
                response: 0,
                status,
                itt,
                snack_tag: 0,
                stat_sn: self.stat_sn.advance(),
                exp_cmd_sn: self.window.exp_cmd_sn(),
                max_cmd_sn: self.window.max_cmd_sn(),
                exp_data_sn: if t.write {
                    t.r2t_sn.wrapping_add(data_sn)
                } else {
                    data_sn
                },
                bidi_residual: if bidi { residual } else { 0 },
                residual: residual_count,
            };
            let data = if sense_data.is_empty() {
                TxData::None
            } else {
                TxData::Owned(sense_data)
            };
            self.push(&Bhs::ScsiResponse(r), data);
        }
        self.maybe_finish_logout();
    }
}
