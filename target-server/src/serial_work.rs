//! One thread per device that must see its commands one at a time, in the order they
//! arrived: a tape drive (its position moves with every command). The device's LUN holds
//! the queue; the thread ends when the LUN is gone and the queue is empty. Jobs never hold
//! the queue itself, so a LUN dropped with jobs queued still ends its thread after them.

use std::sync::Mutex;
use std::sync::mpsc::{self, Sender};

/// A job for a device's thread.
pub type Job = Box<dyn FnOnce() + Send>;

/// The queue of one device's thread.
pub struct SerialWork {
    tx: Mutex<Sender<Job>>,
}

impl std::fmt::Debug for SerialWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SerialWork")
    }
}

impl SerialWork {
    /// Starts the thread `name`.
    pub fn start(name: String) -> std::io::Result<SerialWork> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new().name(name).spawn(move || {
            while let Ok(job) = rx.recv() {
                job();
            }
        })?;
        Ok(SerialWork { tx: Mutex::new(tx) })
    }

    /// Queues `job` after the others; gives it back when the thread is gone (it panicked).
    pub fn push(&self, job: Job) -> Result<(), Job> {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        tx.send(job).map_err(|e| e.0)
    }
}
