//! `latsdb certs create`: a cluster CA and one certificate per role, with
//! which the cluster's processes authenticate each other on the native
//! protocol (`latsdb_net::tls`).
//!
//! A directory holds `ca.pem` and `ca.key` (the CA; keep `ca.key` off the
//! nodes once the certificates are made) and `<role>.pem`/`<role>.key` for
//! `data-node`, `mgmd` and `api`. Each certificate names its role (a DNS
//! name under `latsdb.invalid`) and the hosts it may be used from or
//! reached at, so a certificate copied to another host, or an API node's
//! certificate, cannot open a data node's peer links.

use latsdb_net::tls::Role;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct CertsArgs {
    #[command(subcommand)]
    command: CertsCommand,
}

#[derive(clap::Subcommand)]
enum CertsCommand {
    /// Make the cluster CA (once per directory) and a certificate for each
    /// role, valid for the given hosts; existing certificates are kept
    /// unless --force.
    Create {
        /// Directory for ca.pem, ca.key and <role>.pem/<role>.key; give it
        /// to every process as --tls-dir (or LATSDB_TLS_DIR).
        #[arg(long, default_value = "latsdb-tls")]
        dir: PathBuf,
        /// Host names and IP addresses the certificates are made for: where
        /// the data nodes and the management server are reached, and where
        /// data nodes connect from.
        #[arg(long, value_delimiter = ',', default_value = "127.0.0.1,localhost")]
        hosts: Vec<String>,
        /// Make only this role's certificate (default: all three).
        #[arg(long, value_enum)]
        role: Option<RoleArg>,
        /// Days the role certificates are valid (the CA: 10 years).
        #[arg(long, default_value_t = 365)]
        days: u32,
        /// Replace role certificates that exist (the CA is always kept).
        #[arg(long)]
        force: bool,
    },
}

#[derive(clap::ValueEnum, Clone, Copy)]
enum RoleArg {
    DataNode,
    Mgmd,
    Api,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Role {
        match role {
            RoleArg::DataNode => Role::DataNode,
            RoleArg::Mgmd => Role::Mgmd,
            RoleArg::Api => Role::Api,
        }
    }
}

pub fn run(args: CertsArgs) -> Result<(), String> {
    let CertsCommand::Create { dir, hosts, role, days, force } = args.command;
    let roles: Vec<Role> = match role {
        Some(role) => vec![role.into()],
        None => Role::ALL.to_vec(),
    };
    for line in create(&dir, &hosts, &roles, days, force)? {
        println!("{line}");
    }
    println!("Give every process of the cluster --tls-dir {} (or LATSDB_TLS_DIR).", dir.display());
    println!("ca.key signs certificates: keep it off the nodes once they have theirs.");
    Ok(())
}

/// The CA's name; a CA made here is found again by its key and this name.
const CA_NAME: &str = "latsdb cluster CA";
const CA_DAYS: u32 = 3650;

/// Makes the CA if `dir` has none, then each role's certificate (unless it
/// exists and not `force`). Returns a line per file, saying what was done.
pub fn create(dir: &Path, hosts: &[String], roles: &[Role], days: u32, force: bool) -> Result<Vec<String>, String> {
    if hosts.is_empty() {
        return Err("--hosts names no host: give the host names or addresses the nodes are reached by".into());
    }
    if days == 0 {
        return Err("--days must be at least 1".into());
    }
    if let Some(bad) = hosts.iter().find(|h| h.contains('*') || h.ends_with(".invalid") || h.is_empty()) {
        return Err(format!(
            "--hosts {bad}: give host names or IP addresses the nodes are reached at (no wildcards, \
             nothing under .invalid, where the roles' names are)"
        ));
    }
    create_private_dir(dir)?;
    let mut done = Vec::new();
    let (ca_params, ca_key) = ca(dir, &mut done)?;
    let issuer = Issuer::new(ca_params, ca_key);
    for &role in roles {
        let stem = role.file_stem();
        let (cert_path, key_path) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}.key")));
        if cert_path.exists() && !force {
            done.push(format!("kept {} (--force replaces it)", cert_path.display()));
            continue;
        }
        let params = role_params(role, hosts, days)?;
        let key = KeyPair::generate().map_err(|e| format!("cannot make a key: {e}"))?;
        let cert = params.signed_by(&key, &issuer).map_err(|e| format!("cannot sign the {stem} certificate: {e}"))?;
        write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
        write_file(&cert_path, cert.pem().as_bytes(), 0o644)?;
        let bound = if role == Role::Api { "any host".to_string() } else { hosts.join(", ") };
        done.push(format!("wrote {} for {bound}, valid {days} days", cert_path.display()));
    }
    Ok(done)
}

