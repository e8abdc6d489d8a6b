//! The `imagegen` binary: parse the command line, run the command, print the error chain once,
//! and exit with the outcome's code: 0 success, 1 a check, build or test failed, 2 could not run
//! (bad input, daemon down), 130/143 stopped by SIGINT/SIGTERM. This is the only place that ends
//! the process.

use std::io::Write;

fn main() {
    let code = match imagegen::commands::parse() {
        Err(usage) => {
            // --help and --version land here too, with exit code 0.
            let _ = usage.print();
            usage.exit_code()
        }
        Ok(cli) => match imagegen::commands::run(cli) {
            Ok(outcome) => outcome.exit_code(),
            Err(error) => {
                // A closed standard error leaves only the exit code to tell.
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "error: {}",
                    imagegen::commands::describe(&error)
                );
                2
            }
        },
    };
    std::process::exit(code);
}
