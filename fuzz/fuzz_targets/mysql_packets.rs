//! MySQL protocol bytes from any client of the SQL node: the stream is cut
//! into packets as the connection does (3-byte length, sequence byte,
//! continuation chunks, a size limit); the first packet is read as the
//! handshake response, every later one as a command: the text of
//! COM_QUERY and COM_STMT_PREPARE is decoded and parsed, the parameters of
//! COM_STMT_EXECUTE are decoded for a statement of as many parameters as
//! the command's first byte says (the server knows that number from its
//! PREPARE). A panic anywhere is a finding.
#![no_main]

use latsdb_sql::{conn, parse, wire::PacketIo};
use libfuzzer_sys::fuzz_target;

const COM_QUERY: u8 = 0x03;
const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_EXECUTE: u8 = 0x17;

fn command(packet: &[u8], types: &mut Vec<u16>) {
    let Some((&command, body)) = packet.split_first() else { return };
    match command {
        COM_QUERY | COM_STMT_PREPARE => {
            let text = parse::decode_query(body);
            let _ = parse::parse(&text);
        }
        COM_STMT_EXECUTE => {
            let params = body.first().map_or(0, |&b| b as usize % 24);
            if let Ok(values) = conn::decode_execute(body, params, types) {
                assert_eq!(values.len(), params, "one value per parameter");
            }
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| latsdb_fuzz::on_worker_stack(run, data));

fn run(data: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
    runtime.block_on(async {
        let stream = tokio::io::join(data, tokio::io::sink());
        // A small limit so that the fuzzer reaches "too large" cheaply.
        let mut io = PacketIo::new(stream, 1 << 20);
        let mut packet = Vec::new();
        let mut types = Vec::new();
        for i in 0.. {
            if io.read_packet(&mut packet).await.is_err() {
                break;
            }
            if i == 0 {
                let _ = conn::parse_handshake_response(&packet);
            } else {
                command(&packet, &mut types);
            }
        }
    });
}
