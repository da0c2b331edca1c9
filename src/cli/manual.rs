//! `completions SHELL` and `man --out DIR`: the shell completions and man pages a package installs, generated from
//! the flags themselves (clap_complete, clap_mangen), so that they never drift from `--help`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in: bash, zsh, fish, elvish or powershell. For bash, install the output as
    /// /usr/share/bash-completion/completions/quota-ledger; for zsh, as `_quota-ledger` in a directory of `$fpath`.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The directory the pages are written into (created when missing): `quota-ledger.1` and one page per subcommand,
    /// `quota-ledger-serve.1`, `quota-ledger-policy-set.1`, ... (install them under /usr/share/man/man1).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Prints the completion script of `command` for the shell asked.
pub fn completions(mut command: clap::Command, args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "quota-ledger", &mut script);
    if args.shell == clap_complete::Shell::Bash {
        // clap_complete's bash script spells a subcommand's state two ways when the binary's name has a hyphen
        // (`quota__ledger__subcmd__serve` where it is set, `quota__subcmd__ledger__subcmd__serve` where it is matched:
        // clap issue 6421), so no subcommand's flags would ever complete. One spelling, the one that is set.
        script = String::from_utf8(script)?.replace("quota__subcmd__ledger", "quota__ledger").into_bytes();
    }
    let mut out = super::stdout();
    out.write_all(&script)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the man pages of `command` and its subcommands into `--out`, and says how many.
pub fn man(command: clap::Command, args: ManArgs) -> anyhow::Result<ExitCode> {
    let out = &args.out;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    clap_mangen::generate_to(command, out).with_context(|| format!("cannot write man pages into {}", out.display()))?;
    let pages = std::fs::read_dir(out)?.filter_map(Result::ok).filter(|e| e.path().extension() == Some("1".as_ref()));
    writeln!(super::stdout(), "{} man pages in {}", pages.count(), out.display())?;
    Ok(ExitCode::SUCCESS)
}
