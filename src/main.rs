//! The `sfb` command: the command line of [`sfb_cli::App`] with the built-in models.

fn main() -> std::process::ExitCode {
    sfb_cli::App::new("sfb").main()
}
