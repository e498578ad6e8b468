//! Prints the path of a test server binary, fetching it first if needed:
//! `redisync-server [NAME]` with NAME `system` or one of the known servers
//! (no NAME: the one the tests would use). Used by `scripts/compat`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let name = std::env::args().nth(1);
    let found = match name.as_deref() {
        None => redisync_testkit::server_binary(),
        Some("--list") => {
            println!("system");
            for n in redisync_testkit::known_servers() {
                println!("{n}");
            }
            return ExitCode::SUCCESS;
        }
        Some("system") => {
            std::env::set_var(redisync_testkit::TEST_SERVER_ENV, "system");
            redisync_testkit::server_binary()
        }
        Some(n) => redisync_testkit::named_server_binary(n),
    };
    match found {
        Ok(path) => {
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
