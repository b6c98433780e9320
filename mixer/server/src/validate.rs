//! `mixer validate PATH`.

use std::path::Path;
use std::process::ExitCode;

use crate::ConfigArgs;

/// Validates the config at `path`, printing every error and warning; with `strict`, a
/// warning fails it too.
pub fn run(path: &Path, args: &ConfigArgs, strict: bool) -> ExitCode {
    let sources = match mixer_config::read_sources(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let options = mixer_config::ConfigOptions {
        config_root: config_root(path),
        ..config_options(args)
    };
    let registry = crate::adapters::builtin();
    // Out-of-process adapters judge their own params and say which templates they serve
    // in the same pass, as when `serve` loads the config.
    match mixer_config::validate(&sources, &registry, &options) {
        Ok(validated) => {
            for w in &validated.warnings {
                eprintln!("warning: {w}");
            }
            let c = &validated.config;
            // With --invalid-config skip: what `serve` would leave out, dependents included.
            for d in &c.dropped {
                println!("dropped: {d}");
            }
            let dropped = if c.dropped.is_empty() {
                String::new()
            } else {
                format!(", {} documents dropped", c.dropped.len())
            };
            println!(
                "{}: valid ({} files, {} handlers, {} instances, {} rules, {} warnings{dropped})",
                path.display(),
                sources.len(),
                c.handlers.len(),
                c.instances.len(),
                c.rules.len(),
                validated.warnings.len()
            );
            if strict && !validated.warnings.is_empty() {
                eprintln!(
                    "{}: {} warnings, refused with --strict",
                    path.display(),
                    validated.warnings.len()
                );
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            eprintln!("{}: {} errors", path.display(), errors.len());
            ExitCode::FAILURE
        }
    }
}

/// The directory the names of the sources read from `path` are relative to: `path` itself
/// for a directory, its parent for a file (`read_sources` names a lone file by its file
/// name).
pub fn config_root(path: &Path) -> Option<std::path::PathBuf> {
    if path.is_dir() {
        Some(path.to_path_buf())
    } else {
        Some(path.parent().unwrap_or(Path::new(".")).to_path_buf())
    }
}

/// Config options from the command line.
pub fn config_options(args: &ConfigArgs) -> mixer_config::ConfigOptions {
    mixer_config::ConfigOptions {
        default_namespace: args.default_namespace.clone(),
        invalid_config: match args.invalid_config {
            crate::InvalidConfigArg::Refuse => mixer_config::InvalidConfig::Refuse,
            crate::InvalidConfigArg::Skip => mixer_config::InvalidConfig::Skip,
        },
        ratelimit_backend: args.ratelimit_backend.clone(),
        allow_empty_files: args.allow_empty_config,
        ..mixer_config::ConfigOptions::default()
    }
}

/// Runtime options from the command line.
pub fn runtime_options(args: &ConfigArgs) -> mixer_runtime::RuntimeOptions {
    mixer_runtime::RuntimeOptions {
        match_error_policy: match args.match_errors {
            crate::MatchErrors::NoMatch => mixer_config::MatchErrorPolicy::NoMatch,
            crate::MatchErrors::Deny => mixer_config::MatchErrorPolicy::Deny,
        },
        cache: mixer_runtime::CacheOptions {
            max_entries: args.check_cache_size,
            ..mixer_runtime::CacheOptions::default()
        },
        reports: mixer_runtime::QueueOptions {
            max_records: args.report_queue_records,
            max_bytes: args.report_queue_megabytes.saturating_mul(1 << 20),
            batch_size: args.report_batch_size.max(1),
            batch_timeout: args.report_batch_timeout,
            max_age: args.report_max_age,
            overflow: match args.report_overflow {
                crate::OverflowArg::DropNewest => mixer_runtime::Overflow::DropNewest,
                crate::OverflowArg::DropOldest => mixer_runtime::Overflow::DropOldest,
            },
            ..mixer_runtime::QueueOptions::default()
        },
        // `mixer validate` and `mixer test` have no reports to run; `serve` sets its own.
        report_threads: 0,
        // Requests come only to `serve`, which sets its own.
        limits: mixer_runtime::RequestLimits::default(),
        handler_timeout: args.handler_timeout,
        // `serve --shared-cache` sets its own.
        shared_tier: None,
        // `serve --near-limit-ratio` sets its own.
        near_limit_ratio: mixer_runtime::ratelimit_stats::DEFAULT_NEAR_LIMIT_RATIO,
    }
}
