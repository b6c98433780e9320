//! Attribute generators on the wire, the adapter's side: each template's `InstanceMsg` to an
//! [`Instance`] (same rule as the other templates: a field at its proto3 default is left
//! out), and a [`Generated`] to the template's `OutputMsg`, the inverse of `mixer-oop`'s.
//!
//! An output the template does not declare, or of another type than declared, is the
//! adapter's bug: the call fails (INTERNAL) and says which, rather than the mixer binding a
//! value the adapter did not mean.

use mixer_adapter_api::Generated;
use mixer_model::{HeaderOp, Instance, Template, Value};
use mixer_proto::adapter::template::kubernetes;
use mixer_proto::istio::mixer::v1 as mixer_v1;
use mixer_proto::istio::policy::v1beta1 as policy;
use mixer_proto::{apikey, jwt};
use std::collections::HashMap;
use tonic::Status;

use super::{Fields, misfit, proto_duration, rpc_status};

/// `kubernetes`: the pods' uids and IPs, the destination port.
pub(crate) fn kubernetes(i: Option<kubernetes::InstanceMsg>) -> Result<Instance, Status> {
    let i = i.unwrap_or_default();
    let mut f = Fields::new(Template::Kubernetes);
    let read = |f: &mut Fields| -> Result<(), String> {
        f.text("source_uid", i.source_uid.clone());
        f.ip("source_ip", i.source_ip.as_ref())?;
        f.text("destination_uid", i.destination_uid.clone());
        f.ip("destination_ip", i.destination_ip.as_ref())?;
        f.int("destination_port", i.destination_port);
        Ok(())
    };
    read(&mut f).map_err(|why| misfit(Template::Kubernetes, why))?;
    Ok(f.instance(i.name))
}

/// `jwt`: the token and the cookie header.
pub(crate) fn jwt(i: Option<jwt::InstanceMsg>) -> Instance {
    let i = i.unwrap_or_default();
    let mut f = Fields::new(Template::Jwt);
    f.text("token", i.token);
    f.text("cookie", i.cookie);
    f.instance(i.name)
}

/// `apikey`: the key.
pub(crate) fn apikey(i: Option<apikey::InstanceMsg>) -> Instance {
    let i = i.unwrap_or_default();
    let mut f = Fields::new(Template::ApiKey);
    f.text("key", i.key);
    f.instance(i.name)
}

/// A generator's outputs, checked against its template's declared ones and taken by name.
struct Outputs {
    template: Template,
    by_name: HashMap<&'static str, Value>,
}

impl Outputs {
    fn of(template: Template, g: &Generated) -> Result<Outputs, Status> {
        let mut by_name = HashMap::with_capacity(g.outputs.len());
        for (name, value) in &g.outputs {
            let Some(spec) = template.output(name) else {
                return Err(Status::internal(format!(
                    "the adapter answered {template} output {name:?}, which the template does not declare"
                )));
            };
            if let mixer_model::FieldKind::Value(Some(ty)) = spec.kind
                && value.value_type() != ty
            {
                return Err(Status::internal(format!(
                    "the adapter answered {template} output {name} as a {}, declared {ty}",
                    value.value_type()
                )));
            }
            by_name.insert(spec.name, value.clone());
        }
        Ok(Outputs { template, by_name })
    }

    fn text(&mut self, name: &str) -> String {
        debug_assert!(self.template.output(name).is_some(), "{name}");
        match self.by_name.remove(name) {
            Some(v) => v.as_str().unwrap_or_default().to_owned(),
            None => String::new(),
        }
    }

    fn map(&mut self, name: &str) -> HashMap<String, String> {
        match self.by_name.remove(name) {
            Some(Value::StringMap(m)) => m
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            _ => HashMap::new(),
        }
    }

    fn ip(&mut self, name: &str) -> Option<policy::IpAddress> {
        match self.by_name.remove(name) {
            Some(Value::IpAddress(std::net::IpAddr::V4(v4))) => Some(policy::IpAddress {
                value: v4.octets().to_vec(),
            }),
            Some(Value::IpAddress(std::net::IpAddr::V6(v6))) => Some(policy::IpAddress {
                value: v6.octets().to_vec(),
            }),
            _ => None,
        }
    }

