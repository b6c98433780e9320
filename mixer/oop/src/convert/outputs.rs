//! Attribute generators on the wire: their instances as `InstanceMsg`, and the `OutputMsg`
//! an adapter answers as [`Generated`].
//!
//! An output field at its proto3 default (an empty string or map, an unset IP address or
//! time) is left out, so that its binding takes its default. Istio 1.4 did the same: its
//! remote handler decoded the `OutputMsg` into a bag that held only the fields on the wire,
//! and proto3 never puts a zero value there; its built-in adapters' outputs were read
//! through `WasSet`. A field that has no model value (an IP address of 3 bytes, a time out
//! of range) makes the whole answer an invalid response: a half-read identity must not
//! reach the rules.

use std::collections::HashMap;
use std::sync::Arc;

use mixer_adapter_api::{AdapterError, Denial, ErrorKind, Generated};
use mixer_model::{
    ApiKeyInstance, Code, HeaderOp, HeaderOperation, JwtInstance, KubernetesInstance, StringMap,
    Template, Timestamp, Value,
};
use mixer_proto::adapter::template::kubernetes;
use mixer_proto::istio::mixer::v1 as mixer_v1;
use mixer_proto::istio::policy::v1beta1 as policy;
use mixer_proto::{apikey, jwt};

use super::{ip, std_duration, text};

/// `adapter.template.kubernetes.InstanceMsg`.
pub fn kubernetes(i: &KubernetesInstance<'_>) -> kubernetes::InstanceMsg {
    kubernetes::InstanceMsg {
        name: i.name.to_owned(),
        source_uid: text(i.source_uid),
        source_ip: ip(i.source_ip),
        destination_uid: text(i.destination_uid),
        destination_ip: ip(i.destination_ip),
        destination_port: i.destination_port.unwrap_or(0),
    }
}

/// `jwt.InstanceMsg`.
pub fn jwt(i: &JwtInstance<'_>) -> jwt::InstanceMsg {
    jwt::InstanceMsg {
        name: i.name.to_owned(),
        token: text(i.token),
        cookie: text(i.cookie),
    }
}

/// `apikey.InstanceMsg`.
pub fn apikey(i: &ApiKeyInstance<'_>) -> apikey::InstanceMsg {
    apikey::InstanceMsg {
        name: i.name.to_owned(),
        key: text(i.key),
    }
}

/// The outputs read so far, in the order the message declares them.
struct Outputs {
    template: Template,
    outputs: Vec<(&'static str, Value)>,
}

impl Outputs {
    fn new(template: Template) -> Outputs {
        Outputs {
            template,
            outputs: Vec::with_capacity(template.outputs().len()),
        }
    }

    fn text(&mut self, name: &'static str, s: String) {
        if !s.is_empty() {
            self.outputs.push((name, Value::String(s.into())));
        }
    }

    fn map(&mut self, name: &'static str, m: HashMap<String, String>) {
        if !m.is_empty() {
            let map = StringMap::from_pairs(m);
            self.outputs.push((name, Value::StringMap(Arc::new(map))));
        }
    }

    fn ip(&mut self, name: &'static str, ip: Option<policy::IpAddress>) -> Result<(), String> {
        let Some(ip) = ip.filter(|ip| !ip.value.is_empty()) else {
            return Ok(());
        };
        let addr = if let Ok(v4) = <[u8; 4]>::try_from(ip.value.as_slice()) {
            std::net::IpAddr::from(v4)
        } else if let Ok(v6) = <[u8; 16]>::try_from(ip.value.as_slice()) {
            std::net::IpAddr::from(v6)
        } else {
            return Err(format!("{name}: an IP address of {} bytes", ip.value.len()));
        };
        self.outputs.push((name, Value::IpAddress(addr)));
        Ok(())
    }

    fn time(&mut self, name: &'static str, t: Option<policy::TimeStamp>) -> Result<(), String> {
        let Some(t) = t.and_then(|t| t.value) else {
            return Ok(());
        };
        let at = Timestamp::from_parts(t.seconds, t.nanos).ok_or_else(|| {
            format!(
                "{name}: the time {}s {}ns after the epoch is out of range",
                t.seconds, t.nanos
            )
        })?;
        self.outputs.push((name, Value::Timestamp(at)));
        Ok(())
    }

