//! Benchmarks shipped with latsdb: flex, sysbench, YCSB and REST lookups.

pub mod flex;
pub mod lookup;
mod report;
pub mod sysbench;
pub mod ycsb;

use clap::{Args, Subcommand};

/// xorshift64*: cheap per-worker random keys (the seed must not be 0).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The table a benchmark phase works on: the one a loading phase left
/// (`loading` names that phase, for the error), or with `spec`, a new one
/// (any table of that name is dropped first).
pub(crate) async fn bench_table(
    client: &latsdb_client::Client,
    database: &str,
    name: &str,
    spec: Option<latsdb_types::schema::TableSpec>,
    loading: &str,
) -> Result<std::sync::Arc<latsdb_client::Table>, String> {
    let Some(spec) = spec else {
        return client
            .table(database, name)
            .await
            .map_err(|e| format!("{e}; run the {loading} phase first (the table {database}.{name} must exist)"));
    };
    match client.drop_table(database, name).await {
        Ok(()) => {}
        Err(e) if e.code == latsdb_types::ErrorCode::UnknownTable => {}
        Err(e) => return Err(e.to_string()),
    }
    client.create_table(spec).await.map_err(|e| e.to_string())
}

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// flexAsynch-style native benchmark: batched insert/read/update/delete.
    Flex(flex::FlexArgs),
    /// REST batch key lookups over HTTP (closed loop; failed lookups reported apart).
    Lookup(lookup::LookupArgs),
    /// sysbench OLTP against a MySQL-protocol server, over a list of thread counts (TPS and p95 plot).
    Sysbench(sysbench::SysbenchArgs),
    /// YCSB's core workloads a-f (or a properties file) over the native client: load and run phases.
    Ycsb(ycsb::YcsbArgs),
}

pub fn run(args: BenchArgs) -> Result<(), String> {
    match args.command {
        BenchCommand::Flex(a) => flex::run(a),
        BenchCommand::Lookup(a) => lookup::run(a),
        BenchCommand::Sysbench(a) => sysbench::run(a),
        BenchCommand::Ycsb(a) => ycsb::run(a),
    }
}
