//! The docs as tests read them: the book's pages (`docs/src`) and the READMEs, their
//! sections and code blocks, so that a test types the commands and uses the files a page
//! shows, as a reader would: in a [`Shell`], the page's example hosts and `…` placeholders
//! replaced by the test's own ([`substitute`]).
//!
//! A test types an `sh` block it fetches with [`block_starting`], the page and the block's
//! first line as literal strings: the end-to-end test
//! `every_sh_block_in_the_docs_is_typed_by_a_test` finds them so in the tests' sources.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// The text of `path`, relative to the repository root (`docs/src/operators/aws.md`).
pub fn page(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|err| panic!("cannot read {path}: {err}"))
}

/// The part of `text` under the heading line `heading` (`## IAM policy`), up to the next
/// heading of its level or above.
pub fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = text
        .lines()
        .scan(0, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| *line == heading)
        .map(|(at, line)| at + line.len() + 1)
        .unwrap_or_else(|| panic!("no heading {heading:?}"));
    let rest = &text[start.min(text.len())..];
    let mut in_code = false;
    let mut offset = 0;
    for line in rest.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !in_code && (1..=level).contains(&hashes) && line[hashes..].starts_with(' ') {
            return &rest[..offset];
        }
        offset += line.len() + 1;
    }
    rest
}

/// The code blocks of `text` fenced as `lang` (```` ```yaml ````), in order.
pub fn blocks<'a>(text: &'a str, lang: &str) -> Vec<&'a str> {
    let fence = format!("```{lang}\n");
    text.split(fence.as_str())
        .skip(1)
        .filter_map(|block| block.split_once("\n```").map(|(block, _)| block))
        .collect()
}

/// The first code block of `text` fenced as `lang`.
pub fn first_block(text: &str, lang: &str) -> String {
    let block = blocks(text, lang)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no {lang} block"));
    format!("{block}\n")
}

/// The one code block fenced as `lang` in the page at `path` that starts with `first_line`.
pub fn block_starting(path: &str, lang: &str, first_line: &str) -> String {
    let text = page(path);
    let found: Vec<&str> = blocks(&text, lang)
        .into_iter()
        .filter(|block| block.starts_with(first_line))
        .collect();
    match found.as_slice() {
        [block] => format!("{block}\n"),
        [] => panic!("{path} shows no {lang} block starting {first_line:?}"),
        many => panic!(
            "{path} shows {} {lang} blocks starting {first_line:?}: give more of the line",
            many.len()
        ),
    }
}

/// The commands of an `sh` block, one an entry, as `sh` reads them: a line ending in `\`
/// goes on with the next (both kept as typed), and comment and blank lines are left out.
/// Panics on a here-document, whose lines are no commands.
pub fn commands(block: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut command = String::new();
    for line in block.lines() {
        assert!(
            !line.contains("<<"),
            "a here-document: type its block whole ({line})"
        );
        let blank = line.trim().is_empty() || line.trim_start().starts_with('#');
        if command.is_empty() && blank {
            continue;
        }
        command.push_str(line);
        if line.ends_with('\\') {
            command.push('\n');
        } else {
            commands.push(std::mem::take(&mut command));
        }
    }
    assert!(command.is_empty(), "the block ends in a `\\`: {block}");
    commands
}

/// `text` with each of `pairs`, (the page's example, the test's own), replaced in turn: a
/// page's example hosts, paths and `…` placeholders by what the test runs. Panics when an
/// example is not in the text, so that a page changing its example fails the test typing it
/// rather than being typed with the example left in.
pub fn substitute(text: &str, pairs: &[(&str, &str)]) -> String {
    pairs.iter().fold(text.to_string(), |text, (example, own)| {
        assert!(
            text.contains(example),
            "the page no longer shows {example:?} in:\n{text}"
        );
        text.replace(example, own)
    })
}

/// A reader's terminal: `sh` in a directory of its own, which is also its `HOME` (so a
/// test writes `~/.docker/config.json` or `~/.kube/config` there, and `wasm-ccm` keeps its
/// cache in `~/.cache`; no `XDG_*_HOME` is passed on), with `wasm-ccm` and
/// `cloud-sim` first on its `PATH` and what the test [`Shell::link`]s beside them.
pub struct Shell {
    home: tempfile::TempDir,
    bin: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Default for Shell {
    fn default() -> Shell {
        Shell::new()
    }
}

impl Shell {
    /// A shell in a new, empty directory.
    pub fn new() -> Shell {
        let shell = Shell {
            home: tempfile::tempdir().expect("a home directory"),
            bin: tempfile::tempdir().expect("a bin directory"),
            env: Vec::new(),
        };
        shell.link("wasm-ccm", &crate::wasm_ccm_binary());
        shell.link("cloud-sim", &crate::cloud_sim_binary());
        shell
    }

    /// Its directory and `HOME`, where commands run.
    pub fn dir(&self) -> &Path {
        self.home.path()
    }

    /// `dir()/name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    /// Put `program` on the `PATH` as `name`.
    pub fn link(&self, name: &str, program: &Path) {
        std::os::unix::fs::symlink(program, self.bin.path().join(name))
            .unwrap_or_else(|err| panic!("cannot put {} on the PATH: {err}", program.display()));
    }

    /// Set `name` in the environment of every later command.
    pub fn env(&mut self, name: &str, value: impl AsRef<OsStr>) -> &mut Shell {
        let value = value.as_ref().to_string_lossy().into_owned();
        self.env.retain(|(set, _)| set != name);
        self.env.push((name.to_string(), value));
        self
    }

    /// Trust `certificate` (PEM) for TLS, as a reader trusts a private CA: `SSL_CERT_FILE`
    /// (in place of the system's roots) names it.
    pub fn trust(&mut self, certificate: &str) -> &mut Shell {
        let file = self.bin.path().join("trusted.pem");
        std::fs::write(&file, certificate).expect("write the trusted certificate");
        self.env("SSL_CERT_FILE", file)
    }

    /// `program` with this shell's `PATH`, `HOME` and environment, in its directory, reading
    /// nothing from stdin; the runner's XDG directories and active venv are not passed on.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let path = format!(
            "{}:{}",
            self.bin.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut command = Command::new(program);
        command
            .current_dir(self.dir())
            .env("PATH", path)
            .env("HOME", self.dir())
            .env_remove("XDG_CACHE_HOME")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("VIRTUAL_ENV")
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null());
        command
    }

    /// `sh -c COMMAND`, as [`Shell::command`]: a block's lines run in turn, up to the first
    /// that fails (`set -e`), as a reader stops at the first error.
    pub fn sh(&self, command: &str) -> Command {
        let mut sh = self.command("sh");
        sh.arg("-c").arg(format!("set -e\n{command}"));
        sh
    }

    /// Run `command` to its end.
    pub fn run(&self, command: &str) -> Output {
        self.sh(command).output().expect("run sh")
    }

    /// Run `command`, which must succeed; what it printed on stdout.
    pub fn typed(&self, command: &str) -> String {
        let output = self.run(command);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{command}\nfailed ({}):\n{stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }

    /// Start `command`, one that runs until stopped (the manager), as the shell's own
    /// process (`exec`), so that a signal to the child reaches it; its stdout discarded, its
    /// errors on this process's stderr.
    pub fn spawn(&self, command: &str) -> Child {
        self.sh(&format!("exec {command}"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start sh")
    }
}