    fn time(&mut self, name: &str) -> Option<policy::TimeStamp> {
        match self.by_name.remove(name) {
            Some(Value::Timestamp(t)) => Some(policy::TimeStamp {
                value: Some(prost_types::Timestamp {
                    seconds: t.0.div_euclid(1_000_000_000),
                    nanos: i32::try_from(t.0.rem_euclid(1_000_000_000)).unwrap_or(0),
                }),
            }),
            _ => None,
        }
    }
}

/// What our own output messages carry past the outputs: validity, and a denial.
struct Verdict {
    valid_duration: Option<prost_types::Duration>,
    status: Option<mixer_proto::google::rpc::Status>,
    response_header_operations: Vec<mixer_v1::HeaderOperation>,
}

fn verdict(g: &Generated) -> Verdict {
    let (status, response_header_operations) = match &g.denial {
        None => (None, Vec::new()),
        Some(d) => (
            Some(rpc_status(d.status.code as i32, &d.status.message)),
            d.response_headers
                .iter()
                .map(|h| mixer_v1::HeaderOperation {
                    name: h.name.clone(),
                    value: h.value.clone(),
                    operation: match h.op {
                        HeaderOp::Replace => mixer_v1::header_operation::Operation::Replace,
                        HeaderOp::Append => mixer_v1::header_operation::Operation::Append,
                        HeaderOp::Remove => mixer_v1::header_operation::Operation::Remove,
                    } as i32,
                })
                .collect(),
        ),
    };
    Verdict {
        valid_duration: g.valid_duration.map(proto_duration),
        status,
        response_header_operations,
    }
}

/// A `kubernetes` answer on the wire. Istio's message has no room for a validity or a
/// denial: the kubernetesenv lookup never denies, and its answers are as good as its cache.
pub(crate) fn kubernetes_output(g: &Generated) -> Result<kubernetes::OutputMsg, Status> {
    if g.denial.is_some() {
        return Err(Status::internal(
            "a kubernetes generator cannot deny: Istio's OutputMsg has no status",
        ));
    }
    let mut o = Outputs::of(Template::Kubernetes, g)?;
    Ok(kubernetes::OutputMsg {
        source_pod_uid: o.text("source_pod_uid"),
        source_pod_ip: o.ip("source_pod_ip"),
        source_pod_name: o.text("source_pod_name"),
        source_labels: o.map("source_labels"),
        source_namespace: o.text("source_namespace"),
        source_service_account_name: o.text("source_service_account_name"),
        source_host_ip: o.ip("source_host_ip"),
        source_workload_uid: o.text("source_workload_uid"),
        source_workload_name: o.text("source_workload_name"),
        source_workload_namespace: o.text("source_workload_namespace"),
        source_owner: o.text("source_owner"),
        destination_pod_uid: o.text("destination_pod_uid"),
        destination_pod_ip: o.ip("destination_pod_ip"),
        destination_pod_name: o.text("destination_pod_name"),
        destination_container_name: o.text("destination_container_name"),
        destination_labels: o.map("destination_labels"),
        destination_namespace: o.text("destination_namespace"),
        destination_service_account_name: o.text("destination_service_account_name"),
        destination_host_ip: o.ip("destination_host_ip"),
        destination_owner: o.text("destination_owner"),
        destination_workload_uid: o.text("destination_workload_uid"),
        destination_workload_name: o.text("destination_workload_name"),
        destination_workload_namespace: o.text("destination_workload_namespace"),
    })
}

/// A `jwt` answer on the wire.
pub(crate) fn jwt_output(g: &Generated) -> Result<jwt::OutputMsg, Status> {
    let mut o = Outputs::of(Template::Jwt, g)?;
    let v = verdict(g);
    Ok(jwt::OutputMsg {
        principal: o.text("principal"),
        issuer: o.text("issuer"),
        subject: o.text("subject"),
        audiences: o.text("audiences"),
        presenter: o.text("presenter"),
        claims: o.map("claims"),
        raw_claims: o.text("raw_claims"),
        expires_at: o.time("expires_at"),
        valid_duration: v.valid_duration,
        status: v.status,
        response_header_operations: v.response_header_operations,
    })
}

/// An `apikey` answer on the wire.
pub(crate) fn apikey_output(g: &Generated) -> Result<apikey::OutputMsg, Status> {
    let mut o = Outputs::of(Template::ApiKey, g)?;
    let v = verdict(g);
    Ok(apikey::OutputMsg {
        principal: o.text("principal"),
        claims: o.map("claims"),
        valid_duration: v.valid_duration,
        status: v.status,
        response_header_operations: v.response_header_operations,
    })
}
