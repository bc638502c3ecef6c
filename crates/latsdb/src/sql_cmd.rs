//! `latsdb sql`: the SQL node (MySQL protocol).

use clap::Args;
use latsdb_sql::auth::Account;
use latsdb_sql::SqlOptions;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

#[derive(Args)]
pub struct SqlArgs {
    /// Address of the management server.
    #[arg(long, env = "LATSDB_MGMD", default_value = crate::DEFAULT_MGMD)]
    mgmd: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Port to listen on (0 picks a free port).
    #[arg(long, default_value_t = 3306)]
    port: u16,
    /// An account as USER or USER:PASSWORD; repeat for more. Without any,
    /// `root` with an empty password.
    #[arg(long = "user", env = "LATSDB_SQL_USERS", value_delimiter = ',')]
    users: Vec<String>,
    /// Worker threads (0: one per CPU).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Largest packet (statement) a client may send, in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    max_allowed_packet: usize,
    /// Write the listening address to this file once serving.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// TLS certificate chain (PEM); with --tls-key, clients may connect with TLS.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Refuse clients that do not use TLS.
    #[arg(long)]
    require_secure_transport: bool,
    /// Serve GET /metrics (Prometheus) on this port of --bind (0 picks a free one; the address is printed).
    #[arg(long)]
    metrics_port: Option<u16>,
    /// The location domain (availability zone) this node runs in: its
    /// committed reads go to data nodes of that domain, and its
    /// transactions are coordinated there, while one holds the partition.
    #[arg(long, value_parser = crate::parse_location_domain)]
    location_domain: Option<String>,
    #[command(flatten)]
    cluster_tls: crate::TlsArgs,
}

pub fn run_sql(args: SqlArgs) -> Result<(), String> {
    if args.max_allowed_packet < 1024 {
        return Err(format!("--max-allowed-packet {} is too small; give at least 1024", args.max_allowed_packet));
    }
    let mut accounts = args.users.iter().map(|u| Account::parse(u)).collect::<Result<Vec<_>, _>>()?;
    if accounts.is_empty() {
        accounts.push(Account::new("root", ""));
    }
    latsdb_sql::run(SqlOptions {
        mgmd: args.mgmd,
        listen: SocketAddr::new(args.bind, args.port),
        accounts,
        threads: args.threads,
        max_packet: args.max_allowed_packet,
        ready_file: args.ready_file,
        tls: args.tls_cert.zip(args.tls_key),
        require_tls: args.require_secure_transport,
        metrics_port: args.metrics_port,
        cluster_tls: args.cluster_tls.load(latsdb_net::tls::Role::Api)?,
        location_domain: args.location_domain,
    })
}
