//! A remote handler's `connection.authentication`: Istio's field names, files read and
//! PEM-checked at load, and every problem reported with its file, document and field path.

use std::path::Path;

use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile, Validated, validate};
use mixer_remote::{Authentication, TokenHeader, TokenSource};

// Only the PEM framing is checked at load (the DER inside is rustls's business at connect
// time), so any base64 body will do here.
const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBAAAA\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIBAAAA\n-----END PRIVATE KEY-----\n";

fn run(auth_yaml: &str) -> Result<Validated, Vec<String>> {
    let yaml = format!(
        "kind: handler\nmetadata: {{name: r}}\nspec:\n  adapter: mygrpc\n  connection:\n    address: 'localhost:9000'\n    authentication:\n{auth_yaml}"
    );
    validate(
        &[SourceFile::new("c.yaml", yaml)],
        &AdapterRegistry::new(),
        &ConfigOptions::default(),
    )
    .map_err(|errs| errs.iter().map(ToString::to_string).collect())
}

fn auth(auth_yaml: &str) -> Authentication {
    let v = run(auth_yaml).unwrap_or_else(|e| panic!("unexpected errors: {e:#?}"));
    let c = v.config.handlers[0].connection.clone().expect("connection");
    c.authentication.expect("authentication")
}

fn errors(auth_yaml: &str) -> Vec<String> {
    run(auth_yaml).expect_err("errors")
}

struct Files(tempfile::TempDir);

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, text) in [
            ("ca.pem", CERT),
            ("cert.pem", CERT),
            ("key.pem", KEY),
            ("token", "s3cret\n"),
            ("client-secret", "client-s3cret\n"),
            ("empty", ""),
            ("garbage.pem", "not a certificate"),
            ("broken.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n"),
        ] {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        Files(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.path().join(name).display().to_string()
    }
}

#[test]
fn tls_with_ca_token_and_server_name() {
    let f = Files::new();
    let a = auth(&format!(
        "      tls:\n        caCertificates: {}\n        tokenPath: {}\n        authHeader: BEARER\n        serverName: adapter.local\n",
        f.path("ca.pem"),
        f.path("token")
    ));
    let Authentication::Tls(tls) = &a else {
        panic!("{a:?}")
    };
    let ca = tls.ca_certificates.as_ref().expect("ca");
    assert_eq!(ca.path, Path::new(&f.path("ca.pem")));
    assert_eq!(&*ca.pem, CERT.as_bytes());
    let Some(TokenSource::File(token)) = &tls.token else {
        panic!("{tls:?}")
    };
    assert_eq!(token.path, Path::new(&f.path("token")));
    assert_eq!(token.header, TokenHeader::Bearer);
    assert_eq!(tls.server_name.as_deref(), Some("adapter.local"));
    // The dump names files, never their contents.
    let described = a.describe().to_string();
    assert!(described.contains("ca.pem") && described.contains("BEARER"));
    assert!(!described.contains("BEGIN") && !described.contains("s3cret"));
    // A custom header is kept in lower case; TLS without a token is fine.
    let a = auth(&format!(
        "      tls: {{tokenPath: {}, customHeader: X-Api-Key}}\n",
        f.path("token")
    ));
    let Authentication::Tls(tls) = a else {
        panic!()
    };
    assert_eq!(
        tls.token.expect("token").header(),
        &TokenHeader::Custom("x-api-key".into())
    );
    assert!(matches!(auth("      tls: {}\n"), Authentication::Tls(t) if t.token.is_none()));
}

#[test]
fn mutual_tls_reads_certificate_key_and_ca() {
    let f = Files::new();
    let a = auth(&format!(
        "      mutual:\n        clientCertificate: {}\n        privateKey: {}\n        caCertificates: {}\n        serverName: 127.0.0.1\n",
        f.path("cert.pem"),
        f.path("key.pem"),
        f.path("ca.pem")
    ));
    let Authentication::Mutual(m) = a else {
        panic!("{a:?}")
    };
    assert_eq!(&*m.private_key.pem, KEY.as_bytes());
    assert!(!format!("{m:?}").contains("BEGIN"), "keys stay out of logs");
    assert_eq!(m.server_name.as_deref(), Some("127.0.0.1"));
}

