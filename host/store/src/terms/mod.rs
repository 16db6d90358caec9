//! What a unit and its task carry beyond their status, by concept: [`deadlines`] (a task's
//! terms, the sweep's reads), [`accounts`] (the submit marker's grants and accounts),
//! [`creates`] (the create log that pools' quotas count) and [`budgets`] (reservations, settling, tenant budgets) and [`spend`] (providers' spend limits, checked with budgets). Each module's statements are written
//! once for both drivers (`on_both_drivers!`), into its own `sqlite` and `postgres` modules.

pub mod accounts;
pub mod budgets;
pub mod creates;
pub mod deadlines;
pub mod grant;
pub mod routes;
pub mod spend;

pub use accounts::{Marked, Submission};
pub(crate) use accounts::{by_account, marked};
pub use budgets::{Budget, Settle, Usage, parse_cost};
pub(crate) use budgets::{Checked, budgeted, settlement, settlements};
pub use creates::Create;
pub use deadlines::PendingGroup;
pub use grant::{Bind, Grant};
/// A task's deadline terms, a model type (`slotd_core::model`), under the name the store's
/// task records have always given it.
pub use slotd_core::model::TaskTerms;
pub use spend::{SpendLimit, SpendScope, SpendTerms, period_start};
