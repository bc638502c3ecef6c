//! `latsdb start --tls`: every native link runs over TLS with mutual
//! authentication by the cluster CA's certificates, and nobody else gets
//! in. Clients, the SQL node, `latsdb mgm` and a node restart work with the
//! cluster's certificates; a client without TLS, a client of another CA,
//! an API certificate that speaks as a data node, and a data node's
//! certificate used from a host it was not made for are all refused with
//! `AccessDenied` and a message that says what to do, and the cluster
//! stays up.

mod common;

use common::{mariadb, TestCluster, BIN};
use latsdb_client::{Client, ClientOptions, Op};
use latsdb_net::tls::{ClusterTls, Role};
use latsdb_net::{connect_link, FrameReader};
use latsdb_types::proto::{
    self, ClientResponse, CommitEpoch, Hello, MgmRequest, MgmResponse, ShardAddr, PROTOCOL_VERSION,
};
use latsdb_types::{ColumnDef, ColumnType, ErrorCode, IntWidth, TableSpec, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn certs_create(dir: &Path, extra: &[&str]) {
    let out = Command::new(BIN).args(["certs", "create", "--dir"]).arg(dir).args(extra).output().expect("run certs");
    assert!(out.status.success(), "latsdb certs create failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Sends `Hello::Peer` as data node 2's shard 0 over a TLS link made with
/// `identity`, and returns what the data node answers.
async fn hello_as_peer(shard: &str, identity: &ClusterTls) -> ClientResponse {
    use tokio::io::AsyncWriteExt;
    let link = connect_link(shard, Duration::from_secs(5), Some(identity), Role::DataNode)
        .await
        .expect("the TLS handshake succeeds");
    let (r, mut w) = link.into_split();
    let hello = Hello::Peer { protocol: PROTOCOL_VERSION, from: ShardAddr { node: 2, shard: 0 }, process: 0 };
    w.write_all(&proto::frame(7, &hello)).await.unwrap();
    let mut reader = FrameReader::new(r, 1 << 20);
    let answer = tokio::time::timeout(Duration::from_secs(10), reader.next()).await.expect("an answer within 10 s");
    let (id, body) = answer.unwrap().expect("an answer, not a closed link");
    assert_eq!(id, 7);
    proto::decode_body(body).unwrap()
}

fn assert_denied(answer: ClientResponse, why: &str) {
    match answer {
        ClientResponse::Error(e) => {
            assert_eq!(e.code, ErrorCode::AccessDenied, "{e}");
            assert!(e.message.contains(why), "the refusal says why ({why}): {e}");
        }
        other => panic!("a peer link was accepted: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_clusters_certificates_get_in() {
    let cluster = TestCluster::start(&["--tls"]);
    let tls_dir = cluster.tls_dir.clone().expect("the launcher prints its TLS directory");
    for file in ["ca.pem", "ca.key", "data-node.pem", "data-node.key", "mgmd.pem", "api.pem", "api.key"] {
        assert!(tls_dir.join(file).exists(), "{file} was made");
    }

    // The cluster's own clients work: native, SQL (its node reaches the
    // cluster over TLS), and `latsdb mgm`.
    let client = Client::connect_with(&cluster.mgmd, cluster.client_options()).await.unwrap();
    let table = client
        .create_table(
            TableSpec::new("tls", "kv")
                .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
                .column(ColumnDef::new("v", ColumnType::int(IntWidth::Big)))
                .primary_key(&["id"]),
        )
        .await
        .unwrap();
    let rows = (0..200).map(|id| Op::upsert(&table, vec![Value::Int(id), Value::Int(id * 7)]).unwrap()).collect();
    for r in client.batch(rows).await.unwrap() {
        r.unwrap();
    }
    let (ok, out, err) = mariadb(&cluster, &[], "SELECT v FROM tls.kv WHERE id = 6;");
    assert!(ok && out.contains("42"), "the SQL node reads over TLS: {out} {err}");
    assert!(cluster.mgm(&["show"]).contains("started"));

    // Without TLS: refused, and told why.
    let plain = Client::connect(&cluster.mgmd).await.err().expect("a client without TLS is refused");
    assert_eq!(plain.code, ErrorCode::AccessDenied, "{plain}");
    assert!(plain.message.contains("requires TLS") && plain.message.contains("--tls-dir"), "{plain}");

    // Certificates of another CA: refused in the handshake.
    let stranger = cluster.dir.path().join("stranger");
    certs_create(&stranger, &[]);
    let options = ClientOptions::with_tls_dir(Some(&stranger)).unwrap();
    let foreign = Client::connect_with(&cluster.mgmd, options).await.err().expect("another CA's client is refused");
    assert_eq!(foreign.code, ErrorCode::AccessDenied, "{foreign}");
    assert!(foreign.message.contains("invalid peer certificate"), "{foreign}");

    // A certificate of another CA beside the cluster's own ca.pem: the
    // client accepts the server, the server refuses the client (under TLS
    // 1.3 the client reads that after its handshake); not retried.
    let impostor = cluster.dir.path().join("impostor");
    std::fs::create_dir_all(&impostor).unwrap();
    std::fs::copy(tls_dir.join("ca.pem"), impostor.join("ca.pem")).unwrap();
    for file in ["api.pem", "api.key"] {
        std::fs::copy(stranger.join(file), impostor.join(file)).unwrap();
    }
    let options = ClientOptions::with_tls_dir(Some(&impostor)).unwrap();
    let refused =
        Client::connect_with(&cluster.mgmd, options).await.err().expect("another CA's certificate is refused");
    assert_eq!(refused.code, ErrorCode::AccessDenied, "{refused}");
    assert!(refused.message.contains("TLS"), "{refused}");

    // An API certificate of the cluster's own CA cannot speak as a data
    // node, to a data node or to the management server.
    let api = ClusterTls::load(&tls_dir, Role::Api).unwrap();
    let shard = client.layout().datanodes[0].shards[0].clone();
    assert_denied(hello_as_peer(&shard, &api).await, "does not hold the data-node role");
    let mut mgm = latsdb_net::RpcConn::connect(&cluster.mgmd, Duration::from_secs(5), Some(&api)).await.unwrap();
    let durable = MgmRequest::EpochDurable { epoch: CommitEpoch(u64::MAX >> 3) };
    match mgm.call::<_, MgmResponse>(&durable).await {
        Ok(MgmResponse::Error(e)) => assert_eq!(e.code, ErrorCode::AccessDenied, "{e}"),
        other => panic!("an API node reported a durable epoch: {other:?}"),
    }

    // A data node's certificate made for another host is refused from this one.
    let elsewhere = cluster.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    for file in ["ca.pem", "ca.key"] {
        std::fs::copy(tls_dir.join(file), elsewhere.join(file)).unwrap();
    }
    certs_create(&elsewhere, &["--role", "data-node", "--hosts", "10.9.9.9"]);
    let moved = ClusterTls::load(&elsewhere, Role::DataNode).unwrap();
    assert_denied(hello_as_peer(&shard, &moved).await, "not made for its address 127.0.0.1");

    // The cluster is unharmed, and a node restart (the copy from the live
    // replica runs over TLS peer links) brings every row back.
    let out = cluster.mgm(&["3", "restart", "--initial", "--timeout", "120"]);
    assert!(out.contains("started"), "{out}");
    let client = Client::connect_with(&cluster.mgmd, cluster.client_options()).await.unwrap();
    let table = client.table("tls", "kv").await.unwrap();
    for id in [0i64, 77, 199] {
        let row = client.get(&table, &[Value::Int(id)]).await.unwrap().expect("the row survives");
        assert_eq!(row.get(1), Value::Int(id * 7));
    }
}
