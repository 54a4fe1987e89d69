//! [`Args`]: the arguments of one subcommand — flags (`--json`), values (`--seed 7` or
//! `--seed=7`) and positionals — taken one by one; whatever is left over is an error.

/// The arguments after a subcommand's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    rest: Vec<String>,
}

impl Args {
    /// The arguments `rest`.
    pub fn new(rest: Vec<String>) -> Self {
        Args { rest }
    }

    /// Whether `--help` or `-h` was given.
    pub fn has_help(&self) -> bool {
        self.rest.iter().any(|a| a == "--help" || a == "-h")
    }

    /// Takes the flag `name` (e.g. `--json`); true when it was given.
    pub fn flag(&mut self, name: &str) -> bool {
        let before = self.rest.len();
        self.rest.retain(|a| a != name);
        self.rest.len() != before
    }

    /// Takes the value of `name`, given as `name value` or `name=value`.
    ///
    /// # Errors
    ///
    /// The flag is last, with no value after it.
    pub fn value(&mut self, name: &str) -> Result<Option<String>, String> {
        let prefix = format!("{name}=");
        if let Some(i) = self.rest.iter().position(|a| a.starts_with(&prefix)) {
            let a = self.rest.remove(i);
            return Ok(Some(a[prefix.len()..].to_string()));
        }
        let Some(i) = self.rest.iter().position(|a| a == name) else {
            return Ok(None);
        };
        if i + 1 >= self.rest.len() {
            return Err(format!("{name} needs a value after it"));
        }
        self.rest.remove(i);
        Ok(Some(self.rest.remove(i)))
    }

    /// Takes the value of `name` as a number.
    ///
    /// # Errors
    ///
    /// No value, or one that is not a whole number.
    pub fn number<T: std::str::FromStr>(&mut self, name: &str) -> Result<Option<T>, String> {
        match self.value(name)? {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| format!("{name} {v:?}: give a whole number")),
        }
    }

    /// Takes the first argument that is not a flag.
    pub fn positional(&mut self) -> Option<String> {
        let i = self.rest.iter().position(|a| !a.starts_with("--"))?;
        Some(self.rest.remove(i))
    }

    /// Checks nothing is left over.
    ///
    /// # Errors
    ///
    /// The arguments nobody took.
    pub fn finish(self) -> Result<(), String> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(format!("unexpected argument(s): {}", self.rest.join(" ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Args {
        Args::new(s.split_whitespace().map(String::from).collect())
    }

    #[test]
    fn flags_values_and_positionals_are_taken_once() {
        let mut a = args("default --json --seed 7 --cases=3 extra");
        assert!(a.flag("--json"));
        assert!(!a.flag("--json"));
        assert_eq!(a.number::<u64>("--seed"), Ok(Some(7)));
        assert_eq!(a.number::<usize>("--cases"), Ok(Some(3)));
        assert_eq!(a.positional().as_deref(), Some("default"));
        assert_eq!(
            a.clone().finish(),
            Err("unexpected argument(s): extra".into())
        );
        assert_eq!(a.positional().as_deref(), Some("extra"));
        assert_eq!(a.finish(), Ok(()));
        assert_eq!(
            args("--seed").value("--seed"),
            Err("--seed needs a value after it".into())
        );
        assert_eq!(
            args("--ops ten").number::<usize>("--ops"),
            Err("--ops \"ten\": give a whole number".into())
        );
    }
}
