//! Which foreign keys reference each table (`TableDef::referenced_by`).
//!
//! A foreign key lives in its child table's definition and names its
//! parent by database and table, so the parent may be created after the
//! child or dropped and created again, as in MySQL. The SQL node that
//! deletes or updates parent rows must know the children without reading
//! every table: the management server keeps each table's list of the keys
//! that reference it, and gives a table whose list changed a new version
//! on every data node. A writer that planned against the old list is then
//! refused (`SchemaVersionMismatch`) and plans again.

use super::Mgmd;
use latsdb_types::proto::MgmResponse;
use latsdb_types::schema::{ForeignKeyDef, ForeignKeyRef, TableDef};
use latsdb_types::Result;

impl Mgmd {
    /// Brings every table's `referenced_by` up to date with the foreign keys
    /// of all tables; `answer` (a changed table's definition) is replaced
    /// by its latest version.
    pub(super) async fn link_references(&self, answer: MgmResponse) -> Result<MgmResponse> {
        let changed = relinked(&self.lock().tables);
        let mut answer = answer;
        for def in changed {
            let name = def.qualified_name();
            let def = self.alter(def).await.inspect_err(|e| {
                self.event(
                    latsdb_types::proto::Severity::Warning,
                    format!("the foreign keys that reference {name} could not be linked to it: {}; the next schema change links them", e.message),
                )
            })?;
            if let MgmResponse::Table(t) = &mut answer {
                if t.id == def.id {
                    *t = def;
                }
            }
        }
        debug_assert!(relinked(&self.lock().tables).is_empty(), "references still differ after linking");
        Ok(answer)
    }
}

/// The tables whose `referenced_by` differs from what the foreign keys of
/// `tables` say, each with its new list and the next version. Hidden
/// tables (unique indexes, copies) are never parents or children.
fn relinked(tables: &[TableDef]) -> Vec<TableDef> {
    let children: Vec<(&TableDef, &ForeignKeyDef)> =
        tables.iter().filter(|c| !c.is_hidden()).flat_map(|c| c.foreign_keys.iter().map(move |k| (c, k))).collect();
    let mut out = Vec::new();
    for parent in tables {
        let mut refs: Vec<ForeignKeyRef> = if parent.is_hidden() {
            Vec::new()
        } else {
            children
                .iter()
                .filter(|(_, k)| k.references(&parent.database, &parent.name))
                .map(|(c, k)| ForeignKeyRef {
                    database: c.database.clone(),
                    table: c.name.clone(),
                    name: k.name.clone(),
                })
                .collect()
        };
        refs.sort();
        debug_assert!(refs.windows(2).all(|w| w[0] != w[1]), "a key is listed twice among a table's references");
        if refs != parent.referenced_by {
            let mut def = parent.clone();
            def.referenced_by = refs;
            def.version += 1;
            out.push(def);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latsdb_types::schema::{ColumnChange, ColumnDef, ColumnType, IntWidth, ReferenceAction, TableSpec};

    fn table(id: u32, name: &str) -> TableDef {
        let spec = TableSpec::new("db", name)
            .column(ColumnDef::new("id", ColumnType::int(IntWidth::Int)))
            .column(ColumnDef::new("p", ColumnType::int(IntWidth::Int)))
            .primary_key(&["id"]);
        TableDef::from_spec(&spec, id, 2).unwrap()
    }

    fn with_key(t: TableDef, name: &str, parent: &str) -> TableDef {
        let key = ForeignKeyDef {
            name: name.into(),
            columns: vec![1],
            parent_database: "db".into(),
            parent_table: parent.into(),
            parent_columns: vec!["id".into()],
            on_delete: ReferenceAction::Cascade,
            on_update: ReferenceAction::Restrict,
        };
        t.with_changed_columns(&[ColumnChange::AddForeignKey(key)]).unwrap()
    }

    #[test]
    fn a_parent_lists_the_keys_that_reference_it_by_name_whenever_it_exists() {
        // A child created first (foreign_key_checks off): no parent yet.
        let child = with_key(table(1, "c"), "c_ibfk_1", "p");
        assert!(relinked(std::slice::from_ref(&child)).is_empty());
        // The parent appears: it lists the key, in a new version.
        let parent = table(2, "p");
        let linked = relinked(&[child.clone(), parent.clone()]);
        assert_eq!(linked.len(), 1);
        assert_eq!(linked[0].id, 2);
        assert_eq!(linked[0].version, parent.version + 1);
        let reference = ForeignKeyRef { database: "db".into(), table: "c".into(), name: "c_ibfk_1".into() };
        assert_eq!(linked[0].referenced_by, vec![reference]);
        // Once linked, nothing changes; a self-reference is listed too.
        let own = with_key(linked[0].clone(), "p_ibfk_1", "p");
        let again = relinked(&[child.clone(), own.clone()]);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].referenced_by.len(), 2);
        assert!(relinked(&[child, again[0].clone()]).is_empty());
        // The child dropped: the parent lists only itself.
        let alone = relinked(&[again[0].clone()]);
        assert_eq!(alone[0].referenced_by.iter().map(|r| r.table.as_str()).collect::<Vec<_>>(), ["p"]);
    }
}
