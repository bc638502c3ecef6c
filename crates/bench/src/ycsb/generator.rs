//! YCSB's core workload as data: the properties of workloads a-f and of a
//! properties file, the key names, and the request distributions (uniform,
//! zipfian, latest, hotspot), following the semantics of YCSB's
//! `CoreWorkload` and its generators so that results compare with YCSB's
//! own client.

use crate::Rng;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// How keys are chosen for operations on existing records.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    Uniform,
    /// Scrambled zipfian (YCSB's `zipfian`): popular keys spread over the
    /// key space rather than clustered at its start.
    Zipfian,
    /// Skewed towards the most recently inserted records.
    Latest,
    /// A fraction of the records gets a fraction of the operations.
    Hotspot {
        set_fraction: f64,
        op_fraction: f64,
    },
}

/// The parameters of a run, with YCSB's names and defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub recordcount: u64,
    /// 0: no operation count (the run lasts `--duration`).
    pub operationcount: u64,
    pub fieldcount: usize,
    pub fieldlength: usize,
    pub readallfields: bool,
    pub writeallfields: bool,
    pub readproportion: f64,
    pub updateproportion: f64,
    pub insertproportion: f64,
    pub scanproportion: f64,
    pub readmodifywriteproportion: f64,
    pub requestdistribution: Distribution,
    pub maxscanlength: u64,
    /// Zipfian scan lengths rather than uniform.
    pub scanlength_zipfian: bool,
    /// Keys in insertion order (`ordered`) rather than hashed.
    pub ordered_inserts: bool,
    pub insertstart: u64,
    pub zeropadding: usize,
}

impl Default for Workload {
    /// `CoreWorkload`'s defaults.
    fn default() -> Self {
        Workload {
            recordcount: 1000,
            operationcount: 1000,
            fieldcount: 10,
            fieldlength: 100,
            readallfields: true,
            writeallfields: false,
            readproportion: 0.95,
            updateproportion: 0.05,
            insertproportion: 0.0,
            scanproportion: 0.0,
            readmodifywriteproportion: 0.0,
            requestdistribution: Distribution::Uniform,
            maxscanlength: 1000,
            scanlength_zipfian: false,
            ordered_inserts: false,
            insertstart: 0,
            zeropadding: 1,
        }
    }
}

/// The properties files YCSB ships as `workloads/workloada` .. `workloadf`.
const NAMED: [(&str, &str); 6] = [
    ("a", "readproportion=0.5\nupdateproportion=0.5\nrequestdistribution=zipfian"),
    ("b", "readproportion=0.95\nupdateproportion=0.05\nrequestdistribution=zipfian"),
    ("c", "readproportion=1\nupdateproportion=0\nrequestdistribution=zipfian"),
    ("d", "readproportion=0.95\nupdateproportion=0\ninsertproportion=0.05\nrequestdistribution=latest"),
    (
        "e",
        "readproportion=0\nupdateproportion=0\nscanproportion=0.95\ninsertproportion=0.05\nrequestdistribution=zipfian\nmaxscanlength=100\nscanlengthdistribution=uniform",
    ),
    ("f", "readproportion=0.5\nupdateproportion=0\nreadmodifywriteproportion=0.5\nrequestdistribution=zipfian"),
];

impl Workload {
    /// One of YCSB's workloads a-f.
    pub fn named(name: &str) -> Result<Workload, String> {
        let lower = name.trim().to_ascii_lowercase();
        let short = lower.strip_prefix("workload").unwrap_or(&lower);
        let (_, text) = NAMED.iter().find(|(n, _)| *n == short).ok_or_else(|| {
            format!("unknown workload '{name}': use a, b, c, d, e or f (or a properties file with -P)")
        })?;
        let mut w = Workload::default();
        w.apply_properties(text)?;
        Ok(w)
    }