    /// The answer, with what our own output messages carry past the outputs.
    fn generated(
        self,
        valid_duration: Option<prost_types::Duration>,
        status: Option<mixer_proto::google::rpc::Status>,
        headers: &[mixer_v1::HeaderOperation],
    ) -> Generated {
        let status = super::status(status.as_ref());
        let denial = (status.code != Code::Ok).then(|| Denial {
            status,
            response_headers: headers.iter().map(header).collect(),
        });
        debug_assert!(
            self.outputs
                .iter()
                .all(|(n, _)| self.template.output(n).is_some())
        );
        Generated {
            outputs: self.outputs,
            valid_duration: std_duration(valid_duration.as_ref()),
            denial,
        }
    }
}

fn header(h: &mixer_v1::HeaderOperation) -> HeaderOperation {
    use mixer_v1::header_operation::Operation;
    HeaderOperation {
        name: h.name.clone(),
        value: h.value.clone(),
        op: match Operation::try_from(h.operation) {
            Ok(Operation::Remove) => HeaderOp::Remove,
            Ok(Operation::Append) => HeaderOp::Append,
            // REPLACE, and a number from a later protocol read as the plainest operation.
            Ok(Operation::Replace) | Err(_) => HeaderOp::Replace,
        },
    }
}

fn invalid(template: Template, why: String) -> AdapterError {
    AdapterError::permanent(
        ErrorKind::InvalidResponse,
        format!("the adapter's {template} output: {why}"),
    )
}

/// A `kubernetes` answer. Istio's message has no validity and no denial.
pub fn kubernetes_generated(o: kubernetes::OutputMsg) -> Result<Generated, AdapterError> {
    let mut out = Outputs::new(Template::Kubernetes);
    let read = |out: &mut Outputs| -> Result<(), String> {
        out.text("source_pod_uid", o.source_pod_uid);
        out.ip("source_pod_ip", o.source_pod_ip)?;
        out.text("source_pod_name", o.source_pod_name);
        out.map("source_labels", o.source_labels);
        out.text("source_namespace", o.source_namespace);
        out.text("source_service_account_name", o.source_service_account_name);
        out.ip("source_host_ip", o.source_host_ip)?;
        out.text("source_workload_uid", o.source_workload_uid);
        out.text("source_workload_name", o.source_workload_name);
        out.text("source_workload_namespace", o.source_workload_namespace);
        out.text("source_owner", o.source_owner);
        out.text("destination_pod_uid", o.destination_pod_uid);
        out.ip("destination_pod_ip", o.destination_pod_ip)?;
        out.text("destination_pod_name", o.destination_pod_name);
        out.text("destination_container_name", o.destination_container_name);
        out.map("destination_labels", o.destination_labels);
        out.text("destination_namespace", o.destination_namespace);
        out.text(
            "destination_service_account_name",
            o.destination_service_account_name,
        );
        out.ip("destination_host_ip", o.destination_host_ip)?;
        out.text("destination_owner", o.destination_owner);
        out.text("destination_workload_uid", o.destination_workload_uid);
        out.text("destination_workload_name", o.destination_workload_name);
        out.text(
            "destination_workload_namespace",
            o.destination_workload_namespace,
        );
        Ok(())
    };
    read(&mut out).map_err(|why| invalid(Template::Kubernetes, why))?;
    Ok(out.generated(None, None, &[]))
}

/// A `jwt` answer.
pub fn jwt_generated(o: jwt::OutputMsg) -> Result<Generated, AdapterError> {
    let mut out = Outputs::new(Template::Jwt);
    out.text("principal", o.principal);
    out.text("issuer", o.issuer);
    out.text("subject", o.subject);
    out.text("audiences", o.audiences);
    out.text("presenter", o.presenter);
    out.map("claims", o.claims);
    out.text("raw_claims", o.raw_claims);
    out.time("expires_at", o.expires_at)
        .map_err(|why| invalid(Template::Jwt, why))?;
    Ok(out.generated(o.valid_duration, o.status, &o.response_header_operations))
}

/// An `apikey` answer.
pub fn apikey_generated(o: apikey::OutputMsg) -> Result<Generated, AdapterError> {
    let mut out = Outputs::new(Template::ApiKey);
    out.text("principal", o.principal);
    out.map("claims", o.claims);
    Ok(out.generated(o.valid_duration, o.status, &o.response_header_operations))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_outputs_are_left_out_so_their_bindings_default() {
        let g = kubernetes_generated(kubernetes::OutputMsg {
            source_workload_name: "reviews-v1".into(),
            source_pod_ip: Some(policy::IpAddress {
                value: vec![10, 0, 0, 7],
            }),
            destination_pod_ip: Some(policy::IpAddress { value: vec![] }),
            source_labels: [("app".to_owned(), "reviews".to_owned())].into(),
            ..Default::default()
        })
        .expect("converts");
        let names: Vec<&str> = g.outputs.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            ["source_pod_ip", "source_labels", "source_workload_name"]
        );
        assert_eq!(g.denial, None);
        assert_eq!(g.valid_duration, None);
    }

    #[test]
    fn an_output_without_a_model_value_fails_the_whole_answer() {
        let e = kubernetes_generated(kubernetes::OutputMsg {
            source_workload_name: "reviews-v1".into(),
            source_host_ip: Some(policy::IpAddress {
                value: vec![10, 0, 0],
            }),
            ..Default::default()
        })
        .expect_err("3 bytes are no IP address");
        assert_eq!(e.kind, ErrorKind::InvalidResponse);
        assert!(e.message.contains("source_host_ip"), "{e}");
    }

    #[test]
    fn a_status_other_than_ok_is_a_denial_with_its_headers() {
        let g = jwt_generated(jwt::OutputMsg {
            status: Some(mixer_proto::google::rpc::Status {
                code: Code::Unauthenticated as i32,
                message: "token expired".into(),
                details: vec![],
            }),
            response_header_operations: vec![mixer_v1::HeaderOperation {
                name: "www-authenticate".into(),
                value: "Bearer error=\"invalid_token\"".into(),
                operation: 0,
            }],
            valid_duration: Some(prost_types::Duration {
                seconds: 30,
                nanos: 0,
            }),
            ..Default::default()
        })
        .expect("converts");
        let denial = g.denial.expect("denied");
        assert_eq!(denial.status.code, Code::Unauthenticated);
        assert_eq!(denial.response_headers[0].op, HeaderOp::Replace);
        assert_eq!(g.valid_duration, Some(std::time::Duration::from_secs(30)));
        let ok = apikey_generated(apikey::OutputMsg {
            principal: "team-a".into(),
            status: Some(mixer_proto::google::rpc::Status::default()),
            ..Default::default()
        })
        .expect("converts");
        assert_eq!(ok.denial, None);
        assert_eq!(ok.outputs, vec![("principal", Value::from("team-a"))]);
    }
}
