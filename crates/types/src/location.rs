//! Location domains (NDB's LocationDomainId): the availability zone, rack
//! or building a node runs in. A client that names its domain reads
//! committed rows from a replica in it and has its transactions coordinated
//! there (`proto::Router::for_domain`), so a read costs no trip between
//! domains while one of its replicas there is live. Domains are names; a
//! node that names none is in no domain.

use crate::config::ClusterConfig;
use std::collections::BTreeMap;

/// The longest domain name: enough for any cloud's zone names.
pub const MAX_DOMAIN_LEN: usize = 64;

/// Whether `name` may name a location domain: 1 to 64 ASCII letters,
/// digits, '.', '_' or '-' (what zone names are made of), so it prints
/// and compares the same everywhere.
pub fn check_domain(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_DOMAIN_LEN {
        return Err(format!("must be 1 to {MAX_DOMAIN_LEN} characters long (got {:?})", name));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!("{name:?} has {c:?}; use ASCII letters, digits, '.', '_' and '-'"));
    }
    Ok(())
}

/// What is unwise in where the configuration puts its nodes, one sentence
/// each (the management server warns of them when it starts): a node group
/// whose replicas share a domain (losing it loses the group), data nodes
/// without a domain beside some with one, and an arbitrator outside a third
/// domain (losing its domain would stop the rest). Empty when no node
/// names a domain.
pub fn placement_warnings(config: &ClusterConfig) -> Vec<String> {
    let named: Vec<_> = config.datanodes.iter().filter_map(|d| d.location_domain.as_deref()).collect();
    if named.is_empty() && config.mgmd.location_domain.is_none() {
        return Vec::new();
    }
    let mut warnings = Vec::new();
    let unnamed: Vec<_> = config.datanodes.iter().filter(|d| d.location_domain.is_none()).map(|d| d.node_id).collect();
    if !unnamed.is_empty() && !named.is_empty() {
        warnings.push(format!(
            "data nodes {unnamed:?} name no location_domain while others do: clients of a domain never prefer them; give every data node its domain"
        ));
    }
    // `validate` keeps replicas at 1 or more; chunks of 0 would panic.
    let replicas = usize::from(config.cluster.replicas).max(1);
    for (group, nodes) in config.datanodes.chunks(replicas).enumerate() {
        let first = &nodes[0].location_domain;
        if replicas > 1 && first.is_some() && nodes.iter().all(|d| d.location_domain == *first) {
            warnings.push(format!(
                "node group {group} has all its replicas in location domain {}: losing that domain loses the group's data; put its replicas in different domains",
                first.as_deref().unwrap_or_default()
            ));
        }
    }
    let mut by_domain: BTreeMap<&str, Vec<u16>> = BTreeMap::new();
    for d in &config.datanodes {
        if let Some(domain) = d.location_domain.as_deref() {
            by_domain.entry(domain).or_default().push(d.node_id);
        }
    }
    match config.mgmd.location_domain.as_deref() {
        None => warnings.push(
            "the management server (the arbitrator) names no location_domain: put it in a third domain, so that the data nodes of either domain can go on when the other is lost".into(),
        ),
        Some(domain) => {
            if let Some(nodes) = by_domain.get(domain) {
                warnings.push(format!(
                    "the management server (the arbitrator) shares location domain {domain} with data nodes {nodes:?}: if {domain} is lost, the other nodes cannot win arbitration and stop; put it in a third domain"
                ));
            }
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(domains: &[Option<&str>], mgmd: Option<&str>) -> ClusterConfig {
        let mut config = ClusterConfig::local(domains.len() as u16, 2, 0);
        for (d, domain) in config.datanodes.iter_mut().zip(domains) {
            d.location_domain = domain.map(str::to_string);
        }
        config.mgmd.location_domain = mgmd.map(str::to_string);
        config
    }

    #[test]
    fn domain_names_are_short_and_plain() {
        assert!(check_domain("eu-west-1a").is_ok());
        assert!(check_domain("rack_7.row-2").is_ok());
        assert!(check_domain("").is_err());
        assert!(check_domain(&"z".repeat(MAX_DOMAIN_LEN + 1)).is_err());
        let err = check_domain("zone a").unwrap_err();
        assert!(err.contains("' '"), "{err}");
        assert!(check_domain("zoné").is_err());
    }

    #[test]
    fn the_configuration_refuses_a_bad_domain_name() {
        let mut c = config(&[Some("a"), Some("b")], Some("c"));
        assert!(c.validate().is_ok());
        c.datanodes[1].location_domain = Some("b/2".into());
        let err = c.validate().unwrap_err().message;
        assert!(err.contains("datanode 3: location_domain"), "{err}");
        c.datanodes[1].location_domain = None;
        c.mgmd.location_domain = Some(String::new());
        assert!(c.validate().unwrap_err().message.contains("mgmd: location_domain"));
    }

    #[test]
    fn a_good_placement_has_no_warning() {
        assert!(placement_warnings(&config(&[None, None], None)).is_empty());
        assert!(placement_warnings(&config(&[None, None], Some("c"))).is_empty(), "only the arbitrator names one");
        assert!(placement_warnings(&config(&[Some("a"), Some("b"), Some("a"), Some("b")], Some("c"))).is_empty());
    }

    #[test]
    fn an_unwise_placement_is_named() {
        let warnings = placement_warnings(&config(&[Some("a"), Some("a"), Some("a"), Some("b")], Some("a")));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("node group 0 has all its replicas in location domain a"), "{warnings:?}");
        assert!(warnings[1].contains("shares location domain a with data nodes [2, 3, 4]"), "{warnings:?}");
        let warnings = placement_warnings(&config(&[Some("a"), None], None));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("data nodes [3] name no location_domain"), "{warnings:?}");
        assert!(warnings[1].contains("names no location_domain: put it in a third domain"), "{warnings:?}");
    }
}