    /// Applies the lines of a YCSB properties file (`key=value`, `#`
    /// comments); keys that are not the core workload's (such as `db` or
    /// `workload`) are ignored, as YCSB passes them to other parts.
    pub fn apply_properties(&mut self, text: &str) -> Result<(), String> {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .or_else(|| line.split_once(':'))
                .ok_or_else(|| format!("line {}: '{line}' is not key=value", n + 1))?;
            self.set(key.trim(), value.trim()).map_err(|e| format!("line {}: {e}", n + 1))?;
        }
        Ok(())
    }

    /// Sets one property (`-p key=value`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let number = || value.parse::<u64>().map_err(|_| format!("{key}={value}: not a whole number"));
        let fraction = || match value.parse::<f64>() {
            Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
            _ => Err(format!("{key}={value}: not a number from 0 to 1")),
        };
        let flag = || value.parse::<bool>().map_err(|_| format!("{key}={value}: not true or false"));
        match key {
            "recordcount" => self.recordcount = number()?,
            "operationcount" => self.operationcount = number()?,
            "fieldcount" => self.fieldcount = number()? as usize,
            "fieldlength" => self.fieldlength = number()? as usize,
            "readallfields" => self.readallfields = flag()?,
            "writeallfields" => self.writeallfields = flag()?,
            "readproportion" => self.readproportion = fraction()?,
            "updateproportion" => self.updateproportion = fraction()?,
            "insertproportion" => self.insertproportion = fraction()?,
            "scanproportion" => self.scanproportion = fraction()?,
            "readmodifywriteproportion" => self.readmodifywriteproportion = fraction()?,
            "requestdistribution" => self.requestdistribution = distribution(value, self.requestdistribution)?,
            "hotspotdatafraction" => self.set_hotspot(Some(fraction()?), None),
            "hotspotopnfraction" => self.set_hotspot(None, Some(fraction()?)),
            "maxscanlength" => self.maxscanlength = number()?.max(1),
            "scanlengthdistribution" => {
                self.scanlength_zipfian = match value {
                    "uniform" => false,
                    "zipfian" => true,
                    _ => return Err(format!("{key}={value}: use uniform or zipfian")),
                }
            }
            "insertorder" => {
                self.ordered_inserts = match value {
                    "hashed" => false,
                    "ordered" => true,
                    _ => return Err(format!("{key}={value}: use hashed or ordered")),
                }
            }
            "insertstart" => self.insertstart = number()?,
            "zeropadding" => self.zeropadding = number()? as usize,
            _ => {}
        }
        Ok(())
    }

    fn set_hotspot(&mut self, set: Option<f64>, op: Option<f64>) {
        if let Distribution::Hotspot { set_fraction, op_fraction } = &mut self.requestdistribution {
            *set_fraction = set.unwrap_or(*set_fraction);
            *op_fraction = op.unwrap_or(*op_fraction);
        }
    }

    /// Checks what a run needs.
    pub fn validate(&self) -> Result<(), String> {
        if self.recordcount == 0 {
            return Err("recordcount must be at least 1".into());
        }
        if self.fieldcount == 0 || self.fieldcount > 100 || self.fieldlength == 0 || self.fieldlength > 16_000 {
            return Err("fieldcount must be 1..=100 and fieldlength 1..=16000".into());
        }
        let total = self.readproportion
            + self.updateproportion
            + self.insertproportion
            + self.scanproportion
            + self.readmodifywriteproportion;
        if total <= 0.0 {
            return Err("the operation proportions add up to 0: give readproportion, updateproportion, ...".into());
        }
        Ok(())
    }

    /// The key of record number `keynum`: "user" and the number, hashed
    /// unless inserts are ordered, zero-padded to `zeropadding` digits.
    pub fn key_name(&self, keynum: u64) -> String {
        let number = if self.ordered_inserts { keynum } else { fnv_hash64(keynum) };
        format!("user{number:0width$}", width = self.zeropadding)
    }

    /// Picks the next operation.
    pub(crate) fn choose(&self, rng: &mut Rng) -> Operation {
        let total = self.readproportion
            + self.updateproportion
            + self.insertproportion
            + self.scanproportion
            + self.readmodifywriteproportion;
        let mut x = unit(rng) * total;
        for (p, op) in [
            (self.readproportion, Operation::Read),
            (self.updateproportion, Operation::Update),
            (self.insertproportion, Operation::Insert),
            (self.scanproportion, Operation::Scan),
        ] {
            if x < p {
                return op;
            }
            x -= p;
        }
        Operation::ReadModifyWrite
    }
}

