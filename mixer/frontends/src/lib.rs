//! Front ends: one module per protocol. Each turns its requests into an attribute bag for the
//! active snapshot, asks the runtime, and maps the verdict (or the failure to reach one) back
//! to its wire format.
//!
//! | module | protocol | address |
//! |---|---|---|
//! | [`forward_auth`] | HTTP forward-auth (nginx `auth_request`, Caddy `forward_auth`, Traefik `forwardAuth`) | `--http-addr` |

pub mod forward_auth;
