//! A bsg device's threads: [`BSG_POOL`] of them take the LUN's commands from one queue in
//! arrival order and run each with bsg's blocking `SG_IO` (sg v4 header), the only way
//! Linux runs bsg commands since 4.17. The pool bounds the commands the device has at once.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::abi::{self, SgIoV4};
use super::{BSG_POOL, Data, Finished, Outcome, Reply, Request, SENSE_MAX};

/// The submitting side of a bsg device's pool.
pub(super) struct Pool {
    tx: Mutex<Sender<Request>>,
}

impl Pool {
    /// Starts the threads `bsg-NAME` over the bsg file `fd`.
    pub(super) fn start(fd: OwnedFd, timeout_ms: u32, name: &str) -> io::Result<Pool> {
        let fd = Arc::new(fd);
        let (tx, rx) = mpsc::channel::<Request>();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..BSG_POOL {
            let (fd, rx) = (Arc::clone(&fd), Arc::clone(&rx));
            std::thread::Builder::new()
                .name(format!("bsg-{name}"))
                .spawn(move || serve(&fd, timeout_ms, &rx))?;
        }
        Ok(Pool { tx: Mutex::new(tx) })
    }

    /// Queues `req` for the pool (answered at once, refused, when the pool is gone).
    pub(super) fn push(&self, req: Request) {
        let sent = {
            let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
            tx.send(req)
        };
        if let Err(mpsc::SendError(req)) = sent {
            let data = match req.data {
                Data::Out(d) => d,
                _ => Vec::new(),
            };
            (req.done)(Reply {
                outcome: Outcome::Refused(io::ErrorKind::BrokenPipe.into()),
                data,
            });
        }
    }
}

/// One pool thread: runs commands until the queue's sender is gone.
fn serve(fd: &OwnedFd, timeout_ms: u32, rx: &Mutex<Receiver<Request>>) {
    loop {
        let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(req) = next else {
            return;
        };
        let reply = run(fd, timeout_ms, req.cdb, req.data);
        (req.done)(reply);
    }
}

/// Runs one command with SG_IO.
fn run(fd: &OwnedFd, timeout_ms: u32, cdb: Vec<u8>, data: Data) -> Reply {
    let mut sense = [0u8; SENSE_MAX];
    let (mut buf, read) = match data {
        Data::None => (Vec::new(), false),
        Data::Out(d) => (d, false),
        Data::In(n) => (vec![0u8; n], true),
    };
    let mut h = SgIoV4 {
        guard: i32::from(b'Q'),
        request_len: cdb.len() as u32,
        request: cdb.as_ptr() as u64,
        max_response_len: SENSE_MAX as u32,
        response: sense.as_mut_ptr() as u64,
        timeout: timeout_ms,
        ..Default::default()
    };
    if read {
        h.din_xfer_len = buf.len() as u32;
        h.din_xferp = buf.as_mut_ptr() as u64;
    } else if !buf.is_empty() {
        h.dout_xfer_len = buf.len() as u32;
        h.dout_xferp = buf.as_ptr() as u64;
    }
    if let Err(e) = abi::sg_io_v4(fd.as_fd(), &mut h) {
        if read {
            buf.clear();
        }
        return Reply {
            outcome: Outcome::Refused(e),
            data: buf,
        };
    }
    let fin = Finished {
        status: h.device_status as u8,
        host: h.transport_status as u16,
        driver: h.driver_status as u16,
        sense_len: h.response_len as usize,
    };
    let outcome = fin.outcome(&sense);
    if read {
        let got = buf.len().saturating_sub(h.din_resid.max(0) as usize);
        buf.truncate(got);
    }
    Reply { outcome, data: buf }
}
