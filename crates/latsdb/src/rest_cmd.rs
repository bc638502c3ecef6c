//! `latsdb rest` (the REST node) and `latsdb apikey` (its API keys).

use clap::{Args, Subcommand, ValueEnum};
use latsdb_rest::auth::{self, AuthMode};
use latsdb_rest::{RestConfig, RestOptions};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

#[derive(Clone, Copy, ValueEnum)]
pub enum AuthArg {
    /// No API keys (for a development cluster on loopback).
    None,
    /// Every data request needs an `X-API-KEY` with a grant on its database.
    ApiKey,
}

impl From<AuthArg> for AuthMode {
    fn from(a: AuthArg) -> AuthMode {
        match a {
            AuthArg::None => AuthMode::None,
            AuthArg::ApiKey => AuthMode::ApiKey,
        }
    }
}

#[derive(Args)]
pub struct RestArgs {
    /// Address of the management server.
    #[arg(long, env = "LATSDB_MGMD", default_value = crate::DEFAULT_MGMD)]
    mgmd: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Port to listen on (0 picks a free port).
    #[arg(long, default_value_t = 4406)]
    port: u16,
    /// Worker threads (0: one per CPU).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Authentication of data requests.
    #[arg(long, value_enum, default_value = "api-key")]
    auth: AuthArg,
    /// Require an API key for /health and /ping too.
    #[arg(long)]
    auth_health: bool,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_body_bytes: usize,
    /// Most operations per batch (and entries per batch feature request);
    /// 256 is RonDB's limit.
    #[arg(long, default_value_t = 256)]
    max_batch_ops: usize,
    /// TLS certificate chain (PEM); with --tls-key the node serves HTTPS only.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Write the listening address to this file once serving.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// The location domain (availability zone) this node runs in: its
    /// committed reads go to data nodes of that domain, and its
    /// transactions are coordinated there, while one holds the partition.
    #[arg(long, value_parser = crate::parse_location_domain)]
    location_domain: Option<String>,
    #[command(flatten)]
    cluster_tls: crate::TlsArgs,
}

pub fn run_rest(args: RestArgs) -> Result<(), String> {
    if args.max_body_bytes < 1024 {
        return Err(format!("--max-body-bytes {} is too small; give at least 1024", args.max_body_bytes));
    }
    if args.max_batch_ops == 0 {
        return Err("--max-batch-ops must be at least 1".into());
    }
    latsdb_rest::run(RestOptions {
        mgmd: args.mgmd,
        listen: SocketAddr::new(args.bind, args.port),
        config: RestConfig {
            auth: args.auth.into(),
            open_health: !args.auth_health,
            max_body_bytes: args.max_body_bytes,
            max_batch_ops: args.max_batch_ops,
        },
        threads: args.threads,
        tls: args.tls_cert.zip(args.tls_key),
        ready_file: args.ready_file,
        cluster_tls: args.cluster_tls.load(latsdb_net::tls::Role::Api)?,
        location_domain: args.location_domain,
    })
}

#[derive(Args)]
pub struct ApiKeyArgs {
    /// Address of the management server.
    #[arg(long, env = "LATSDB_MGMD", default_value = crate::DEFAULT_MGMD)]
    mgmd: String,
    #[command(flatten)]
    tls: crate::TlsArgs,
    #[command(subcommand)]
    command: ApiKeyCommand,
}

#[derive(Subcommand)]
enum ApiKeyCommand {
    /// Create a key; it is printed once and cannot be shown again.
    Create {
        /// A name to recognise the key by.
        #[arg(long)]
        name: String,
        /// A database the key may access (repeat for several; '*' for all).
        #[arg(long = "db", required = true)]
        databases: Vec<String>,
    },
    /// List keys (ids, names, grants; never secrets).
    List,
    /// Revoke a key by its id (the part before the dot) or the whole key.
    Delete { id: String },
}

pub async fn run_apikey(args: ApiKeyArgs) -> Result<(), String> {
    let client =
        latsdb_client::Client::connect_with(&args.mgmd, args.tls.client_options()?).await.map_err(|e| e.to_string())?;
    match args.command {
        ApiKeyCommand::Create { name, databases } => {
            let key = auth::create_key(&client, &name, &databases).await.map_err(|e| e.to_string())?;
            println!("{key}");
            eprintln!("API key '{name}' created; send it as the X-API-KEY header. It is not shown again.");
        }
        ApiKeyCommand::List => {
            for grant in auth::list_keys(&client).await.map_err(|e| e.to_string())? {
                let databases = grant.databases.map(|d| d.join(",")).unwrap_or_else(|| "*".into());
                println!("{}  {}  databases={databases}", grant.id, grant.name);
            }
        }
        ApiKeyCommand::Delete { id } => {
            if !auth::delete_key(&client, &id).await.map_err(|e| e.to_string())? {
                return Err(format!("no API key with id '{}'", id.split('.').next().unwrap_or(&id)));
            }
            println!("revoked");
        }
    }
    Ok(())
}