/// The CA of `dir`: loaded (its key, and the parameters it was made with)
/// or made.
fn ca(dir: &Path, done: &mut Vec<String>) -> Result<(CertificateParams, KeyPair), String> {
    let (cert_path, key_path) = (dir.join("ca.pem"), dir.join("ca.key"));
    let params = ca_params()?;
    if key_path.exists() {
        let text = std::fs::read_to_string(&key_path)
            .map_err(|e| format!("cannot read the CA key {}: {e}", key_path.display()))?;
        let key = KeyPair::from_pem(&text)
            .map_err(|e| format!("{} is not a CA key latsdb can use: {e}", key_path.display()))?;
        if !cert_path.exists() {
            return Err(format!(
                "{} is missing next to its key; restore it or start a new directory",
                cert_path.display()
            ));
        }
        done.push(format!("kept the CA {}", cert_path.display()));
        return Ok((params, key));
    }
    if cert_path.exists() {
        return Err(format!(
            "{} exists without ca.key: certificates of that CA cannot be made here; use the directory that has its key",
            cert_path.display()
        ));
    }
    let key = KeyPair::generate().map_err(|e| format!("cannot make the CA key: {e}"))?;
    let cert = params.self_signed(&key).map_err(|e| format!("cannot make the CA certificate: {e}"))?;
    write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_file(&cert_path, cert.pem().as_bytes(), 0o644)?;
    done.push(format!(
        "wrote the CA {} (valid {CA_DAYS} days) and its key {}",
        cert_path.display(),
        key_path.display()
    ));
    Ok((params, key))
}

fn ca_params() -> Result<CertificateParams, String> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    (params.not_before, params.not_after) = validity(CA_DAYS)?;
    Ok(params)
}

fn role_params(role: Role, hosts: &[String], days: u32) -> Result<CertificateParams, String> {
    let mut names = vec![role.certificate_name().to_string()];
    // An API node only connects: its certificate names no host, so it can
    // never serve as a data node or management server at one.
    if role != Role::Api {
        names.extend(hosts.iter().cloned());
    }
    let mut params =
        CertificateParams::new(names).map_err(|e| format!("--hosts {}: not a host name: {e}", hosts.join(",")))?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.distinguished_name.push(DnType::CommonName, format!("latsdb {}", role.file_stem()));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // Data nodes and the management server both accept connections and
    // open them; API nodes only open them.
    params.extended_key_usages = match role {
        Role::Api => vec![ExtendedKeyUsagePurpose::ClientAuth],
        Role::DataNode | Role::Mgmd => vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
    };
    (params.not_before, params.not_after) = validity(days)?;
    Ok(params)
}

/// From an hour ago (clocks of the hosts differ a little) for `days`.
fn validity(days: u32) -> Result<(time::OffsetDateTime, time::OffsetDateTime), String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "the system clock is before 1970".to_string())?
        .as_secs() as i64;
    let at = |secs: i64| time::OffsetDateTime::from_unix_timestamp(secs).map_err(|e| e.to_string());
    Ok((at(now - 3600)?, at(now + i64::from(days) * 86_400)?))
}

fn create_private_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot make {} private: {e}", dir.display()))
}

/// Writes a file whole, created with `mode` (keys are never readable by
/// others, not even for a moment), through a temporary name.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    let partial = path.with_extension("partial");
    let _ = std::fs::remove_file(&partial);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&partial)
        .map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", partial.display()))?;
    std::fs::rename(&partial, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
