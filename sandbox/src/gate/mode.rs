//! [`GateMode`]: how strict the gate is (`EMM_GATE`).

use super::error::GateError;

/// The environment variable that relaxes the gate for development: `warn` or `allow-failed`
/// (unset or `enforce`: the gate holds).
pub const GATE_VAR: &str = "EMM_GATE";

/// How strict the gate is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GateMode {
    /// Only a plugin with a passing verdict at the minimum depth runs on hardware.
    #[default]
    Enforce,
    /// The quiet override (`EMM_GATE=warn`): an unchecked or shallowly checked plugin runs
    /// with a warning; one with a failed or edited record is still refused.
    Warn,
    /// The loud override (`EMM_GATE=allow-failed`): anything runs, with a warning that names
    /// the failed checks; for comparing a failing plugin on the simulator and on hardware.
    AllowFailed,
}

impl GateMode {
    /// The mode `value` (the value of [`GATE_VAR`]) names; unset or blank is `Enforce`.
    ///
    /// # Errors
    ///
    /// [`GateError::BadSetting`] for anything else, with the accepted values.
    pub fn parse(value: Option<&str>) -> Result<GateMode, GateError> {
        match value.map(str::trim).unwrap_or("") {
            "" | "enforce" => Ok(GateMode::Enforce),
            "warn" => Ok(GateMode::Warn),
            "allow-failed" => Ok(GateMode::AllowFailed),
            other => Err(GateError::BadSetting {
                variable: GATE_VAR,
                value: other.to_string(),
                reason: "give enforce (the default), warn (load unchecked plugins with a \
                         warning) or allow-failed (also load plugins that failed the contract)"
                    .to_string(),
            }),
        }
    }

    /// The value of [`GATE_VAR`] that selects it.
    pub fn as_str(self) -> &'static str {
        match self {
            GateMode::Enforce => "enforce",
            GateMode::Warn => "warn",
            GateMode::AllowFailed => "allow-failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_from_the_variable() {
        assert_eq!(GateMode::parse(None), Ok(GateMode::Enforce));
        assert_eq!(GateMode::parse(Some(" ")), Ok(GateMode::Enforce));
        assert_eq!(GateMode::parse(Some("warn")), Ok(GateMode::Warn));
        assert_eq!(
            GateMode::parse(Some("allow-failed")),
            Ok(GateMode::AllowFailed)
        );
        let e = GateMode::parse(Some("off")).unwrap_err().to_string();
        assert!(e.starts_with("EMM_GATE=\"off\": give enforce"), "{e}");
    }
}
