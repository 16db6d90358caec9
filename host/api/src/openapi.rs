//! The OpenAPI 3.1 description of the API, generated from the handlers themselves: every route
//! is registered through `utoipa_axum::routes!`, which reads the handler's `#[utoipa::path]`,
//! so a route cannot be served without being described. Schemas come from the response and
//! request types' `ToSchema` derives. Served at `GET /openapi.json`; the copy checked in at the
//! repository's top (`openapi.json`) must match it (`slotd openapi > openapi.json` rewrites it,
//! and a test compares the two).
//!
//! Errors every route can answer because of the layers around it (auth, the loopback rules,
//! admission, the deadline, the body cap) are added to each operation here, once, as shared
//! `components.responses`, rather than repeated on each handler; a handler lists only the
//! errors it gives itself, by status and description, and gets the problem+json body here.

use utoipa::Modify;
use utoipa::OpenApi;
use utoipa::openapi::path::{HttpMethod, Operation};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Content, Ref, RefOr, ResponseBuilder};

use super::error::{PROBLEM_JSON, Problem};

/// The document's fixed parts; paths are added by the routers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "slotd",
        description = "Slot-based scheduler for provider-limited asynchronous jobs. Tasks are \
                       split into units by a handler's `plan`; units wait for a slot of their \
                       pool, run at the provider, and are finalized into stored artifacts.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(Problem)),
    modifiers(&BearerAuth),
    tags(
        (name = "tasks", description = "Create, read, cancel and retry tasks"),
        (name = "events", description = "The durable unit event log, as JSON or live (SSE)"),
        (name = "pools", description = "Pools, their limits and slots"),
        (name = "handlers", description = "Loaded handler components and their history"),
        (name = "callbacks", description = "Provider webhooks (authenticated by the URL's token)"),
        (name = "operations", description = "Probes, metrics, this document and the console"),
    ),
    security(("api_key" = [])),
)]
pub struct ApiDoc;

/// The security scheme: `Authorization: Bearer <key>` from `[[api_keys]]`.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut http = Http::new(HttpAuthScheme::Bearer);
        http.description = Some(
            "An API key from `[[api_keys]]`. With no keys configured (loopback only), no \
             header is needed and every request acts for the tenant `local`."
                .into(),
        );
        components.add_security_scheme("api_key", SecurityScheme::Http(http));
    }
}

