//! Benchmarks shipped with latsdb (design.md section 9).

pub mod flex;
pub mod lookup;
mod report;

use clap::{Args, Subcommand};

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
}

pub fn run(args: BenchArgs) -> Result<(), String> {
    match args.command {
        BenchCommand::Flex(a) => flex::run(a),
        BenchCommand::Lookup(a) => lookup::run(a),
    }
}
