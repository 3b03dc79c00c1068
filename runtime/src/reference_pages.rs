//! The docs' reference pages that the code defines, generated here and compared with the
//! committed pages: `docs/src/operators/flags.md` from the command line's definition (clap's
//! model of [`Cli`], every command and flag with its value, default and help) and
//! `docs/src/operators/cloudprovider-fields.md` from the CloudProvider CRD's schema (every
//! field with its type and description). A change to a flag or a field that leaves its page
//! behind fails here; the page as it should be is written to `target/tmp/` to copy over.

use std::fmt::Write as _;

use clap::CommandFactory;
use serde_json::Value;

use crate::cli::Cli;

/// The flags page.
fn flags_page() -> String {
    let mut out = String::from(
        "# Flags reference\n\n\
         Every command and flag of `wasm-ccm`, as `wasm-ccm --help` and `wasm-ccm provider \
         COMMAND --help` print them, generated from the same definition (a test fails when \
         this page and the code differ). Durations take `ms`, `s`, `m` and `h`, combined as in \
         `1m30s` (a number needs a unit; `0` alone is taken where a flag says what it means); \
         sizes are bytes or `Ki`, `Mi`, `Gi` (`8Mi`), and nothing else (`64MB` and `64M` are \
         refused). `CloudProvider` fields take the same forms. [Running the manager](running.md) \
         says how the run mode's flags work together.\n",
    );
    command_section(&Cli::command(), "wasm-ccm", &mut out);
    out
}

/// `command`'s section (named `path`), then its subcommands'.
fn command_section(command: &clap::Command, path: &str, out: &mut String) {
    let _ = write!(out, "\n## `{path}`\n\n");
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        let _ = writeln!(out, "{}\n", one_line(&about.to_string()));
    }
    let arguments: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set() && !["help", "version"].contains(&arg.get_id().as_str()))
        .collect();
    if !arguments.is_empty() {
        out.push_str("| flag | default | |\n|---|---|---|\n");
    }
    for arg in arguments {
        // A switch (`--no-cache`) takes no value, though clap names one for it.
        let values: Vec<String> = match arg.get_action().takes_values() {
            true => arg.get_value_names().unwrap_or_default().to_vec(),
            false => Vec::new(),
        }
        .iter()
        .map(|name| name.to_string())
        .collect();
        let name = match arg.get_long() {
            Some(long) if values.is_empty() => format!("`--{long}`"),
            Some(long) => format!("`--{long} {}`", values.join(" ")),
            None => format!("`{}`", arg.get_id().as_str().to_uppercase()),
        };
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|value| format!("`{}`", value.to_string_lossy()))
            .collect();
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|help| one_line(&help.to_string()))
            .unwrap_or_default();
        let _ = writeln!(out, "| {name} | {} | {help} |", defaults.join(", "));
    }
    for sub in command
        .get_subcommands()
        .filter(|sub| sub.get_name() != "help")
    {
        command_section(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

/// The CloudProvider fields page.
fn cloudprovider_fields_page() -> String {
    let crd: Value = yaml_value(&crate::resource::crd_yaml());
    let version = &crd["spec"]["versions"][0];
    let schema = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let mut out = format!(
        "# CloudProvider fields\n\n\
         Every field of a `CloudProvider`'s spec ({}/{}), as the CRD the manager ships defines \
         it (`wasm-ccm crd`), generated from the same types (a test fails when this page and \
         the code differ). [The CloudProvider resource](cloudprovider.md) says how they work \
         together; the manager's flags are the defaults where a field is not set.\n\n\
         | field | type | |\n|---|---|---|\n",
        crd["spec"]["group"].as_str().unwrap_or_default(),
        version["name"].as_str().unwrap_or_default(),
    );
    fields("spec", schema, &mut out);
    out
}

/// A row for `path` and one for each field under it.
fn fields(path: &str, schema: &Value, out: &mut String) {
    let items = &schema["items"];
    let kind = match schema["type"].as_str() {
        Some("array") => format!("list of {}", items["type"].as_str().unwrap_or("object")),
        Some(kind) => kind.to_string(),
        None if schema.get("x-kubernetes-int-or-string").is_some() => "int or string".into(),
        None => "any".into(),
    };
    let description = schema["description"]
        .as_str()
        .map(one_line)
        .unwrap_or_default();
    if path != "spec" {
        let _ = writeln!(out, "| `{path}` | {kind} | {description} |");
    }
    let (properties, prefix) = match schema["type"].as_str() {
        Some("array") => (&items["properties"], format!("{path}[]")),
        _ => (&schema["properties"], path.to_string()),
    };
    if let Some(properties) = properties.as_object() {
        for (name, property) in properties {
            fields(&format!("{prefix}.{name}"), property, out);
        }
    }
}

/// `yaml` read as JSON's data model.
pub(crate) fn yaml_value(yaml: &str) -> Value {
    serde_saphyr::from_str(yaml).expect("the CRD is YAML")
}

/// `text` on one line, safe in a table cell.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// Compare the page at `docs/src/operators/NAME` with `generated`; on a difference, write the
/// generated one to `target/tmp/NAME` and fail.
fn check(name: &str, generated: &str) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let page = format!("{root}/docs/src/operators/{name}");
    let committed = std::fs::read_to_string(&page).unwrap_or_default();
    if committed != generated {
        let out = format!("{root}/target/tmp/{name}");
        std::fs::create_dir_all(format!("{root}/target/tmp")).expect("target/tmp");
        std::fs::write(&out, generated).expect("write the generated page");
        panic!("{page} differs from the code's definition: the page as generated is {out}");
    }
}

#[test]
fn the_flags_page_says_what_the_command_line_defines() {
    check("flags.md", &flags_page());
}

#[test]
fn the_cloudprovider_fields_page_says_what_the_crd_defines() {
    check("cloudprovider-fields.md", &cloudprovider_fields_page());
}