/// A shared error response: (component name, status, description).
type Shared = (&'static str, &'static str, &'static str);

const BAD_REQUEST: Shared = (
    "BadRequest",
    "400",
    "The request is malformed (bad JSON, unknown field or query parameter, bad value); \
     `field` names the culprit",
);
const UNAUTHORIZED: Shared = ("Unauthorized", "401", "Missing or unknown API key");
const FORBIDDEN: Shared = (
    "Forbidden",
    "403",
    "Without API keys: a cross-site write (its `Origin` is not loopback)",
);
const NOT_FOUND: Shared = ("NotFound", "404", "No such resource for this tenant");
const PAYLOAD_TOO_LARGE: Shared = (
    "PayloadTooLarge",
    "413",
    "The body is over `max_body_bytes`",
);
const UNSUPPORTED_MEDIA_TYPE: Shared = (
    "UnsupportedMediaType",
    "415",
    "Without API keys: a body not sent as `application/json`",
);
const MISDIRECTED: Shared = (
    "MisdirectedRequest",
    "421",
    "Without API keys: a `Host` that is not a loopback name (DNS-rebinding protection)",
);
const UNPROCESSABLE: Shared = (
    "Unprocessable",
    "422",
    "Well-formed but refused (the handler's `plan` said no, a value out of range)",
);
const RATE_LIMITED: Shared = (
    "RateLimited",
    "429",
    "The API key's rate limit is spent; see `Retry-After`",
);
const INTERNAL: Shared = (
    "Internal",
    "500",
    "slotd failed unexpectedly; the cause is in its log",
);
const UNAVAILABLE: Shared = (
    "Unavailable",
    "503",
    "A dependency is down, the server is busy, or the request ran past its deadline; see \
     `Retry-After`",
);

/// Every shared error response.
const SHARED: [Shared; 11] = [
    BAD_REQUEST,
    UNAUTHORIZED,
    FORBIDDEN,
    NOT_FOUND,
    PAYLOAD_TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    MISDIRECTED,
    UNPROCESSABLE,
    RATE_LIMITED,
    INTERNAL,
    UNAVAILABLE,
];

/// Add the shared error responses and attach, to each operation, those its layers can give:
/// every route may meet the loopback rules (421), admission (429, 503) and slotd's own
/// failure (500); authenticated routes 401; writes the body rules (400, 403, 413, 415).
pub fn add_layer_errors(doc: &mut utoipa::openapi::OpenApi) {
    let components = doc.components.get_or_insert_with(Default::default);
    for (name, _, description) in SHARED {
        let response = ResponseBuilder::new()
            .description(description)
            .content(
                PROBLEM_JSON,
                Content::new(Some(Ref::from_schema_name("Problem"))),
            )
            .build();
        components
            .responses
            .insert(name.to_string(), RefOr::T(response));
    }
    let global_auth = doc.security.clone().unwrap_or_default();
    for item in doc.paths.paths.values_mut() {
        let ops = [
            (HttpMethod::Get, item.get.as_mut()),
            (HttpMethod::Post, item.post.as_mut()),
            (HttpMethod::Put, item.put.as_mut()),
            (HttpMethod::Delete, item.delete.as_mut()),
        ];
        for (method, op) in ops {
            let Some(op) = op else { continue };
            let authenticated = match &op.security {
                Some(local) => !local.is_empty() && local.iter().any(|r| *r != Default::default()),
                None => !global_auth.is_empty(),
            };
            let mut wanted = vec![MISDIRECTED, RATE_LIMITED, INTERNAL, UNAVAILABLE];
            if authenticated {
                wanted.push(UNAUTHORIZED);
            }
            if method != HttpMethod::Get {
                wanted.extend([
                    BAD_REQUEST,
                    FORBIDDEN,
                    PAYLOAD_TOO_LARGE,
                    UNSUPPORTED_MEDIA_TYPE,
                ]);
            }
            attach(op, &wanted);
        }
    }
}

/// Reference each of `wanted` from `op`, unless the operation describes that status itself;
/// an error status a handler lists with only a description (`(status = 404, description =
/// "No such task")`) gets the problem+json body here.
fn attach(op: &mut Operation, wanted: &[Shared]) {
    for (status, response) in op.responses.responses.iter_mut() {
        if let RefOr::T(response) = response
            && response.content.is_empty()
            && (status.starts_with('4') || status.starts_with('5'))
        {
            response.content.insert(
                PROBLEM_JSON.to_string(),
                Content::new(Some(Ref::from_schema_name("Problem"))),
            );
        }
    }
    for (name, status, _) in wanted {
        op.responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| RefOr::Ref(Ref::new(format!("#/components/responses/{name}"))));
    }
}

/// The rendered document's last touches, where utoipa's rendering is not what OpenAPI means:
/// link field names (see [`fix_link_names`]) and parameters typed `[T, "null"]` (an optional
/// query or header parameter is absent, never null: a client sending the text `null` would
/// be told it matched the schema).
pub fn tidy(doc: &mut serde_json::Value) {
    fix_link_names(doc);
    let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) else {
        return;
    };
    let params = paths
        .values_mut()
        .filter_map(|item| item.as_object_mut())
        .flat_map(|item| item.values_mut())
        .filter_map(|op| op.get_mut("parameters").and_then(|p| p.as_array_mut()))
        .flatten();
    for param in params {
        let Some(ty) = param.pointer_mut("/schema/type") else {
            continue;
        };
        if let Some(types) = ty.as_array() {
            let kept: Vec<serde_json::Value> =
                types.iter().filter(|t| *t != "null").cloned().collect();
            *ty = match kept.as_slice() {
                [one] => one.clone(),
                _ => serde_json::Value::Array(kept),
            };
        }
    }
}

/// utoipa 5.5 writes a Link Object's fields in snake case (`operation_id`); OpenAPI names them
/// in camel case (`operationId`), and tools that follow links (schemathesis' stateful phase)
/// find none otherwise. Rename them in the rendered document.
fn fix_link_names(doc: &mut serde_json::Value) {
    const RENAMES: [(&str, &str); 3] = [
        ("operation_id", "operationId"),
        ("operation_ref", "operationRef"),
        ("request_body", "requestBody"),
    ];
    let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) else {
        return;
    };
    let responses = paths
        .values_mut()
        .filter_map(|item| item.as_object_mut())
        .flat_map(|item| item.values_mut())
        .filter_map(|op| op.get_mut("responses").and_then(|r| r.as_object_mut()))
        .flat_map(|r| r.values_mut());
    for response in responses {
        let Some(links) = response.get_mut("links").and_then(|l| l.as_object_mut()) else {
            continue;
        };
        for link in links.values_mut().filter_map(|l| l.as_object_mut()) {
            for (from, to) in RENAMES {
                if let Some(v) = link.remove(from) {
                    link.insert(to.to_string(), v);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "openapi_tests.rs"]
mod tests;
