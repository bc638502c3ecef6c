//! The cluster configuration file (`latsdb start --config`, every data
//! node and the management server read it): any text either parses into a
//! configuration that passes its own checks or is refused with an error.
//! What parses prints back as TOML that parses into the same configuration.
#![no_main]

use latsdb_types::config::ClusterConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(config) = ClusterConfig::parse(text) else { return };
    let printed = config.to_toml();
    match ClusterConfig::parse(&printed) {
        Ok(again) => assert_eq!(again.to_toml(), printed, "the printed configuration reads back the same"),
        Err(e) => panic!("a valid configuration printed as\n{printed}\ndoes not parse: {e}"),
    }
});
