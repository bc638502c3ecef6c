//! Hopsworks' API keys. A key reads `<prefix>.<secret>`; `hopsworks.api_key`
//! holds, by prefix, the lower-case hex SHA-256 of the secret followed by
//! the row's salt, and the user it belongs to. The key may reach the
//! databases of the projects its user is a member of (`project_team`,
//! `project`) and the feature stores shared entirely with those projects
//! (`shared_feature_store`): a feature store is a database of the same name.

use super::{int, rows_where, table, text};
use crate::auth::Grant;
use latsdb_client::Client;
use latsdb_types::{Result, Value};
use sha2::{Digest, Sha256};

/// A Hopsworks key as stored: how to check a secret, and what it grants.
#[derive(Clone, Debug)]
pub struct StoredKey {
    /// Lower-case hex SHA-256 of secret + salt.
    pub hash_hex: String,
    pub salt: String,
    pub grant: Grant,
}

impl StoredKey {
    /// Whether `secret` is this key's.
    pub fn accepts(&self, secret: &str) -> bool {
        let mut hasher = Sha256::new();
        hasher.update(secret.as_bytes());
        hasher.update(self.salt.as_bytes());
        let digest = hasher.finalize();
        let mut hex = String::with_capacity(64);
        for byte in digest {
            hex.push_str(&format!("{byte:02x}"));
        }
        crate::auth::constant_time_eq(hex.as_bytes(), self.hash_hex.to_ascii_lowercase().as_bytes())
    }
}

/// What Hopsworks' metadata says of a key prefix.
pub enum Found {
    Key(Box<StoredKey>),
    /// The metadata has no key with the prefix.
    NoKey,
    /// No Hopsworks metadata is loaded (no `hopsworks.api_key`).
    NoMetadata,
}

/// The Hopsworks key with `prefix`.
pub async fn fetch(client: &Client, prefix: &str) -> Result<Found> {
    let Some(keys) = table(client, "api_key").await? else {
        return Ok(Found::NoMetadata);
    };
    let found =
        rows_where(client, &keys, &[("prefix", Value::Str(prefix.into()))], &["secret", "salt", "name", "user_id"])
            .await?;
    let Some(row) = found.first() else {
        return Ok(Found::NoKey);
    };
    let databases = databases_of_user(client, int(row, "user_id")?).await?;
    Ok(Found::Key(Box::new(StoredKey {
        hash_hex: text(row, "secret")?,
        salt: text(row, "salt")?,
        grant: Grant { id: prefix.to_string(), name: text(row, "name")?, databases: Some(databases) },
    })))
}

/// The databases a Hopsworks user reaches: its member projects' and the
/// feature stores shared entirely with them.
async fn databases_of_user(client: &Client, user_id: i64) -> Result<Vec<String>> {
    let mut databases = Vec::new();
    let (Some(users), Some(teams), Some(projects)) =
        (table(client, "users").await?, table(client, "project_team").await?, table(client, "project").await?)
    else {
        return Ok(databases);
    };
    let Some(user) = rows_where(client, &users, &[("uid", Value::Int(user_id))], &["email"]).await?.pop() else {
        return Ok(databases);
    };
    let email = text(&user, "email")?;
    let mut member_of = Vec::new();
    for row in rows_where(client, &teams, &[("team_member", Value::Str(email))], &["project_id", "team_role"]).await? {
        // A restricted member sees that a store exists but reads none of it.
        if text(&row, "team_role")? != "Feature store restricted" {
            member_of.push(int(&row, "project_id")?);
        }
    }
    for &project in &member_of {
        for row in rows_where(client, &projects, &[("id", Value::Int(project))], &["projectname"]).await? {
            databases.push(text(&row, "projectname")?.to_lowercase());
        }
    }
    let (Some(shared), Some(stores)) =
        (table(client, "shared_feature_store").await?, table(client, "feature_store").await?)
    else {
        return Ok(databases);
    };
    for &project in &member_of {
        let rows = rows_where(
            client,
            &shared,
            &[("shared_with_project", Value::Int(project))],
            &["feature_store", "shared_entirely"],
        )
        .await?;
        for row in rows.iter().filter(|r| int(r, "shared_entirely").ok() == Some(1)) {
            let store = int(row, "feature_store")?;
            for found in rows_where(client, &stores, &[("id", Value::Int(store))], &["name"]).await? {
                databases.push(text(&found, "name")?.to_lowercase());
            }
        }
    }
    databases.sort();
    databases.dedup();
    // Grants go by name: a project or shared store named like a system
    // database must not reach latsdb's API keys or Hopsworks' own tables.
    databases.retain(|d| !is_system_database(d));
    Ok(databases)
}

/// The databases no Hopsworks project's key may reach, whatever the
/// project is called.
fn is_system_database(name: &str) -> bool {
    [crate::auth::SYSTEM_DATABASE, super::DATABASE].iter().any(|s| s.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_project_name_reaches_a_system_database() {
        assert!(is_system_database("latsdb_system"));
        assert!(is_system_database("HOPSWORKS"));
        assert!(!is_system_database("fsdb001"));
    }

    #[test]
    fn a_secret_is_checked_with_its_salt() {
        let salt = "pepper";
        let hash: String = Sha256::digest(b"secretpepper").iter().map(|b| format!("{b:02x}")).collect();
        let key = StoredKey {
            hash_hex: hash.to_uppercase(),
            salt: salt.into(),
            grant: Grant { id: "p".into(), name: "k".into(), databases: Some(vec![]) },
        };
        assert!(key.accepts("secret"));
        assert!(!key.accepts("secrets"));
        assert!(!key.accepts("pepper"));
    }
}
