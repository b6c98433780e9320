//! Synthetic clusters for the bench and the memory measurement: `apps` Deployments of
//! `replicas` pods each, spread over 10 namespaces, each pod shaped like the bookinfo
//! fixtures (labels, owner, two containers with ports, IPs).
#![allow(dead_code)]

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

/// The pods and ReplicaSets of `apps` Deployments of `replicas` pods.
pub fn cluster(apps: usize, replicas: usize) -> (Vec<Pod>, Vec<ReplicaSet>) {
    let mut pods = Vec::with_capacity(apps * replicas);
    let mut replicasets = Vec::with_capacity(apps);
    for app in 0..apps {
        let ns = format!("ns-{}", app % 10);
        let deploy = format!("app-{app}-v1");
        let rs = format!("{deploy}-5d8f7c9b6");
        replicasets.push(
            serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": rs, "namespace": ns, "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": deploy,
                     "uid": format!("d-{app}"), "controller": true, "blockOwnerDeletion": true}]}
            }))
            .unwrap(),
        );
        for r in 0..replicas {
            let n = app * replicas + r;
            let ip = format!("10.{}.{}.{}", 40 + n / 65536, (n / 256) % 256, n % 256);
            pods.push(
                serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {
                        "name": format!("{rs}-pod{r}"), "namespace": ns,
                        "uid": format!("p-{n}"),
                        "creationTimestamp": "2020-08-10T09:12:44Z",
                        "labels": {"app": format!("app-{app}"), "version": "v1", "pod-template-hash": "5d8f7c9b6"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                            "uid": format!("rs-{app}"), "controller": true, "blockOwnerDeletion": true}]
                    },
                    "spec": {
                        "serviceAccountName": format!("app-{app}"),
                        "containers": [
                            {"name": format!("app-{app}"), "image": "example/app:1", "ports": [{"containerPort": 9080, "protocol": "TCP"}]},
                            {"name": "istio-proxy", "image": "istio/proxyv2:1.4.10", "ports": [{"containerPort": 15090, "name": "http-envoy-prom", "protocol": "TCP"}]}
                        ]
                    },
                    "status": {"phase": "Running", "podIP": ip, "hostIP": format!("10.128.0.{}", n % 50)}
                }))
                .unwrap(),
            );
        }
    }
    (pods, replicasets)
}