#[test]
fn missing_files_bad_pem_and_both_kinds_are_path_qualified_errors() {
    let f = Files::new();
    let p = "c.yaml: handler r: spec.connection.authentication";
    assert_eq!(
        errors("      tls:\n        caCertificates: /nonexistent/ca.pem\n"),
        [format!(
            "{p}.tls.caCertificates: cannot read /nonexistent/ca.pem: No such file or directory (os error 2)"
        )]
    );
    assert_eq!(
        errors(&format!(
            "      tls: {{caCertificates: {}}}\n",
            f.path("garbage.pem")
        )),
        [format!(
            "{p}.tls.caCertificates: {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            f.path("garbage.pem")
        )]
    );
    assert_eq!(
        errors(&format!(
            "      mutual: {{clientCertificate: {}, privateKey: {}}}\n",
            f.path("broken.pem"),
            f.path("cert.pem")
        )),
        [
            format!(
                "{p}.mutual.clientCertificate: {} is not valid PEM: a block has no END line",
                f.path("broken.pem")
            ),
            format!(
                "{p}.mutual.privateKey: {} holds no PEM private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)",
                f.path("cert.pem")
            ),
        ]
    );
    assert_eq!(
        errors(&format!(
            "      tls: {{}}\n      mutual: {{clientCertificate: {}, privateKey: {}}}\n",
            f.path("cert.pem"),
            f.path("key.pem")
        )),
        [format!("{p}: give either tls or mutual, not both")]
    );
}

#[test]
fn incomplete_or_unknown_settings_are_errors() {
    let f = Files::new();
    let p = "c.yaml: handler r: spec.connection.authentication";
    let token = f.path("token");
    let cases: Vec<(String, String)> = vec![
        ("      {}\n".into(), format!("{p}: expected tls or mutual")),
        (
            format!(
                "      mutual: {{clientCertificate: {}}}\n",
                f.path("cert.pem")
            ),
            format!(
                "{p}.mutual.privateKey: missing (mutual TLS needs the mixer's certificate and key)"
            ),
        ),
        (
            format!("      tls: {{tokenPath: {token}}}\n"),
            format!(
                "{p}.tls: tokenPath needs authHeader (PLAIN or BEARER) or customHeader to say how the token is sent"
            ),
        ),
        (
            "      tls: {authHeader: BEARER}\n".into(),
            format!(
                "{p}.tls.tokenPath: missing: authHeader and customHeader say how to send a token, and tokenPath or oauth where it comes from"
            ),
        ),
        (
            format!("      tls: {{tokenPath: {token}, authHeader: BASIC}}\n"),
            format!("{p}.tls.authHeader: unknown value \"BASIC\" (expected one of PLAIN, BEARER)"),
        ),
        (
            format!("      tls: {{tokenPath: {token}, authHeader: PLAIN, customHeader: x-key}}\n"),
            format!("{p}.tls.customHeader: give either authHeader or customHeader, not both"),
        ),
        (
            format!("      tls: {{tokenPath: {token}, customHeader: x-token-bin}}\n"),
            format!(
                "{p}.tls.customHeader: \"x-token-bin\" is a binary header (-bin); the token is text"
            ),
        ),
        (
            format!(
                "      tls: {{tokenPath: {}, authHeader: BEARER}}\n",
                f.path("empty")
            ),
            format!("{p}.tls.tokenPath: {} is empty", f.path("empty")),
        ),
        (
            "      tls: {serverName: 'not a name'}\n".into(),
            format!("{p}.tls.serverName: \"not a name\" is neither a DNS name nor an IP address"),
        ),
        (
            "      tls: {ca_certificates: /x}\n".into(),
            format!("{p}.tls.ca_certificates: unknown field (did you mean caCertificates?)"),
        ),
    ];
    for (yaml, expected) in cases {
        let got = errors(&yaml);
        assert!(
            got.len() == 1 && got[0] == expected,
            "for\n{yaml}expected\n  {expected}\ngot\n  {got:#?}"
        );
    }
    // mutual without either file names both.
    assert_eq!(errors("      mutual: {}\n").len(), 2);
}

