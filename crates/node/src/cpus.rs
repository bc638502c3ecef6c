//! Which CPU each shard thread runs on.
//!
//! A replicated write goes back and forth between shards of different data
//! nodes over loopback TCP. Linux treats a wake-up by a socket write as a
//! hand-over (the waker is expected to sleep next) and queues the woken
//! thread on the waker's CPU; with threads that run in short bursts, the
//! load balancer then rarely moves either. Measured on two CPUs: the two
//! data nodes' shards took turns on one CPU while the other stayed 25-45%
//! idle, and binding each to a CPU of its own raised replicated updates
//! from about 290k to 350k per second (docs/benchmarks.md).

use latsdb_types::config::CpuBind;
use latsdb_types::error::{DbError, Result};
use std::fs::File;
use std::io::Write;
use std::sync::OnceLock;

/// The kernel's CPU wake-up latency request (PM QoS).
const CPU_DMA_LATENCY: &str = "/dev/cpu_dma_latency";

/// Asks the kernel to keep idle CPUs polling instead of halting while this
/// process runs: a request for 0 µs of wake-up latency, held as long as the
/// file stays open (so it ends with the process), as the `tuned`
/// latency-performance profile does for the whole machine.
///
/// Why: shards of a replicated write, and clients, hand each other
/// messages all the time, and a message to a thread whose CPU halted waits
/// for that CPU to wake, which in a virtual machine is an exit to the
/// hypervisor and back. Measured here on two CPUs (docs/benchmarks.md):
/// replicated updates 610,000-698,000/s with halting idle CPUs against
/// 739,000-776,000/s with polling ones, the same cluster in alternating
/// runs; Redis SET and GET moved by 1-3%. The cost is power (or, in a VM,
/// the host's CPU) while the machine idles.
pub fn request_idle_poll() -> std::result::Result<(), String> {
    static HELD: OnceLock<File> = OnceLock::new();
    if HELD.get().is_some() {
        return Ok(());
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(CPU_DMA_LATENCY)
        .map_err(|e| format!("cannot open {CPU_DMA_LATENCY}: {e}"))?;
    file.write_all(&0i32.to_ne_bytes()).map_err(|e| format!("cannot write {CPU_DMA_LATENCY}: {e}"))?;
    let _ = HELD.set(file);
    Ok(())
}

/// Where this node's shard threads run, and why, for the start-up log.
#[derive(Debug, PartialEq, Eq)]
pub struct Placement {
    /// One entry per shard thread; None leaves the thread to the OS.
    pub cpus: Vec<Option<usize>>,
    pub reason: String,
}

/// What the management server said about this node's host, and the CPUs
/// this process may use.
pub struct HostShare<'a> {
    pub bind: CpuBind,
    pub explicit: Option<&'a [u32]>,
    pub host_index: u16,
    pub nodes_on_host: u16,
    pub allowed: &'a [usize],
}

/// Chooses a CPU for each of `threads` shard threads.
///
/// Explicit CPUs must be ones the process may use. With `auto`, the shard
/// threads of all data nodes configured on the host are dealt distinct CPUs
/// in node order, if there are enough CPUs for all of them (which assumes
/// the nodes run as many shards as this one); otherwise nothing is bound,
/// since two bound threads sharing a CPU could not move away from each other.
pub fn plan(threads: u16, share: &HostShare) -> Result<Placement> {
    let threads = threads as usize;
    if let Some(explicit) = share.explicit {
        if explicit.len() < threads {
            return Err(DbError::bad_request(format!(
                "cpus lists {} CPU(s) for {threads} shard threads; list one CPU per thread in the configuration",
                explicit.len()
            )));
        }
        let cpus: Vec<usize> = explicit.iter().take(threads).map(|&c| c as usize).collect();
        if let Some(c) = cpus.iter().find(|c| !share.allowed.contains(c)) {
            return Err(DbError::bad_request(format!(
                "cpus names CPU {c}, which this process may not use (it may use {:?}); fix cpus in the configuration",
                share.allowed
            )));
        }
        return Ok(Placement {
            reason: format!("bound as configured to CPUs {cpus:?}"),
            cpus: cpus.into_iter().map(Some).collect(),
        });
    }
    let unbound = |reason: String| Placement { cpus: vec![None; threads], reason };
    if share.bind == CpuBind::Off {
        return Ok(unbound("not bound to CPUs (cpu_bind = \"off\")".into()));
    }
    let on_host = threads * share.nodes_on_host.max(1) as usize;
    if on_host < 2 {
        return Ok(unbound("not bound to CPUs (the only shard thread on its host)".into()));
    }
    if on_host > share.allowed.len() {
        return Ok(unbound(format!(
            "not bound to CPUs ({on_host} shard threads on this host, {} CPUs)",
            share.allowed.len()
        )));
    }
    let first = share.host_index as usize * threads;
    let Some(cpus) = share.allowed.get(first..first + threads) else {
        return Ok(unbound(format!(
            "not bound to CPUs (node {} of {} on this host)",
            share.host_index, share.nodes_on_host
        )));
    };
    Ok(Placement { reason: format!("bound to CPUs {cpus:?}"), cpus: cpus.iter().copied().map(Some).collect() })
}