fn distribution(value: &str, current: Distribution) -> Result<Distribution, String> {
    Ok(match value {
        "uniform" => Distribution::Uniform,
        "zipfian" => Distribution::Zipfian,
        "latest" => Distribution::Latest,
        "hotspot" => match current {
            Distribution::Hotspot { .. } => current,
            _ => Distribution::Hotspot { set_fraction: 0.2, op_fraction: 0.8 },
        },
        _ => return Err(format!("requestdistribution={value}: use uniform, zipfian, latest or hotspot")),
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

impl Operation {
    pub const ALL: [Operation; 5] =
        [Operation::Read, Operation::Update, Operation::Insert, Operation::Scan, Operation::ReadModifyWrite];

    /// YCSB's name for it in its output.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Read => "READ",
            Operation::Update => "UPDATE",
            Operation::Insert => "INSERT",
            Operation::Scan => "SCAN",
            Operation::ReadModifyWrite => "READ-MODIFY-WRITE",
        }
    }
}

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 bytes, low byte first,
/// made non-negative as Java's `Math.abs` does.
pub fn fnv_hash64(value: u64) -> u64 {
    let mut hash: i64 = 0xCBF2_9CE4_8422_2325_u64 as i64;
    let mut v = value as i64;
    for _ in 0..8 {
        hash ^= v & 0xff;
        hash = hash.wrapping_mul(1_099_511_628_211);
        v >>= 8;
    }
    hash.wrapping_abs() as u64
}

/// A uniform number in [0, 1).
pub(crate) fn unit(rng: &mut Rng) -> f64 {
    (rng.next() >> 11) as f64 / (1u64 << 53) as f64
}

/// Record numbers handed out to inserts, and the highest below which
/// every insert was acknowledged (YCSB's `AcknowledgedCounterGenerator`):
/// operations on existing records choose among those.
pub struct InsertSequence {
    next: std::sync::atomic::AtomicU64,
    acked: Mutex<(u64, BTreeSet<u64>)>,
}

impl InsertSequence {
    /// Inserts continue from `first` (records `..first` exist).
    pub fn new(first: u64) -> InsertSequence {
        InsertSequence { next: first.into(), acked: Mutex::new((first, BTreeSet::new())) }
    }

    pub fn next(&self) -> u64 {
        self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Record `keynum` was inserted.
    pub fn acknowledge(&self, keynum: u64) {
        let mut guard = self.acked.lock().unwrap_or_else(|p| p.into_inner());
        let (limit, done) = &mut *guard;
        assert!(
            keynum >= *limit && keynum < self.next.load(std::sync::atomic::Ordering::Relaxed),
            "record {keynum} was acknowledged twice or never handed out"
        );
        let fresh = done.insert(keynum);
        debug_assert!(fresh, "record {keynum} was acknowledged twice");
        while done.remove(limit) {
            *limit += 1;
        }
    }

    /// Records below this number all exist.
    pub fn limit(&self) -> u64 {
        self.acked.lock().unwrap_or_else(|p| p.into_inner()).0
    }
}

/// YCSB's `ZipfianGenerator` over `[0, items)` (Gray et al., "Quickly
/// generating billion-record synthetic databases"), whose item count may
/// grow: zeta is extended, not recomputed.
pub struct Zipfian {
    theta: f64,
    alpha: f64,
    zeta2: f64,
    items: u64,
    zetan: f64,
    eta: f64,
}

/// YCSB's zipfian constant.
const THETA: f64 = 0.99;
/// Items of YCSB's scrambled zipfian, and their zeta for `THETA` (as YCSB
/// precomputes it).
const SCRAMBLED_ITEMS: u64 = 10_000_000_000;
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

impl Zipfian {
    pub fn new(items: u64) -> Zipfian {
        Self::with_zeta(items.max(1), zeta(0, items.max(1), THETA, 0.0))
    }

    fn with_zeta(items: u64, zetan: f64) -> Zipfian {
        let zeta2 = zeta(0, 2, THETA, 0.0);
        let mut z = Zipfian { theta: THETA, alpha: 1.0 / (1.0 - THETA), zeta2, items, zetan, eta: 0.0 };
        z.eta = z.eta_for(items);
        z
    }

    fn eta_for(&self, items: u64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }

    /// A number in `[0, items)`, small ones most often; `items` may have
    /// grown since the last call.
    pub(crate) fn next(&mut self, rng: &mut Rng, items: u64) -> u64 {
        if items > self.items {
            self.zetan = zeta(self.items, items, self.theta, self.zetan);
            self.items = items;
            self.eta = self.eta_for(items);
        }
        let u = unit(rng);
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let x = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        x.min(self.items - 1)
    }
}

/// Zeta from `from` items on, continuing `partial` (the sum up to `from`).
fn zeta(from: u64, to: u64, theta: f64, partial: f64) -> f64 {
    (from..to).fold(partial, |sum, i| sum + 1.0 / ((i + 1) as f64).powf(theta))
}

/// Chooses record numbers for operations on existing records, one per
/// client task.
pub struct KeyChooser {
    kind: Distribution,
    first: u64,
    /// Records at the start (uniform, hotspot) or the zipfian's key space.
    count: u64,
    zipfian: Zipfian,
}

impl KeyChooser {
    /// For `w`; `expected_inserts`: inserts the run will make (the
    /// scrambled zipfian spreads over them too, as YCSB's does).
    pub fn new(w: &Workload, expected_inserts: u64) -> KeyChooser {
        let (count, zipfian) = match w.requestdistribution {
            Distribution::Zipfian => {
                (w.recordcount + expected_inserts, Zipfian::with_zeta(SCRAMBLED_ITEMS, SCRAMBLED_ZETAN))
            }
            Distribution::Latest => (w.recordcount, Zipfian::new(w.recordcount)),
            _ => (w.recordcount, Zipfian::new(1)),
        };
        KeyChooser { kind: w.requestdistribution, first: w.insertstart, count, zipfian }
    }

    /// A record number below `limit` (every record below it exists).
    pub(crate) fn next(&mut self, rng: &mut Rng, limit: u64) -> u64 {
        loop {
            let keynum = self.candidate(rng, limit);
            if keynum < limit {
                return keynum;
            }
        }
    }

    fn candidate(&mut self, rng: &mut Rng, limit: u64) -> u64 {
        match self.kind {
            Distribution::Uniform => self.first + rng.next() % self.count,
            Distribution::Zipfian => {
                let z = self.zipfian.next(rng, SCRAMBLED_ITEMS);
                self.first + fnv_hash64(z) % self.count
            }
            Distribution::Latest => {
                let newest = limit.saturating_sub(1);
                newest - self.zipfian.next(rng, limit - self.first).min(newest - self.first)
            }
            Distribution::Hotspot { set_fraction, op_fraction } => {
                let hot = ((self.count as f64 * set_fraction) as u64).clamp(1, self.count);
                let cold = self.count - hot;
                if cold == 0 || unit(rng) < op_fraction {
                    self.first + rng.next() % hot
                } else {
                    self.first + hot + rng.next() % cold
                }
            }
        }
    }
}

/// Lengths of scans: uniform or zipfian in `1..=maxscanlength`.
pub struct ScanLength {
    max: u64,
    zipfian: Option<Zipfian>,
}

impl ScanLength {
    pub fn new(w: &Workload) -> ScanLength {
        ScanLength { max: w.maxscanlength, zipfian: w.scanlength_zipfian.then(|| Zipfian::new(w.maxscanlength)) }
    }

    pub(crate) fn next(&mut self, rng: &mut Rng) -> u64 {
        match &mut self.zipfian {
            Some(z) => 1 + z.next(rng, self.max),
            None => 1 + rng.next() % self.max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_workloads_have_ycsb_mixes() {
        let a = Workload::named("a").unwrap();
        assert_eq!((a.readproportion, a.updateproportion), (0.5, 0.5));
        assert_eq!(a.requestdistribution, Distribution::Zipfian);
        let e = Workload::named("workloade").unwrap();
        assert_eq!((e.scanproportion, e.insertproportion, e.maxscanlength), (0.95, 0.05, 100));
        assert_eq!(Workload::named("d").unwrap().requestdistribution, Distribution::Latest);
        assert!(Workload::named("g").unwrap_err().contains("use a, b, c"));
    }

    #[test]
    fn properties_files_parse_with_clear_errors() {
        let mut w = Workload::default();
        w.apply_properties(
            "# comment\nrecordcount=5000\nrequestdistribution=hotspot\nhotspotdatafraction=0.1\ndb=site.ycsb.X\n",
        )
        .unwrap();
        assert_eq!(w.recordcount, 5000);
        assert_eq!(w.requestdistribution, Distribution::Hotspot { set_fraction: 0.1, op_fraction: 0.8 });
        assert!(w.apply_properties("readproportion=2").unwrap_err().contains("line 1"));
        assert!(w.apply_properties("recordcount").unwrap_err().contains("not key=value"));
        assert!(w.set("insertorder", "sideways").unwrap_err().contains("hashed or ordered"));
    }

    #[test]
    fn keys_are_hashed_like_ycsb_unless_ordered() {
        // FNV-1a 64 over the eight bytes, made non-negative, as YCSB's
        // Utils.fnvhash64 computes it (values worked out by hand).
        assert_eq!(fnv_hash64(0), 6_284_781_860_667_377_211);
        assert_eq!(fnv_hash64(1), 8_517_097_267_634_966_620);
        let mut w = Workload::default();
        assert!(w.key_name(1).starts_with("user"));
        assert_ne!(w.key_name(1), "user1");
        w.ordered_inserts = true;
        w.zeropadding = 4;
        assert_eq!(w.key_name(7), "user0007");
    }

    #[test]
    fn zipfian_favours_small_numbers_and_stays_in_range() {
        let mut rng = Rng(7);
        let mut z = Zipfian::new(1000);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.next(&mut rng, 1000) as usize] += 1;
        }
        assert!(counts[0] > counts[10] && counts[10] > counts[500], "{:?}", &counts[..12]);
        // Growing the item count extends zeta to the same value.
        let mut grown = Zipfian::new(10);
        grown.next(&mut rng, 1000);
        assert!((grown.zetan - z.zetan).abs() < 1e-9);
    }

    #[test]
    fn every_distribution_chooses_existing_records() {
        for dist in ["uniform", "zipfian", "latest", "hotspot"] {
            let mut w = Workload::default();
            w.set("requestdistribution", dist).unwrap();
            w.recordcount = 500;
            let mut chooser = KeyChooser::new(&w, 100);
            let mut rng = Rng(3);
            for limit in [500, 550, 600] {
                for _ in 0..2_000 {
                    let k = chooser.next(&mut rng, limit);
                    assert!(k < limit, "{dist}: {k} >= {limit}");
                }
            }
        }
    }

    #[test]
    fn the_insert_sequence_acknowledges_in_order() {
        let s = InsertSequence::new(10);
        let (a, b) = (s.next(), s.next());
        s.acknowledge(b);
        assert_eq!(s.limit(), 10, "record 10 is not acknowledged yet");
        s.acknowledge(a);
        assert_eq!(s.limit(), 12);
    }
}
