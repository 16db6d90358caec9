//! Polling several units of one collection through its list endpoint
//! (`GET {collection}?pageNum=P&pageSize=S`, newest first): one request answers for every
//! unit found on the page, compared by `task_id`. The paging rules (how large a page, when to
//! stop and fall back to single queries) are the SDK's [`ListPoll`]; this is Kling's side.

use serde_json::Value;
use slotd_sdk::client::Call;
use slotd_sdk::polling::{Entry, ListLimits, ListPoll, Waiting};

use crate::answer::Problem;
use crate::job::Job;
use crate::task::TaskObject;

/// Kling's paging: up to 3 pages of at least 50 entries, 4 per unit due (other tasks of the
/// account are interleaved with ours), 10 minutes of clock skew between slotd and Kling.
pub const LIMITS: ListLimits = ListLimits {
    max_pages: 3,
    page_size_min: 50,
    page_size_per_unit: 4,
    page_size_max: 500,
    clock_skew_ms: 10 * 60 * 1000,
};

/// Look for the units `members` (indexes into `jobs`) on their collection's pages.
pub fn poll(members: &[usize], jobs: &[Job<'_>]) -> ListPoll {
    let waiting = members
        .iter()
        .map(|&i| Waiting {
            index: i,
            job_id: jobs[i].unit.provider_job_id.clone().unwrap_or_default(),
            submitted_at_ms: jobs[i].unit.submitted_at_ms,
        })
        .collect();
    let page_size_max = members
        .first()
        .map_or(LIMITS.page_size_max, |&i| jobs[i].page_size_max);
    ListPoll::new(
        waiting,
        ListLimits {
            page_size_max,
            ..LIMITS
        },
    )
}

/// The request for a page.
pub fn call(collection: &str, (page, size): (u32, u32)) -> Call {
    Call::Get(format!("{collection}?pageNum={page}&pageSize={size}"))
}

/// A page's length and readable task objects; `None` for a failed or malformed page.
pub fn page(answer: Result<Value, Problem>) -> Option<(usize, Vec<Entry<TaskObject>>)> {
    let Ok(Value::Array(entries)) = answer else {
        return None;
    };
    let tasks = entries.iter().filter_map(|e| TaskObject::parse(e).ok());
    let entries_read = tasks
        .map(|task| Entry {
            job_id: task.task_id.clone(),
            created_at_ms: task.created_at_ms,
            item: task,
        })
        .collect();
    Some((entries.len(), entries_read))
}