#[test]
fn oauth_reads_the_client_credentials_grant_and_defaults_to_a_bearer_header() {
    let f = Files::new();
    let secret = f.path("client-secret");
    let a = auth(&format!(
        "      tls:\n        caCertificates: {}\n        oauth:\n          clientId: mixer\n          clientSecret: {secret}\n          tokenUrl: https://idp.example/oauth2/token\n          scopes: [adapter.check, adapter.report]\n          endpointParams: {{audience: adapters, resource: 'urn:adapter'}}\n",
        f.path("ca.pem")
    ));
    let Authentication::Tls(tls) = &a else {
        panic!("{a:?}")
    };
    let Some(TokenSource::OAuth(oauth)) = &tls.token else {
        panic!("{tls:?}")
    };
    assert_eq!(oauth.client_id, "mixer");
    assert_eq!(oauth.client_secret, Path::new(&secret));
    assert_eq!(oauth.token_url, "https://idp.example/oauth2/token");
    assert_eq!(oauth.scopes, ["adapter.check", "adapter.report"]);
    assert_eq!(
        oauth.endpoint_params.iter().collect::<Vec<_>>(),
        [
            (&"audience".to_string(), &"adapters".to_string()),
            (&"resource".to_string(), &"urn:adapter".to_string())
        ]
    );
    // Istio sent OAuth tokens as bearer tokens, and so does a block without authHeader.
    assert_eq!(oauth.header, TokenHeader::Bearer);
    // Neither the secret nor endpoint parameter values reach a dump or a log.
    let described = a.describe().to_string();
    assert!(
        described.contains("\"clientId\":\"mixer\"")
            && described.contains("client-secret")
            && described.contains("idp.example")
            && described.contains("audience"),
        "{described}"
    );
    let debug = format!("{a:?}");
    for text in [&described, &debug] {
        assert!(
            !text.contains("client-s3cret") && !text.contains("urn:adapter"),
            "{text}"
        );
    }

    // authHeader and customHeader, when given, say where the token goes.
    let tls = |extra: &str| {
        let a = auth(&format!(
            "      tls: {{oauth: {{clientId: m, clientSecret: {secret}, tokenUrl: 'http://127.0.0.1:8080/t'}}{extra}}}\n"
        ));
        match a {
            Authentication::Tls(t) => t.token.expect("token").header().clone(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(tls(", authHeader: PLAIN"), TokenHeader::Plain);
    assert_eq!(
        tls(", customHeader: X-Token"),
        TokenHeader::Custom("x-token".into())
    );
    assert_eq!(tls(""), TokenHeader::Bearer);
}

#[test]
fn oauth_over_plain_http_to_another_host_loads_with_a_warning() {
    let f = Files::new();
    let yaml = format!(
        "      tls: {{oauth: {{clientId: m, clientSecret: {}, tokenUrl: 'http://idp.example/t'}}}}\n",
        f.path("client-secret")
    );
    let warnings: Vec<String> = run(&yaml)
        .expect("valid")
        .warnings
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        warnings,
        [
            "c.yaml: handler r: spec.connection.authentication.tls.oauth.tokenUrl: the client secret is sent to idp.example unencrypted: use https://"
        ]
    );
    // Loopback is not the network.
    let yaml = yaml.replace("idp.example", "localhost:9000");
    assert!(run(&yaml).expect("valid").warnings.is_empty());
}

#[test]
fn oauth_problems_are_errors_at_their_field() {
    let f = Files::new();
    let p = "c.yaml: handler r: spec.connection.authentication.tls";
    let secret = f.path("client-secret");
    let url = "https://idp.example/token";
    let oauth = |fields: &str| format!("      tls: {{oauth: {{{fields}}}}}\n");
    let cases: Vec<(String, String)> = vec![
        (
            oauth(&format!("clientSecret: {secret}, tokenUrl: {url}")),
            format!("{p}.oauth.clientId: missing (the id the token endpoint knows the mixer by)"),
        ),
        (
            oauth(&format!(
                "clientId: '', clientSecret: {secret}, tokenUrl: {url}"
            )),
            format!("{p}.oauth.clientId: empty (the id the token endpoint knows the mixer by)"),
        ),
        (
            oauth(&format!("clientId: m, tokenUrl: {url}")),
            format!(
                "{p}.oauth.clientSecret: missing (the path of the file holding the client secret)"
            ),
        ),
        (
            oauth(&format!("clientId: m, clientSecret: {secret}")),
            format!("{p}.oauth.tokenUrl: missing (the token endpoint's URL)"),
        ),
        (
            oauth(&format!(
                "clientId: m, clientSecret: /nonexistent/secret, tokenUrl: {url}"
            )),
            format!(
                "{p}.oauth.clientSecret: cannot read /nonexistent/secret: No such file or directory (os error 2)"
            ),
        ),
        (
            oauth(&format!(
                "clientId: m, clientSecret: {}, tokenUrl: {url}",
                f.path("empty")
            )),
            format!("{p}.oauth.clientSecret: {} is empty", f.path("empty")),
        ),
        (
            oauth(&format!(
                "clientId: m, clientSecret: {secret}, tokenUrl: 'ftp://idp.example/token'"
            )),
            format!(
                "{p}.oauth.tokenUrl: \"ftp://idp.example/token\" is not an http:// or https:// URL"
            ),
        ),
        (
            oauth(&format!(
                "clientId: m, clientSecret: {secret}, tokenUrl: 'idp.example:443'"
            )),
            format!("{p}.oauth.tokenUrl: \"idp.example:443\" is not an http:// or https:// URL"),
        ),
        (
            oauth(&format!(
                "clientId: m, clientSecret: {secret}, tokenUrl: {url}, scope: [a]"
            )),
            format!("{p}.oauth.scope: unknown field (did you mean scopes?)"),
        ),
        (
            oauth(&format!(
                "clientId: m, clientSecret: {secret}, tokenUrl: {url}, scopes: [a, 'b c']"
            )),
            format!(
                "{p}.oauth.scopes[1]: \"b c\" is not a scope (printable ASCII without spaces, quotes or backslashes)"
            ),
        ),
        (
            oauth(&format!(
                "clientId: m, clientSecret: {secret}, tokenUrl: {url}, endpointParams: {{grant_type: password}}"
            )),
            format!(
                "{p}.oauth.endpointParams.grant_type: set by the mixer (the mixer asks for client_credentials)"
            ),
        ),
        (
            oauth(&format!(
                "clientId: m, clientSecret: {secret}, tokenUrl: {url}, endpointParams: {{audience: 5}}"
            )),
            format!("{p}.oauth.endpointParams.audience: expected a string, found a number"),
        ),
        (
            "      tls: {oauth: https://idp.example/token}\n".into(),
            format!("{p}.oauth: expected a mapping, found a string"),
        ),
        (
            format!(
                "      tls: {{tokenPath: {}, authHeader: BEARER, oauth: {{clientId: m, clientSecret: {secret}, tokenUrl: {url}}}}}\n",
                f.path("token")
            ),
            format!("{p}: give either tokenPath or oauth, not both"),
        ),
        (
            format!(
                "      tls: {{oauth: {{clientId: m, clientSecret: {secret}, tokenUrl: {url}}}, authHeader: BASIC}}\n"
            ),
            format!("{p}.authHeader: unknown value \"BASIC\" (expected one of PLAIN, BEARER)"),
        ),
    ];
    for (yaml, expected) in cases {
        let got = errors(&yaml);
        assert!(
            got.len() == 1 && got[0] == expected,
            "for\n{yaml}expected\n  {expected}\ngot\n  {got:#?}"
        );
    }
    // All three required fields missing: three errors, one per field.
    assert_eq!(errors("      tls: {oauth: {}}\n").len(), 3);
}

#[test]
fn a_changed_certificate_changes_the_handler_build() {
    let f = Files::new();
    let yaml = format!("      tls: {{caCertificates: {}}}\n", f.path("ca.pem"));
    let before = run(&yaml).expect("valid").config.handlers[0].clone();
    std::fs::write(f.0.path().join("ca.pem"), format!("{CERT}{CERT}")).expect("rewrite");
    let after = run(&yaml).expect("valid").config.handlers[0].clone();
    assert!(
        !before.same_build(&after),
        "a reload after a certificate rotation must rebuild the handler"
    );
}

#[test]
fn an_http_address_cannot_use_tls() {
    let yaml = "kind: handler\nmetadata: {name: r}\nspec:\n  adapter: mygrpc\n  connection:\n    address: 'http://localhost:9000'\n    authentication: {tls: {}}\n";
    let errors: Vec<String> = validate(
        &[SourceFile::new("c.yaml", yaml)],
        &AdapterRegistry::new(),
        &ConfigOptions::default(),
    )
    .expect_err("errors")
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(
        errors,
        [
            "c.yaml: handler r: spec.connection.address: an http:// address cannot use TLS: write host:port or https://"
        ]
    );
}
