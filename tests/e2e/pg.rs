//! PostgreSQL for end-to-end runs: a fresh schema per test on `SLOTD_TEST_DATABASE_URL` (or
//! `postgres://root@127.0.0.1:5432/test`, or the `postgres` user if `root` is refused),
//! dropped when the test ends.

use uuid::Uuid;

/// A schema that lives as long as this value; `url()` points a slotd at it.
pub struct PgSchema {
    base: String,
    name: String,
}

impl PgSchema {
    pub async fn create() -> PgSchema {
        let base = base_url().await;
        let name = format!("e2e_{}", Uuid::new_v4().simple());
        let admin = sqlx::PgPool::connect(&base)
            .await
            .expect("connect to PostgreSQL");
        sqlx::query(&format!("CREATE SCHEMA {name}"))
            .execute(&admin)
            .await
            .expect("create schema");
        admin.close().await;
        PgSchema { base, name }
    }

    /// A `database_url` whose sessions use only this schema (and are named after it, so the
    /// drop can end them).
    pub fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!(
            "{}{sep}application_name={name}&options[search_path]={name}",
            self.base,
            name = self.name
        )
    }
}

async fn base_url() -> String {
    if let Ok(url) = std::env::var("SLOTD_TEST_DATABASE_URL") {
        return url;
    }
    let mut last = String::new();
    for user in ["root", "postgres"] {
        let url = format!("postgres://{user}@127.0.0.1:5432/test");
        match sqlx::PgPool::connect(&url).await {
            Ok(pool) => {
                pool.close().await;
                return url;
            }
            Err(e) => last = format!("{url}: {e}"),
        }
    }
    panic!("no PostgreSQL for the e2e tests (set SLOTD_TEST_DATABASE_URL): {last}")
}

impl Drop for PgSchema {
    /// From a thread of its own: `Drop` cannot await, and the test's runtime may be ending.
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let admin = sqlx::PgPool::connect(&base).await.expect("connect");
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = $1 AND pid <> pg_backend_pid()",
                )
                .bind(&name)
                .execute(&admin)
                .await
                .expect("end sessions");
                sqlx::query(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .execute(&admin)
                    .await
                    .expect("drop schema");
                admin.close().await;
            });
        })
        .join();
        if dropped.is_err() && !std::thread::panicking() {
            panic!("dropping test schema {}", self.name);
        }
    }
}
