//! Bad bytes from the network never crash a shard: valid requests are
//! mutated (bit flips, truncation, splices, random bytes), and whatever still
//! decodes is executed by a real shard. Any panic fails the test. Seeded, so
//! a failure replays.

mod input_seeds;

use input_seeds::{seeds, shard_and_meta};
use latsdb_cluster::Outbox;
use latsdb_types::proto::{self, *};
use latsdb_types::rng::Rng;

fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    match rng.index(5) {
        0 => {
            for _ in 0..1 + rng.index(4) {
                let i = rng.index(bytes.len());
                bytes[i] ^= 1 << rng.index(8);
            }
        }
        1 => {
            let i = rng.index(bytes.len());
            bytes[i] = [0, 1, 0x7F, 0x80, 0xFF][rng.index(5)];
        }
        2 => bytes.truncate(rng.index(bytes.len())),
        3 => {
            // Overwrite a length-like field with a large value.
            let i = rng.index(bytes.len().saturating_sub(8).max(1));
            let v = [u64::MAX, 1 << 40, 65_536, 0][rng.index(4)].to_le_bytes();
            let end = (i + 8).min(bytes.len());
            bytes[i..end].copy_from_slice(&v[..end - i]);
        }
        _ => {
            let n = rng.index(64);
            *bytes = (0..n).map(|_| rng.next_u64() as u8).collect();
        }
    }
}

#[test]
fn mutated_requests_never_panic_a_shard() {
    let (mut shard, meta) = shard_and_meta();
    let originals: Vec<Vec<u8>> = seeds(&meta).iter().map(|r| proto::frame(0, r)[12..].to_vec()).collect();
    // MUTATION_SEED and MUTATION_ITERATIONS run longer explorations locally.
    let seed = std::env::var("MUTATION_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5EED_1234_ABCD_0001u64);
    let mut rng = Rng::new(seed);
    let (mut decoded, mut from_frame) = (0, 0);
    let mut now = 0;
    let iterations: u64 = std::env::var("MUTATION_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    for i in 0..iterations {
        let mut bytes = originals[rng.index(originals.len())].clone();
        if i % 8 != 0 {
            mutate(&mut rng, &mut bytes);
        }
        // As a data node's host does: a batch of committed reads first.
        let mut out = Outbox::default();
        if shard.on_lookups(i % 7, i, &bytes, now, &mut out) {
            from_frame += 1;
            assert!(matches!(&out.frames[..], [(_, frame)] if frame.len() >= 12), "one answer frame");
        } else if let Ok(request) = proto::decode_body::<ClientRequest>(&bytes) {
            decoded += 1;
            now += 1_000;
            shard.on_client(i % 7, i, request, now, &mut out);
            shard.on_tick(now, &mut out);
            if i % 1000 == 0 {
                shard.on_disconnect(i % 7, now, &mut out);
            }
        }
        // Peer messages with garbage must not panic either.
        if let Ok(msg) = proto::decode_body::<PeerMsg>(&bytes) {
            let mut out = Outbox::default();
            shard.on_peer(ShardAddr { node: 2, shard: 0 }, 0, msg, now, &mut out);
        }
    }
    assert!(decoded > 20_000, "too few mutated requests decoded ({decoded}) to exercise the shard");
    assert!(from_frame > 2_000, "too few mutated batches of committed reads ({from_frame}) answered from the frame");
}

/// Writes the seed requests as frame bodies into the fuzz corpus of the
/// `native_frames` target: `cargo test -p latsdb-cluster --test
/// mutated_input -- --ignored` after the requests change.
#[test]
#[ignore]
fn write_native_frames_corpus() {
    let (_, meta) = shard_and_meta();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/native_frames");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, request) in seeds(&meta).iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), &proto::frame(0, request)[12..]).unwrap();
    }
}

/// Every input the `native_frames` fuzz target found a panic with (kept in
/// fuzz/regressions/native_frames once fixed) runs through a shard again,
/// as the target runs it.
#[test]
fn fuzz_findings_never_panic_a_shard() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/native_frames");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        input_seeds::run_frames(&data);
        replayed += 1;
    }
    assert!(replayed >= 2, "the findings are kept in {}", dir.display());
}
