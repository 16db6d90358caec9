//! The OpenAPI document against the code it describes: the checked-in copy is the generated
//! one, every documented operation is served, the served document is the generated one, and
//! the documented request body is the one `parse_request` accepts.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::Value;

use super::super::test_harness::harness_with;
use super::super::{openapi, openapi_json_text};
use slotd_core::config::Config;

/// The repository's `openapi.json`.
fn checked_in_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../openapi.json")
}

#[test]
fn checked_in_document_is_the_generated_one() {
    let generated = openapi_json_text();
    let path = checked_in_path();
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        if std::env::var_os("SLOTD_BLESS").is_some() {
            std::fs::write(&path, &generated).expect("write openapi.json");
            return;
        }
        panic!(
            "{} differs from the API's generated document; regenerate it with \
             `cargo run -p slotd -- openapi > openapi.json` (or SLOTD_BLESS=1 cargo test \
             checked_in_document) and review the diff",
            path.display()
        );
    }
}

#[test]
fn document_is_3_1_with_unique_operations_and_resolvable_links() {
    let doc: Value = serde_json::from_str(&openapi_json_text()).expect("JSON");
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1"))
    );
    let mut ids = std::collections::BTreeSet::new();
    let mut links = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(ids.insert(id.to_string()), "operationId {id} repeats");
            // The bare callback URL only ever refuses.
            let succeeds = op["responses"]
                .as_object()
                .is_some_and(|r| r.keys().any(|s| s.starts_with('2')));
            assert_eq!(
                succeeds,
                id != "callback_without_token",
                "{method} {path}: its documented success"
            );
            for response in op["responses"]
                .as_object()
                .into_iter()
                .flat_map(|r| r.values())
            {
                if let Some(l) = response["links"].as_object() {
                    links.extend(l.values().map(|l| l["operationId"].clone()));
                }
            }
        }
    }
    assert!(links.len() >= 4, "create links to read, cancel, retry, …");
    for target in links {
        let target = target.as_str().expect("link by operationId");
        assert!(
            ids.contains(target),
            "a link names {target}, no such operation"
        );
    }
    // Every reference resolves.
    let text = openapi_json_text();
    for reference in text.split("\"$ref\": \"#/").skip(1) {
        let pointer = reference.split('"').next().unwrap_or_default();
        assert!(
            doc.pointer(&format!("/{pointer}")).is_some(),
            "#/{pointer} does not resolve"
        );
    }
    assert!(text.contains("#/components/responses/RateLimited"));
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
}

/// Every operation in the document reaches a handler (not the router's 404/405 fallbacks).
#[tokio::test]
async fn every_documented_operation_is_served() {
    let h = harness_with(Config::default()).await;
    let doc = openapi();
    let mut checked = 0;
    for (path, item) in &doc.paths.paths {
        let concrete = path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "x" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        let ops = [
            (Method::GET, item.get.is_some()),
            (Method::POST, item.post.is_some()),
            (Method::PUT, item.put.is_some()),
            (Method::DELETE, item.delete.is_some()),
        ];
        for (method, present) in ops {
            if !present {
                continue;
            }
            let req = Request::builder()
                .method(method.clone())
                .uri(&concrete)
                .header("host", "localhost")
                .header("content-type", "application/json")
                .body(Body::from("{}"))
                .expect("request");
            let (status, _, body) = h.call(req).await;
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert!(
                body["detail"].as_str() != Some("no such route"),
                "{method} {path} is documented but not routed"
            );
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} operations documented");
}

#[tokio::test]
async fn served_document_is_the_generated_one() {
    let h = harness_with(Config::default()).await;
    let req = Request::get("/openapi.json")
        .header("host", "localhost")
        .body(Body::empty())
        .expect("request");
    let (status, _, body) = h.call(req).await;
    assert_eq!(status, StatusCode::OK);
    let generated: Value = serde_json::from_str(&openapi_json_text()).expect("JSON");
    assert_eq!(body, generated);
}

/// The documented request body of a create lists exactly the fields `parse_request` takes.
#[test]
fn create_body_matches_the_parser() {
    let doc: Value = serde_json::from_str(&openapi_json_text()).expect("JSON");
    let schema = &doc["components"]["schemas"]["CreateBody"];
    let documented: std::collections::BTreeSet<&str> = schema["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .map(String::as_str)
        .collect();
    let known: std::collections::BTreeSet<&str> = super::super::task_create::KNOWN_FIELDS
        .into_iter()
        .collect();
    assert_eq!(documented, known);
    assert_eq!(schema["required"], serde_json::json!(["payload"]));
    assert_eq!(schema["additionalProperties"], false);
}
