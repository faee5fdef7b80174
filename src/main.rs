use clap::Parser;

fn main() {
    let cli = agx::cli::Cli::parse();
    if let Err(e) = agx::cli::run(cli) {
        eprintln!("agx: {e}");
        std::process::exit(1);
    }
}
