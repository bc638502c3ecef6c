//! The README's client example. Run it against `latsdb start`:
//! `cargo run --release -p latsdb-client --example quickstart`.

use latsdb_client::{Client, Found, Lookups, Op, Scan};
use latsdb_types::{ColumnDef, ColumnType, IntWidth, TableSpec, Value};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mgmd = std::env::var("LATSDB_MGMD").unwrap_or_else(|_| "127.0.0.1:1186".into());
    let client = Client::connect(&mgmd).await?;
    let _ = client.drop_table("app", "users").await;
    let users = client
        .create_table(
            TableSpec::new("app", "users")
                .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
                .column(ColumnDef::new("name", ColumnType::VarChar(64)))
                .primary_key(&["id"]),
        )
        .await?;
    let inserts = (0..100).map(|i| Op::insert(&users, vec![Value::Int(i), format!("user{i}").into()]));
    client.batch(inserts.collect::<Result<_, _>>()?).await?; // 100 rows, one round trip per node
    let mut tx = client.transaction(); // a transaction
    tx.execute(vec![Op::update(&users, &[Value::Int(7)], &[("name", "ada".into())])?]).await?;
    tx.commit().await?;
    let row = client.get(&users, &[Value::Int(7)]).await?; // one key
    let few = client.scan(&users, Scan::all().filter(users.col("id")?.lt(10)).ordered()).await?;
    let mut lookups = Lookups::with_capacity(50, 9); // many keys, one buffer
    for i in (0..100).step_by(2) {
        lookups.push_values(&users, None, &[Value::Int(i)])?;
    }
    let answers = client.lookup(&lookups).await?; // read committed, one round trip per node
    let found = (0..answers.len()).filter(|&i| matches!(answers.get(i), Found::Row(_))).count();
    println!(
        "user 7 is {:?}; {} users have id < 10; {found} of 50 looked up",
        row.map(|r| r.get_by_name("name")),
        few.len()
    );
    Ok(())
}
