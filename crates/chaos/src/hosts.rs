//! Hosts made of Linux network namespaces on one machine: each host is a
//! namespace with one veth link to a bridge in the campaign's own
//! namespace, where the clients run. The network faults the campaign
//! injects are changes to these links and routes:
//! - isolating a host takes its link down (no packet in or out);
//! - cutting two hosts apart adds blackhole routes on both sides (each
//!   drops what it sends to the other; everyone else still reaches both);
//! - slowing a host puts an HTB rate limit on both ends of its link, so
//!   its packets queue (delay) and overflow (loss);
//! - the kernel's netem qdisc (delay and loss by probability) is not used:
//!   kernels built without it are common in VMs (this project's CI host's
//!   is one), and the rate limit gives delay and loss on any kernel;
//!   `netem_available` reports whether it is there.
//!
//! Everything made here is removed on drop. Names carry the campaign's
//! process id, so a run never touches another run's namespaces, and
//! `remove_stale` removes what a killed campaign left behind.

use std::process::Command;

/// The prefix of every namespace a campaign creates.
const NAMESPACE_PREFIX: &str = "latsdb-chaos-";

pub struct Hosts {
    /// Tells this campaign's names apart from another's (its process id).
    tag: u32,
    /// The third byte of the campaign's 10.213.x.0/24 subnet.
    subnet: u8,
    names: Vec<String>,
    /// What was created so far, for `Drop`.
    bridge_up: bool,
    namespaces: Vec<String>,
}

impl Hosts {
    /// Creates one namespace per name, linked to a new bridge that holds
    /// the campaign's own address (`client_address`). Needs root.
    pub fn create(names: &[&str]) -> Result<Hosts, String> {
        let tag = std::process::id();
        let mut hosts = Hosts {
            tag,
            subnet: (tag % 250) as u8 + 1,
            names: names.iter().map(|n| n.to_string()).collect(),
            bridge_up: false,
            namespaces: Vec::new(),
        };
        let bridge = hosts.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        hosts.bridge_up = true;
        ip(&["addr", "add", &format!("{}/24", hosts.client_address()), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for i in 0..names.len() {
            hosts.add_host(i)?;
        }
        Ok(hosts)
    }

    fn add_host(&mut self, i: usize) -> Result<(), String> {
        let ns = self.namespace(i);
        ip(&["netns", "add", &ns])?;
        self.namespaces.push(ns.clone());
        let (outer, inner) = (self.outer_link(i), format!("lc{}n{}", self.tag, i));
        ip(&["link", "add", &outer, "type", "veth", "peer", "name", &inner])?;
        ip(&["link", "set", &inner, "netns", &ns])?;
        ip(&["link", "set", &outer, "master", &self.bridge()])?;
        ip(&["link", "set", &outer, "up"])?;
        ip(&["-n", &ns, "link", "set", &inner, "name", "eth0"])?;
        ip(&["-n", &ns, "addr", "add", &format!("{}/24", self.address(i)), "dev", "eth0"])?;
        ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])
    }

    fn bridge(&self) -> String {
        format!("lcb{}", self.tag)
    }

    fn outer_link(&self, i: usize) -> String {
        format!("lc{}h{}", self.tag, i)
    }

    pub fn namespace(&self, i: usize) -> String {
        format!("{NAMESPACE_PREFIX}{}-{}", self.tag, self.names[i])
    }

    /// The address of host `i`.
    pub fn address(&self, i: usize) -> String {
        format!("10.213.{}.{}", self.subnet, 10 + i)
    }

    /// The campaign's own address on the bridge, where its clients run.
    pub fn client_address(&self) -> String {
        format!("10.213.{}.1", self.subnet)
    }

