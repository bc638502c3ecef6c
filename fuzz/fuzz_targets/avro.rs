//! Avro from Hopsworks' metadata: a feature group's schema (JSON text kept
//! in the database) and the bytes a complex feature holds. Either may be
//! anything a writer stored. The input is a schema and a value, split at
//! the first NUL; the schema's field `f` is decoded from the value.
#![no_main]

use latsdb_rest::hopsworks::avro;
use latsdb_rest::json::JsonOut;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let at = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let Ok(schema) = std::str::from_utf8(&data[..at]) else { return };
    let value = data.get(at + 1..).unwrap_or(&[]);
    let Ok(ty) = avro::field_type(schema, "f") else { return };
    let mut out = JsonOut::with_capacity(64);
    if avro::write_json(&mut out, &ty, value).is_ok() {
        let text = std::str::from_utf8(&out.buf).expect("the decoder writes UTF-8");
        serde_json::from_str::<serde_json::Value>(text).expect("the decoder writes valid JSON");
    }
});
