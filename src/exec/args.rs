//! What a call's `args` may be: each program's `args` policy and `args_pattern`, applied
//! before anything runs. Client arguments go to a program the operator chose, but options
//! are where programs hide "run this" (`find -exec`, `git -c`, `tar --to-command`), so by
//! default an argument may not look like one.

use regex_lite::Regex;

use crate::config::{ArgsPolicy, ProgramConfig};

/// Why a call's `args` were refused; shown to the model as the tool's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsRefused {
    /// `args = "none"` and the call gave some.
    #[error("program `{program}` takes no args (its policy is `args = \"none\"`)")]
    NoneAllowed {
        /// The program's name.
        program: String,
    },
    /// `args = "no-options"` and an argument begins with `-`.
    #[error(
        "program `{program}` takes no options: argument {arg:?} begins with `-` (its policy is `args = \"no-options\"`)"
    )]
    Option {
        /// The program's name.
        program: String,
        /// The argument refused.
        arg: String,
    },
    /// An argument does not match `args_pattern`.
    #[error("program `{program}`: argument {arg:?} does not match its args_pattern {pattern:?}")]
    Pattern {
        /// The program's name.
        program: String,
        /// The argument refused.
        arg: String,
        /// The pattern, as configured.
        pattern: String,
    },
}

/// One program's policy, prepared once (its pattern compiled).
#[derive(Debug, Clone)]
pub struct ArgsRule {
    policy: ArgsPolicy,
    /// The compiled pattern (`None`: it did not compile, and nothing matches) and its
    /// text.
    pattern: Option<(Option<Regex>, String)>,
    /// The configured command already ends with `--`: no second one is put in.
    separated: bool,
}

impl ArgsRule {
    /// From the program's entry. The pattern was checked at start-up; should it still not
    /// compile, every argument is refused rather than let through.
    pub fn new(program: &ProgramConfig) -> Self {
        let pattern = program
            .args_pattern
            .as_ref()
            .map(|text| (program.args_regex().ok().flatten(), text.clone()));
        Self {
            policy: program.args,
            pattern,
            separated: program.command.last().is_some_and(|last| last == "--"),
        }
    }

    /// The arguments to append to the configured command, or why `args` are refused.
    pub fn apply(&self, program: &str, args: Vec<String>) -> Result<Vec<String>, ArgsRefused> {
        if args.is_empty() {
            return Ok(args);
        }
        let refused = |arg: &String| ArgsRefused::Option {
            program: program.into(),
            arg: arg.chars().take(100).collect(),
        };
        match self.policy {
            ArgsPolicy::None => {
                return Err(ArgsRefused::NoneAllowed {
                    program: program.into(),
                });
            }
            ArgsPolicy::NoOptions => {
                if let Some(arg) = args.iter().find(|a| a.starts_with('-')) {
                    return Err(refused(arg));
                }
            }
            ArgsPolicy::AfterSeparator | ArgsPolicy::Any => {}
        }
        if let Some((regex, text)) = &self.pattern
            && let Some(arg) = args
                .iter()
                .find(|a| !regex.as_ref().is_some_and(|r| r.is_match(a)))
        {
            return Err(ArgsRefused::Pattern {
                program: program.into(),
                arg: arg.chars().take(100).collect(),
                pattern: text.clone(),
            });
        }
        if self.policy == ArgsPolicy::AfterSeparator && !self.separated {
            return Ok(std::iter::once("--".to_owned()).chain(args).collect());
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(tweak: impl FnOnce(&mut ProgramConfig)) -> ArgsRule {
        let mut program = ProgramConfig {
            command: vec!["/usr/bin/find".into(), ".".into()],
            ..ProgramConfig::default()
        };
        tweak(&mut program);
        ArgsRule::new(&program)
    }

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    // Issue 22, finding 3: client args steered configured programs (`find -exec`).
    #[test]
    fn options_are_refused_by_default_and_named() {
        let exec = strings(&["-exec", "/bin/sh", "-c", "id", ";"]);
        let err = rule(|_| {}).apply("find", exec.clone());
        assert!(
            matches!(&err, Err(ArgsRefused::Option { arg, .. }) if arg == "-exec"),
            "{err:?}"
        );
        let message = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("\"-exec\"") && message.contains("no-options"),
            "{message}"
        );
        assert_eq!(
            rule(|_| {}).apply("find", strings(&["src"])),
            Ok(strings(&["src"]))
        );
        assert_eq!(
            rule(|p| p.args = ArgsPolicy::Any).apply("find", exec.clone()),
            Ok(exec)
        );
    }

    #[test]
    fn none_refuses_any_arg_and_after_separator_puts_one_separator() {
        let none = rule(|p| p.args = ArgsPolicy::None);
        assert!(none.apply("find", strings(&["x"])).is_err());
        assert_eq!(none.apply("find", Vec::new()), Ok(Vec::new()));
        let after = rule(|p| p.args = ArgsPolicy::AfterSeparator);
        assert_eq!(
            after.apply("find", strings(&["-exec"])),
            Ok(strings(&["--", "-exec"]))
        );
        let already = rule(|p| {
            p.args = ArgsPolicy::AfterSeparator;
            p.command.push("--".into());
        });
        assert_eq!(
            already.apply("find", strings(&["-x"])),
            Ok(strings(&["-x"]))
        );
    }

    #[test]
    fn the_pattern_matches_whole_arguments() {
        let digits = rule(|p| p.args_pattern = Some("[0-9]+".into()));
        assert!(digits.apply("n", strings(&["12", "3"])).is_ok());
        let err = digits.apply("n", strings(&["12", "3; id"]));
        assert!(
            matches!(&err, Err(ArgsRefused::Pattern { arg, .. }) if arg == "3; id"),
            "{err:?}"
        );
        assert!(digits.apply("n", strings(&["a12"])).is_err());
    }
}