/// The CPUs this process may run on, in increasing order.
pub fn allowed() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Binds the calling thread to one CPU.
pub fn bind_current_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(bind: CpuBind, host_index: u16, nodes_on_host: u16, allowed: &[usize]) -> HostShare<'_> {
        HostShare { bind, explicit: None, host_index, nodes_on_host, allowed }
    }

    #[test]
    fn an_idle_poll_request_holds_zero_wake_up_latency_or_says_why_not() {
        use std::io::Read;
        match request_idle_poll() {
            Ok(()) => {
                // Reading the device gives the machine's current target.
                let mut target = [0u8; 4];
                File::open(CPU_DMA_LATENCY).and_then(|mut f| f.read_exact(&mut target)).unwrap();
                assert_eq!(i32::from_ne_bytes(target), 0);
                // A second request is the same held one.
                assert_eq!(request_idle_poll(), Ok(()));
            }
            Err(e) => assert!(e.contains(CPU_DMA_LATENCY), "{e}"),
        }
    }

    #[test]
    fn auto_deals_distinct_cpus_to_the_nodes_of_a_host() {
        let allowed = [0, 1, 2, 3];
        let a = plan(2, &share(CpuBind::Auto, 0, 2, &allowed)).unwrap();
        let b = plan(2, &share(CpuBind::Auto, 1, 2, &allowed)).unwrap();
        assert_eq!(a.cpus, vec![Some(0), Some(1)]);
        assert_eq!(b.cpus, vec![Some(2), Some(3)]);
        // Only the CPUs the process may use are dealt.
        let c = plan(1, &share(CpuBind::Auto, 1, 2, &[4, 6])).unwrap();
        assert_eq!(c.cpus, vec![Some(6)]);
    }

    #[test]
    fn auto_binds_nothing_without_a_cpu_per_thread_or_company() {
        let too_many = plan(2, &share(CpuBind::Auto, 0, 2, &[0, 1])).unwrap();
        assert_eq!(too_many.cpus, vec![None, None]);
        assert!(too_many.reason.contains("4 shard threads"), "{}", too_many.reason);
        let alone = plan(1, &share(CpuBind::Auto, 0, 1, &[0, 1])).unwrap();
        assert_eq!(alone.cpus, vec![None]);
        let off = plan(1, &share(CpuBind::Off, 0, 2, &[0, 1])).unwrap();
        assert_eq!(off.cpus, vec![None]);
    }

    #[test]
    fn explicit_cpus_must_be_usable_and_enough() {
        let explicit = [3, 1];
        let s = HostShare { explicit: Some(&explicit), ..share(CpuBind::Off, 0, 1, &[0, 1, 2, 3]) };
        assert_eq!(plan(2, &s).unwrap().cpus, vec![Some(3), Some(1)]);
        assert!(plan(3, &s).unwrap_err().message.contains("one CPU per thread"));
        let s = HostShare { explicit: Some(&explicit), ..share(CpuBind::Auto, 0, 1, &[0, 1]) };
        assert!(plan(2, &s).unwrap_err().message.contains("CPU 3"));
    }

    #[test]
    fn the_calling_thread_can_be_bound_to_a_cpu_it_may_use() {
        let allowed = allowed();
        assert!(!allowed.is_empty());
        let cpu = *allowed.last().unwrap();
        std::thread::spawn(move || {
            bind_current_thread(cpu).unwrap();
            // SAFETY: as in `allowed`.
            assert_eq!(unsafe { libc::sched_getcpu() }, cpu as i32);
        })
        .join()
        .unwrap();
    }
}
