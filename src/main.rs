//! The `imagegen` binary: parse flags, run the command, print the error chain once, exit with
//! 0 (success), 1 (a check, build or test failed) or 2 (could not run: bad input, daemon down).

use clap::Parser;

fn main() {
    let cli = imagegen::cli::Cli::parse();
    let code = match imagegen::commands::run(cli) {
        Ok(outcome) => outcome.exit_code(),
        Err(error) => {
            eprintln!("error: {}", imagegen::commands::describe(&error));
            2
        }
    };
    std::process::exit(code);
}
