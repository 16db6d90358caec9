//! Neutral mirrors of the WIT records the Kling logic reads and produces, and the [`Host`]
//! trait standing for the host imports (`http`, `signing`, `config`, `log`). The components
//! convert their generated bindings to and from these; tests implement [`Host`] in memory.

/// A unit of the batch, as the Kling logic needs it (a subset of the WIT `unit`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitRef {
    pub id: String,
    /// Current stage (`video`; `voice` or `element`).
    pub stage: String,
    /// The spec `plan` produced (the resolved create body).
    pub spec: String,
    /// Handler-private state (avatar: `{"voice_id": …}` once the voice exists).
    pub state: String,
    /// The provider task id of the current stage, once recorded.
    pub job_id: Option<String>,
    /// Sent as `external_task_id`: unique per unit, stage and deliberate resubmission.
    pub idempotency_key: String,
    /// Marked submitted earlier without a recorded job id: look it up before submitting.
    pub in_doubt: bool,
    pub submitted_at_ms: Option<u64>,
    /// Result recorded at success (for `finalize`).
    pub result: Option<String>,
}

/// A provider error (code and message as Kling sent them, or what went wrong on the way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderError {
    pub code: Option<String>,
    pub message: String,
}

impl ProviderError {
    pub fn new(code: Option<&str>, message: impl Into<String>) -> ProviderError {
        ProviderError {
            code: code.map(String::from),
            message: message.into(),
        }
    }
}

/// The WIT `outcome` variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Accepted(String),
    Running(Option<u64>),
    Succeeded(String),
    NextStage(String),
    CapacityRejected(Option<u64>),
    RetryAfter {
        after_ms: Option<u64>,
        error: ProviderError,
    },
    Fail(ProviderError),
}

/// The WIT `change`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub unit_id: String,
    pub outcome: Outcome,
    pub state: Option<String>,
    pub cost: Option<String>,
}

/// The WIT `callback-change`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackChange {
    pub provider_job_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub outcome: Outcome,
    pub state: Option<String>,
    pub cost: Option<String>,
}

/// The WIT `plan-error`: the JSON path of the offending field and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError {
    pub field: Option<String>,
    pub message: String,
}

impl PlanError {
    pub fn at(field: impl Into<String>, message: impl Into<String>) -> PlanError {
        PlanError {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    pub fn whole(message: impl Into<String>) -> PlanError {
        PlanError {
            field: None,
            message: message.into(),
        }
    }
}

/// An outbound request (the WIT `http.request`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: &'static str,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    pub timeout_ms: Option<u32>,
}

/// An answer (the WIT `http.response`, headers dropped: Kling's answers do not need them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why a request got no answer (the WIT `http-error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// The host is not in the handler's `allowed_hosts`: a configuration mistake.
    Denied(String),
    /// Timed out: the request may or may not have taken effect.
    Timeout,
    /// The answer exceeded the host's size cap.
    TooLarge(u64),
    /// The request could not be made (bad URL): a configuration mistake.
    Invalid(String),
    /// Connection or protocol failure: the request may or may not have taken effect.
    Transport(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Denied(host) => {
                write!(f, "host {host} is not in this handler's allowed_hosts")
            }
            HttpError::Timeout => f.write_str("request timed out"),
            HttpError::TooLarge(n) => write!(f, "answer larger than the host's cap ({n} bytes)"),
            HttpError::Invalid(why) => write!(f, "invalid request: {why}"),
            HttpError::Transport(why) => write!(f, "transport error: {why}"),
        }
    }
}

/// What the Kling logic needs from the host. The components implement it over the WIT imports.
pub trait Host {
    /// Send requests concurrently; answers in the same order.
    fn send_batch(&self, requests: Vec<Request>) -> Vec<Result<Response, HttpError>>;
    /// HMAC-SHA256 keyed by the named secret (never readable by the guest).
    fn hmac_sha256(&self, secret: &str, data: &[u8]) -> Result<Vec<u8>, String>;
    /// A non-secret setting of this handler.
    fn config(&self, key: &str) -> Option<String>;
    /// Wall-clock Unix milliseconds of the guest (WASI clock), used only to re-sign after a
    /// 1003/1004 answer and to check webhook timestamps, where the tick's `now` is not enough.
    fn wall_clock_ms(&self) -> Option<u64>;
    /// A warning worth an operator's attention.
    fn warn(&self, message: &str);
}
