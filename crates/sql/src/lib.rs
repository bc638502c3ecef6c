//! latsdb's SQL node: a stateless API node that speaks the MySQL
//! client/server protocol and runs SQL through the native client, pushing
//! key lookups, range scans, filters and aggregates down to the data nodes.
//!
//! Layers, outermost first: `wire` (packets), `conn` (handshake and
//! commands), `session` (transactions, variables, statement dispatch),
//! `parse` + `bind` + `plan` (SQL to plans), `exec` and `dml` (running
//! plans), `catalog` (DDL, SHOW, information_schema), `eval` (expressions).

pub mod auth;
pub mod bind;
pub mod catalog;
pub mod conn;
pub mod dates;
pub mod dml;
pub mod error;
pub mod eval;
pub mod exec;
pub mod explain;
pub mod foreign;
pub mod metrics;
pub mod parse;
pub mod plan;
pub mod prepared;
pub mod process;
pub mod regexp;
pub mod session;
pub mod shared;
pub mod subquery;
pub mod times;
pub mod union;
pub mod window;
pub mod wire;

use latsdb_client::Client;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Options of a SQL node process.
#[derive(Clone, Debug)]
pub struct SqlOptions {
    pub mgmd: String,
    pub listen: SocketAddr,
    pub accounts: Vec<auth::Account>,
    /// Worker threads (0: one per CPU).
    pub threads: usize,
    /// Largest packet a client may send.
    pub max_packet: usize,
    /// Written with the listening address once the node serves.
    pub ready_file: Option<PathBuf>,
    /// Certificate chain and private key (PEM) for TLS; None serves plain TCP only.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Refuse clients that do not switch to TLS.
    pub require_tls: bool,
    /// Serve GET /metrics (Prometheus) on this port of the listening
    /// address's host (0 picks a free one); None serves none.
    pub metrics_port: Option<u16>,
    /// The node's identity towards the cluster when it requires TLS.
    pub cluster_tls: Option<Arc<latsdb_net::tls::ClusterTls>>,
    /// The location domain this node runs in (`ClientOptions::location_domain`).
    pub location_domain: Option<String>,
}

/// Runs a SQL node until SIGTERM or Ctrl-C: a thread per worker, each with
/// its own runtime and its own cluster client (`serve_per_thread`), so a
/// session's statements never cross threads.
pub fn run(options: SqlOptions) -> Result<(), String> {
    if options.require_tls && options.tls.is_none() {
        return Err("--require-secure-transport needs --tls-cert and --tls-key".into());
    }
    let threads = latsdb_net::serve::worker_threads(options.threads);
    // A bad certificate is reported before anything else starts.
    let tls = match &options.tls {
        Some((cert, key)) => {
            Some(conn::Tls { acceptor: latsdb_net::tls::acceptor(cert, key)?, required: options.require_tls })
        }
        None => None,
    };
    let client_options = latsdb_client::ClientOptions {
        name: "latsdb-sql".into(),
        // A session sends one request at a time: waiting a scheduler round
        // for company only delays it (sysbench oltp_read_write, 16 threads,
        // back to back: 1,137-1,174 TPS written at once vs 1,035-1,071 with
        // YieldOnce, p95 19 vs 20-24 ms).
        coalesce: latsdb_net::Coalesce::Never,
        tls: options.cluster_tls.clone(),
        location_domain: options.location_domain.clone(),
        ..Default::default()
    };
    let metrics = Arc::new(metrics::SqlMetrics::default());
    if let Some(port) = options.metrics_port {
        serve_metrics(std::net::SocketAddr::new(options.listen.ip(), port), metrics.clone())?;
    }
    let (mgmd, accounts) = (options.mgmd.clone(), options.accounts.clone());
    let init = move || async move {
        let client = Client::connect_with(&mgmd, client_options)
            .await
            .map_err(|e| format!("cannot reach the cluster through {mgmd}: {}", e.message))?;
        let shared = session::Shared::new(client, accounts, metrics);
        shared.ensure_system_tables().await.map_err(|e| {
            format!("cannot create the SQL metadata tables in {}: {}", session::SYSTEM_DATABASE, e.message)
        })?;
        Ok(shared)
    };
    let join = |first: Arc<session::Shared>| async move {
        let client = first
            .client
            .connect_sibling()
            .await
            .map_err(|e| format!("cannot reach the cluster through {}: {}", first.client.mgmd(), e.message))?;
        Ok(first.with_client(client))
    };
    let listening = |address: SocketAddr| {
        let users: Vec<&str> = options.accounts.iter().map(|a| a.user.as_str()).collect();
        println!(
            "latsdb sql node listening on {address} (MySQL protocol{}, {threads} worker threads, users: {})",
            match (&options.tls, options.require_tls) {
                (Some(_), true) => ", TLS required",
                (Some(_), false) => ", TLS offered",
                (None, _) => "",
            },
            users.join(", ")
        );
        latsdb_net::serve::write_ready_file(options.ready_file.as_deref(), address)
    };
    let max_packet = options.max_packet;
    let serve =
        move |shared: &Arc<session::Shared>, stream| conn::serve(shared.clone(), stream, max_packet, tls.clone());
    latsdb_net::serve::serve_per_thread("sql-worker", threads, options.listen, init, join, listening, serve)?;
    println!("latsdb sql node stopped");
    Ok(())
}

/// Serves GET /metrics at `address` from a thread of its own (the workers
/// each run their own runtime); says where, or why it cannot.
fn serve_metrics(address: SocketAddr, metrics: Arc<metrics::SqlMetrics>) -> Result<(), String> {
    let listener = std::net::TcpListener::bind(address)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| format!("the SQL node cannot serve metrics on {address}: {e}; pick another --metrics-port"))?;
    let at = listener.local_addr().map_err(|e| format!("metrics listener: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("the SQL node's metrics thread: {e}"))?;
    std::thread::Builder::new()
        .name("sql-metrics".into())
        .spawn(move || {
            runtime.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => {
                        latsdb_net::metrics::serve(listener, "SQL node", move || {
                            let metrics = metrics.clone();
                            async move { metrics.render() }
                        })
                        .await
                    }
                    Err(e) => eprintln!("the SQL node's metrics listener failed: {e}; no metrics are served"),
                }
            })
        })
        .map_err(|e| format!("the SQL node's metrics thread: {e}"))?;
    println!("latsdb sql node metrics http://{at}/metrics");
    Ok(())
}
