//! What a handler's failure does to the request: the config's choice, the runtime's to apply.

/// What the mixer does for a request when a handler cannot decide (down, slow, garbage).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailPolicy {
    /// Let the request through.
    Open,
    /// Deny the request (UNAVAILABLE).
    Closed,
}

impl FailPolicy {
    /// Envoy's defaults: checks fail closed (ext_authz), quota fails open (rate limit).
    /// Attribute generators fail closed: a check must not go on without the identity a
    /// denial rule would have read.
    pub fn default_for(variety: mixer_model::Variety) -> FailPolicy {
        match variety {
            mixer_model::Variety::Quota | mixer_model::Variety::Report => FailPolicy::Open,
            mixer_model::Variety::Check | mixer_model::Variety::AttributeGenerator => {
                FailPolicy::Closed
            }
        }
    }
}