    /// A command that runs `program` inside host `i`'s namespace.
    pub fn command(&self, i: usize, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.namespace(i)]).arg(program);
        cmd
    }

    /// Takes host `i`'s link down (`isolated`) or up again.
    pub fn isolate(&self, i: usize, isolated: bool) -> Result<(), String> {
        ip(&["link", "set", &self.outer_link(i), if isolated { "down" } else { "up" }])
    }

    /// Adds (`cut`) or removes blackhole routes between hosts `a` and `b`.
    pub fn cut(&self, a: usize, b: usize, cut: bool) -> Result<(), String> {
        let verb = if cut { "add" } else { "del" };
        for (from, to) in [(a, b), (b, a)] {
            let target = format!("{}/32", self.address(to));
            ip(&["-n", &self.namespace(from), "route", verb, "blackhole", &target])?;
        }
        Ok(())
    }

    /// Puts a rate limit of `kbit` on both ends of host `i`'s link, or
    /// removes it (`None`).
    pub fn slow(&self, i: usize, kbit: Option<u32>) -> Result<(), String> {
        let ns = self.namespace(i);
        let outer = self.outer_link(i);
        let ends: [(&[&str], &str); 2] = [(&[], &outer), (&["-n", &ns], "eth0")];
        let Some(kbit) = kbit else {
            // Both ends, whatever the first says: a limit left on one end
            // would slow the link for the rest of the run.
            let removed: Vec<Result<(), String>> =
                ends.iter().map(|(prefix, dev)| tc(prefix, &["qdisc", "del", "dev", dev, "root"])).collect();
            return removed.into_iter().collect();
        };
        for (prefix, dev) in ends {
            tc(prefix, &["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"])?;
            let rate = format!("{kbit}kbit");
            tc(prefix, &["class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", &rate])?;
        }
        Ok(())
    }

    /// Whether this kernel has the netem qdisc (delay and loss by
    /// probability); many small VM kernels are built without it.
    pub fn netem_available(&self) -> bool {
        let dev = self.outer_link(0);
        let added = tc(&[], &["qdisc", "add", "dev", &dev, "root", "netem", "delay", "1ms"]).is_ok();
        if added {
            let _ = tc(&[], &["qdisc", "del", "dev", &dev, "root"]);
        }
        added
    }

    /// Removes every network fault: links up, cuts and rate limits gone.
    pub fn heal(&self) {
        for i in 0..self.names.len() {
            let _ = self.isolate(i, false);
            let _ = self.slow(i, None);
            for j in 0..self.names.len() {
                let target = format!("{}/32", self.address(j));
                let _ = ip(&["-n", &self.namespace(i), "route", "del", "blackhole", &target]);
            }
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // A veth pair would go with its namespace, but only once the kernel
        // has cleaned the namespace up, which it does later: the next
        // schedule's pair of the same name must not find it there.
        for i in 0..self.namespaces.len() {
            let _ = ip(&["link", "del", &self.outer_link(i)]);
        }
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        if self.bridge_up {
            let _ = ip(&["link", "del", &self.bridge()]);
        }
    }
}

/// Whether this process may create network namespaces (root, and a kernel
/// and `ip` that allow it): Err says why not.
pub fn namespaces_available() -> Result<(), String> {
    let probe = format!("{NAMESPACE_PREFIX}{}-probe", std::process::id());
    ip(&["netns", "add", &probe])?;
    ip(&["netns", "del", &probe])
}

/// Removes the namespaces and bridges of campaigns whose process is gone
/// (killed before their drop ran). Returns how many namespaces went.
pub fn remove_stale() -> usize {
    let Ok(listing) = Command::new("ip").args(["netns", "list"]).output() else {
        return 0;
    };
    let mut removed = 0;
    for line in String::from_utf8_lossy(&listing.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else { continue };
        let Some(rest) = name.strip_prefix(NAMESPACE_PREFIX) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else { continue };
        // SAFETY: signal 0 only asks whether the process exists. (This
        // campaign has made none yet: ones named by its own pid are an
        // earlier campaign's that had the same pid.)
        if pid != std::process::id() as i32 && unsafe { libc::kill(pid, 0) } == 0 {
            continue;
        }
        if ip(&["netns", "del", name]).is_ok() {
            removed += 1;
        }
        let _ = ip(&["link", "del", &format!("lcb{pid}")]);
    }
    removed
}

fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn tc(prefix: &[&str], args: &[&str]) -> Result<(), String> {
    if prefix.is_empty() {
        return run("tc", args);
    }
    // `ip -n NS ...` has no tc; run tc inside the namespace.
    let ns = prefix[1];
    let mut all = vec!["netns", "exec", ns, "tc"];
    all.extend_from_slice(args);
    run("ip", &all)
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program} (it is in the iproute2 package): {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!("`{program} {}` failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim()))
}
