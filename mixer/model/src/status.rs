//! Status codes (google.rpc.Code) and statuses carried by verdicts.

use std::fmt;

/// The canonical status codes shared by gRPC, google.rpc and Istio's Mixer API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(i32)]
pub enum Code {
    /// Success.
    #[default]
    Ok = 0,
    /// Cancelled by the caller.
    Cancelled = 1,
    /// Unknown error.
    Unknown = 2,
    /// Bad argument.
    InvalidArgument = 3,
    /// Deadline passed.
    DeadlineExceeded = 4,
    /// Not found.
    NotFound = 5,
    /// Already exists.
    AlreadyExists = 6,
    /// Caller is not allowed.
    PermissionDenied = 7,
    /// Quota or rate limit exhausted.
    ResourceExhausted = 8,
    /// System not in a state for the operation.
    FailedPrecondition = 9,
    /// Aborted.
    Aborted = 10,
    /// Out of range.
    OutOfRange = 11,
    /// Not implemented.
    Unimplemented = 12,
    /// Internal error.
    Internal = 13,
    /// Service unavailable; retry may help.
    Unavailable = 14,
    /// Data loss.
    DataLoss = 15,
    /// Caller is not authenticated.
    Unauthenticated = 16,
}

impl Code {
    /// Every code, by number.
    pub const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code for a number; numbers outside 0..=16 are `Unknown`.
    pub fn from_i32(n: i32) -> Code {
        usize::try_from(n)
            .ok()
            .and_then(|i| Code::ALL.get(i).copied())
            .unwrap_or(Code::Unknown)
    }

    /// The upper-case name (`PERMISSION_DENIED`).
    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// Parses a name (`PERMISSION_DENIED`) or a number (`7`).
    pub fn parse(text: &str) -> Option<Code> {
        if let Ok(n) = text.parse::<i32>() {
            return (0..=16).contains(&n).then(|| Code::from_i32(n));
        }
        Code::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(text))
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A status: a code and a message for people.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Status {
    /// The code.
    pub code: Code,
    /// Why, for people; empty for OK.
    pub message: String,
}

impl Status {
    /// The OK status.
    pub const OK: Status = Status {
        code: Code::Ok,
        message: String::new(),
    };

    /// A status with a code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
        }
    }

    /// True when the code is OK.
    pub fn is_ok(&self) -> bool {
        self.code == Code::Ok
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code)
        } else {
            write!(f, "{}: {}", self.code, self.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for (i, c) in Code::ALL.iter().enumerate() {
            assert_eq!(Code::from_i32(i as i32), *c);
            assert_eq!(Code::parse(c.name()), Some(*c));
        }
        assert_eq!(Code::from_i32(99), Code::Unknown);
        assert_eq!(Code::parse("7"), Some(Code::PermissionDenied));
        assert_eq!(Code::parse("42"), None);
        assert_eq!(Code::parse("NOPE"), None);
    }
}
